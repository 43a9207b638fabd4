package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/master"
	"github.com/roverml/rover/internal/proc"
	"github.com/roverml/rover/internal/runconfig"
	"github.com/roverml/rover/internal/shardbatch"
	"golang.org/x/sync/errgroup"
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
}

type agent struct {
	cfg     *runconfig.Config
	opts    Options
	log     *slog.Logger
	client  roverv1connect.MasterServiceClient
	nodeID  string
	host    string
	argv    []string
	logDir  string
	tempDir bool
	out     io.Writer
	errOut  io.Writer

	// joined is the node rank and round of the newest join, written by the
	// session goroutine and the loop.
	joined    joinedState
	views     *latestView
	local     *localAPI
	arenas    *arenas
	persister *persister
	// shards sends the workers' lease and complete calls to the master in
	// batches.
	shards *shardbatch.Batcher
}

// Run runs the node agent until the job ends or ctx is cancelled. Its error
// maps to the process exit code through ExitCode.
func Run(ctx context.Context, cfg *runconfig.Config, opts Options) error {
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(opts.Stderr, nil))
	}
	if opts.PythonExec == "" {
		opts.PythonExec = opts.Getenv("PYTHON_EXEC")
	}
	if opts.PythonExec == "" {
		opts.PythonExec = "python3"
	}
	a := &agent{
		cfg:    cfg,
		opts:   opts,
		argv:   cfg.WorkerArgv(opts.PythonExec),
		out:    proc.NewSyncWriter(opts.Stdout),
		errOut: proc.NewSyncWriter(opts.Stderr),
		views:  newLatestView(),
	}
	addr, token, stopMaster, err := a.connectMaster(ctx)
	if err != nil {
		return err
	}
	defer stopMaster()
	httpClient := client.NewHTTPClient()
	defer httpClient.CloseIdleConnections()
	a.client = client.New(httpClient, addr, token)
	a.shards = shardbatch.New(a.client, shardbatch.Options{MaxOps: client.MaxBatchOps})
	a.nodeID = a.defaultNodeID()
	a.host = cfg.LocalAddr
	if a.host == "" {
		a.host = routeAddr(addr)
	}
	a.log = opts.Logger.With("component", "agent", "job", cfg.RunID, "node", a.nodeID)
	if err := a.openLogDir(); err != nil {
		return err
	}
	a.persister = newPersister(a)
	self := arenaOwner{NodeID: a.nodeID, Generated: cfg.NodeID == "" && cfg.NodeRank < 0}
	if a.arenas, err = newArenas(jobKey(cfg.RunID, token), self, cfg.NprocPerNode); err != nil {
		return err
	}
	defer a.arenas.close()
	if ranks := a.arenas.adopted(); len(ranks) > 0 {
		a.log.Info("adopted the checkpoint arenas of a killed agent of this job", "local_ranks", ranks)
	}
	local, err := a.startLocalAPI()
	if err != nil {
		return err
	}
	defer local.close()
	a.local = local
	if needsOMPWarning(cfg.NprocPerNode) {
		a.log.Warn("setting OMP_NUM_THREADS=1 for each worker to avoid overloading the node; tune it for best performance")
	}
	bg, bgctx := errgroup.WithContext(ctx)
	bgctx, stopBackground := context.WithCancel(bgctx)
	bg.Go(func() error { a.persister.run(bgctx); return nil })
	bg.Go(func() error { a.shards.Run(bgctx); return nil })
	firstJoin := make(chan error, 1) // written once by the session goroutine
	bg.Go(func() error { a.sessionLoop(bgctx, firstJoin); return nil })
	select {
	case err = <-firstJoin:
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	if err == nil {
		err = a.loop(ctx)
	}
	stopBackground()
	_ = bg.Wait()
	if err == nil && a.tempDir {
		os.RemoveAll(a.logDir)
	}
	return err
}

