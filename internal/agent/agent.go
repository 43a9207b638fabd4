package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/agent/ckptsaver"
	"github.com/roverml/rover/internal/agent/hostmaster"
	"github.com/roverml/rover/internal/agent/privdir"
	"github.com/roverml/rover/internal/agent/stacks"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/metrics"
	"github.com/roverml/rover/internal/retry"
	"github.com/roverml/rover/internal/runconfig"
	"github.com/roverml/rover/internal/shardbatch"
)

// Options carries what Run needs besides the command line.
type Options struct {
	Stdout, Stderr io.Writer
	Logger         *slog.Logger
	// Getenv defaults to os.Getenv.
	Getenv func(string) string
	// PythonExec is the interpreter for script entrypoints (torchrun's
	// PYTHON_EXEC); default: $PYTHON_EXEC, else "python3".
	PythonExec string
	// StartMaster starts the embedded master of a standalone job (`rover run
	// --standalone`); programs pass standalone.Start. Package agent itself
	// reaches masters only through package client and never links one. A
	// standalone job fails to start without it.
	StartMaster StartMaster
	// Devices samples the node's accelerators for the master's diagnosis
	// (devices.go); nil: none.
	Devices DeviceMonitor
}

// StartMaster starts a standalone job's master and returns it serving.
type StartMaster func(ctx context.Context, spec EmbeddedMaster) (RunningMaster, error)

// EmbeddedMaster is what a standalone job's master, or the master an agent
// hosts for a job without `rover master`, is started with.
type EmbeddedMaster struct {
	Job        string
	Rendezvous jobconfig.Config
	// StateDir is the directory of the master's durable state: the
	// "master" directory in the agent's log directory.
	StateDir string
	Logger   *slog.Logger
	// Listener, when set, is where the master serves (the job's endpoint,
	// which the hosting agent bound); nil is a loopback port. The master
	// owns it, and closes it even when it fails to start.
	Listener net.Listener
	// Token is the job's token; "" makes a fresh one.
	Token string
	// Metrics asks the master for its Prometheus metrics, which the agent
	// serves with its own (RunningMaster.Metrics).
	Metrics bool
	// Drain is how long Stop waits, once the job ended, for the other
	// agents to hear the outcome and go; 0 does not wait.
	Drain time.Duration
}

// RunningMaster is an embedded master, serving.
type RunningMaster struct {
	Addr  string
	Token string
	// Stop stops the master and waits for it.
	Stop func()
	// Failed receives the master's error if it stops on its own before
	// Stop (its state store refused a write): the agent then fails the job.
	// nil never fires.
	Failed <-chan error
	// Metrics gathers the master's metrics when EmbeddedMaster.Metrics
	// asked for them; nil otherwise.
	Metrics prometheus.Gatherer
	// Dashboard is the master's web dashboard (internal/dashboard), which
	// the agent serves at / on its metrics address, when
	// EmbeddedMaster.Metrics asked for it; nil otherwise.
	Dashboard http.Handler
}

type agent struct {
	cfg    *runconfig.Config
	opts   Options
	log    *slog.Logger
	client roverv1connect.MasterServiceClient
	addr   string // the master's
	nodeID string
	// incarnation is this process's random id, on every session: the
	// master tells the agent's own reconnects from another agent that
	// claims its node id (client.IncarnationHeader).
	incarnation string
	host        string
	argv        []string
	logDir      string // the run's: <--log-dir>/<run id>_<random>
	tempDir     string // the temporary directory holding logDir without --log-dir
	out         io.Writer
	errOut      io.Writer
	// clock times the retries of calls to the master; nil is the wall clock.
	clock retry.Clock

	// joined is the node rank and round of the newest join, written by the
	// session goroutine and the loop.
	joined joinedState
	// hosted is true in a job without `rover master` (see package hostmaster), and
	// tokenFrom says where its token came from.
	hosted    bool
	tokenFrom hostmaster.Source

	views *latestView
	local *localAPI
	// standby keeps the next worker interpreters ready (standby.go); nil
	// with --warm-standby=false or --no-python.
	standby *standbyPool
	// ckpt is the flash-checkpoint saver: the workers' arenas, the
	// persistence of their snapshots and the job's checkpoint storage.
	ckpt *ckptsaver.Saver
	// peerPort is the port of the agent's peer server (peerrestore.go),
	// and peerToken the job's token it fetches from peers with.
	peerPort, peerToken string
	// peerRestoreFailed: the last round's fetch from peers failed and no
	// workers started; the next join says so (JoinRequest.peer_restore_failed).
	peerRestoreFailed atomic.Bool
	// shards sends the workers' lease and complete calls to the master in
	// batches.
	shards *shardbatch.Batcher
	// progress sums the workers' progress reports for the heartbeats;
	// hangs collects the running group's stacks when the job hangs.
	progress *progressBook
	hangs    *stacks.Collector
	// events queues the node's lifecycle events for the heartbeats, and
	// life makes them from what the agent sees of its workers.
	events *eventQueue
	life   *lifecycle
	// wroteErrorFile is set once the agent's own error file
	// ($TORCHELASTIC_ERROR_FILE) holds the job's root cause.
	wroteErrorFile bool
	// metrics are the agent's Prometheus metrics (metrics.go); nil without
	// --metrics-addr. saver is ckpt, for their scrapes.
	metrics *metrics.Agent
	saver   atomic.Pointer[ckptsaver.Saver]
	// dashboard is the web dashboard of the master the agent runs, served
	// on its metrics address; nil until it runs one.
	dashboard atomic.Pointer[http.Handler]
}