// connectMaster returns the master's address and token, starting an embedded
// master for a standalone job.
func (a *agent) connectMaster(ctx context.Context) (addr, token string, stop func(), err error) {
	cfg := a.cfg
	if cfg.Standalone {
		token = master.NewToken()
		preset := &master.RendezvousPreset{}
		*preset = presetOf(cfg)
		m, err := master.New(ctx, master.Config{
			Listen: "127.0.0.1:0", Job: cfg.RunID, Token: token, Preset: preset,
			Logger: a.opts.Logger,
		})
		if err != nil {
			return "", "", nil, exitErr(ExitRendezvous, "start the embedded master: %w", err)
		}
		mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = m.Run(mctx)
		}()
		return m.Addr(), token, func() { cancel(); <-done }, nil
	}
	token, err = a.token()
	if err != nil {
		return "", "", nil, err
	}
	return cfg.RdzvEndpoint, token, func() {}, nil
}

func (a *agent) token() (string, error) {
	if t := strings.TrimSpace(a.opts.Getenv("ROVER_TOKEN")); t != "" {
		return t, nil
	}
	path := a.cfg.TokenFile
	if path == "" {
		return "", exitErr(ExitUsage, "joining the master at %s needs the job's token: pass --token-file PATH (the file the master wrote) or set ROVER_TOKEN", a.cfg.RdzvEndpoint)
	}
	t, err := client.ReadToken(path)
	if err != nil {
		return "", exitErr(ExitUsage, "%w", err)
	}
	return t, nil
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

func (a *agent) openLogDir() error {
	if a.cfg.LogDir != "" {
		dir := filepath.Join(a.cfg.LogDir, a.cfg.RunID, a.nodeID)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return exitErr(ExitUsage, "create --log-dir: %w", err)
		}
		a.logDir = dir
		return nil
	}
	dir, err := os.MkdirTemp("", "rover-"+sanitize(a.cfg.RunID)+"-")
	if err != nil {
		return fmt.Errorf("create a log directory: %w", err)
	}
	a.logDir, a.tempDir = dir, true
	return nil
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == os.PathSeparator || r < ' ' {
			return '_'
		}
		return r
	}, s)
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

func presetOf(cfg *runconfig.Config) master.RendezvousPreset {
	var p master.RendezvousPreset
	p.Rendezvous.MinNodes = cfg.MinNodes
	p.Rendezvous.MaxNodes = cfg.MaxNodes
	p.Rendezvous.NodeUnit = cfg.NodeUnit
	p.Rendezvous.MaxRestarts = cfg.MaxRestarts
	p.Rendezvous.LastCall = cfg.LastCallTimeout
	p.Rendezvous.JoinTimeout = cfg.JoinTimeout
	p.Nodes.HeartbeatTimeout = cfg.HeartbeatTimeout
	p.Nodes.DisconnectGrace = cfg.DisconnectGrace
	return p
}

// retry calls f until it succeeds, fails with a non-retryable error, or the
// timeout passes; with exponential backoff from 100ms to 3s.
func retry(ctx context.Context, timeout time.Duration, f func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	backoff := 100 * time.Millisecond
	for {
		err := f(ctx)
		if err == nil || !client.Retryable(err) || ctx.Err() != nil {
			return err
		}
		if time.Now().Add(backoff).After(deadline) {
			return err
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return err
		}
		backoff = min(backoff*2, 3*time.Second)
	}
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

// call retries a report to the master a few times.
func (a *agent) call(ctx context.Context, what string, f func(context.Context) error) {
	if err := retry(ctx, 30*time.Second, f); err != nil && ctx.Err() == nil {
		a.log.Warn("could not "+what, "err", err)
	}
}

// leave tells the master this node is going away; best effort.
func (a *agent) leave(reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = a.client.Leave(ctx, connect.NewRequest(&roverv1.LeaveRequest{NodeId: a.nodeID, Reason: reason}))
}