// watchMaster ends the agent's run (endRun) when the master it runs stops
// on its own: the workers are stopped and the agent exits ExitStateFailed
// with the master's error, rather than train on with nothing durable.
func (a *agent) watchMaster(ctx context.Context, m RunningMaster, endRun context.CancelCauseFunc) {
	if m.Failed == nil {
		return
	}
	select {
	case err := <-m.Failed:
		a.log.Error("the job's master, which this agent runs, stopped: stopping the job", "err", err)
		endRun(exitErr(ExitStateFailed, "the job's master (run by this agent) stopped: %w; "+
			"the job cannot go on without it. Free space on (or repair) the disk of its state, %s, and run the job again: "+
			"it resumes from that state", err, filepath.Join(a.logDir, "master")))
	case <-ctx.Done():
	}
}

// startMaster starts the embedded master of a standalone job, or the
// master this agent hosts (spec's Listener, Token and Drain), with its
// durable state in the "master" directory of the agent's log directory.
func (a *agent) startMaster(ctx context.Context, spec EmbeddedMaster) (RunningMaster, error) {
	if a.opts.StartMaster == nil {
		if spec.Listener != nil {
			spec.Listener.Close()
		}
		return RunningMaster{}, exitErr(ExitRendezvous, "start the embedded master: this program cannot run one (agent.Options.StartMaster is unset); run `rover master` and pass --rdzv-endpoint")
	}
	spec.Job, spec.Rendezvous, spec.Logger = a.cfg.RunID, a.rendezvous(), a.opts.Logger
	spec.StateDir = filepath.Join(a.logDir, "master")
	spec.Metrics = a.metrics != nil
	m, err := a.opts.StartMaster(ctx, spec)
	if err != nil {
		return RunningMaster{}, exitErr(ExitRendezvous, "start the embedded master: %w", err)
	}
	a.metrics.Add(m.Metrics)
	if m.Dashboard != nil {
		a.dashboard.Store(&m.Dashboard)
	}
	return m, nil
}

// token is the job's token: from --token-file (or ROVER_TOKEN_FILE) when
// given, else from ROVER_TOKEN.
func (a *agent) token() (string, error) {
	t, err := client.Token(a.cfg.TokenFile, a.opts.Getenv)
	if errors.Is(err, client.ErrNoToken) {
		return "", exitErr(ExitUsage, "joining the master at %s needs the job's token: pass --token-file PATH (the file the master wrote) or set ROVER_TOKEN", a.cfg.RdzvEndpoint)
	}
	if err != nil {
		return "", exitErr(ExitUsage, "%w", err)
	}
	return t, nil
}

// rendezvous is the rendezvous configuration the agent joins with.
func (a *agent) rendezvous() jobconfig.Config {
	c := a.cfg.Policy().JobConfig()
	if a.cfg.CheckpointDir != "" {
		c.Checkpoint = jobconfig.CheckpointStorage{URL: a.cfg.CheckpointDir, Keep: a.cfg.CheckpointKeep, KeepDefault: !a.cfg.CheckpointKeepSet}
	}
	return c
}

func (a *agent) defaultNodeID() string {
	if a.cfg.NodeID != "" {
		return a.cfg.NodeID
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "node"
	}
	if a.cfg.NodeRank >= 0 {
		return fmt.Sprintf("%s-rank%d", host, a.cfg.NodeRank)
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// openLogDir creates the run's log directory in torchrun's layout:
// <--log-dir>/<run id>_<random>, under which each attempt (restart count)
// has attempt_<N>/<local rank>/ with stdout.log, stderr.log and error.json.
// Without --log-dir it goes in a temporary directory, removed when the job
// succeeds.
func (a *agent) openLogDir() error {
	base := a.cfg.LogDir
	if base == "" {
		dir, err := os.MkdirTemp("", "rover-")
		if err != nil {
			return fmt.Errorf("create a log directory: %w", err)
		}
		base, a.tempDir = dir, dir
	} else if err := os.MkdirAll(base, 0o700); err != nil {
		return exitErr(ExitUsage, "create --log-dir: %w", err)
	}
	dir, err := os.MkdirTemp(base, privdir.SafeName(a.cfg.RunID)+"_")
	if err != nil {
		return exitErr(ExitUsage, "create the run's directory in --log-dir %s: %w", base, err)
	}
	a.logDir = dir
	a.log.Info("log directory set", "dir", dir)
	return nil
}

// routeAddr returns this host's address on the route to the master: where
// workers on other nodes can reach this node.
func routeAddr(masterAddr string) string {
	c, err := net.Dial("udp", masterAddr)
	if err != nil {
		host, _ := os.Hostname()
		return host
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String()
}

// latestView holds the newest view from the master; readers are woken
// through a channel of size one, so a slow reader only ever sees the latest.
type latestView struct {
	mu     sync.Mutex
	view   *roverv1.NodeView
	err    error
	notify chan struct{}
}

func newLatestView() *latestView { return &latestView{notify: make(chan struct{}, 1)} }

func (l *latestView) publish(v *roverv1.NodeView, err error) {
	l.mu.Lock()
	if v != nil {
		l.view = v
	}
	l.err = err
	l.mu.Unlock()
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

func (l *latestView) get() (*roverv1.NodeView, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.view, l.err
}
