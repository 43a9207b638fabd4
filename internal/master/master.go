package master

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/autoscale"
	"github.com/roverml/rover/internal/dashboard"
	"github.com/roverml/rover/internal/eventlog"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/metrics"
	"github.com/roverml/rover/internal/nodemanager"
	"github.com/roverml/rover/internal/rendezvous"
	"golang.org/x/sync/errgroup"
)

// Clock tells the time. The master's loop reads it; the state machines never do.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Config configures a master.
type Config struct {
	// Listen is the TCP address to serve on ("127.0.0.1:0" picks a port).
	Listen string
	// Listener, when set, is served instead of listening on Listen: an
	// agent that hosts its job's master binds the endpoint first, to learn
	// whether it is the one to host. The master closes it; after an error
	// from New, the caller does.
	Listener net.Listener
	// Job names the job (torchrun's --rdzv-id); agents asking for another are refused.
	Job string
	// Token is the job's secret; every request must carry it.
	Token string
	// Preset, when set, fixes the rendezvous configuration before any agent
	// joins. Without it, the first agent's configuration is taken.
	Preset *jobconfig.Config
	// Checkpoint, when its URL is set, is the job's checkpoint storage, as
	// the operator gave it: it may carry any of the storage driver's
	// parameters. Agents that name another are refused. Without it, the
	// first agent's --checkpoint-dir is taken (without driver parameters).
	Checkpoint jobconfig.CheckpointStorage
	// TickInterval is how often timeouts are checked (default 50ms).
	TickInterval time.Duration
	// StateDir is the directory of the durable store (bbolt): a master
	// restarted on it resumes the job. Empty keeps the state in memory,
	// unless Store is set.
	StateDir string
	// DiscardState, with StateDir, starts from what can be trusted of a
	// damaged state file (dropping the records from the damage on, or the
	// whole file), saying what it dropped, instead of refusing it.
	DiscardState bool
	// Store persists the master's journal; it overrides StateDir (tests).
	Store Store
	// Clock defaults to the wall clock.
	Clock  Clock
	Logger *slog.Logger
	// AddrFile, when set, receives the address the master listens on.
	AddrFile string
	// TLS, when set, makes the master serve HTTP/2 over TLS with its
	// certificates (see LoadKeyPair) instead of cleartext HTTP/2 (h2c);
	// cleartext clients are then told to use TLS.
	TLS *tls.Config
	// MetricsAddr, when set, is the HOST:PORT (port 0 picks one) of the
	// master's Prometheus metrics (package metrics); MetricsAddrFile, when
	// set, receives the address they are served on.
	MetricsAddr, MetricsAddrFile string
	// EmbeddedMetrics, without MetricsAddr, makes the master's metrics
	// (without the process's go_* and process_*) for the agent that hosts
	// it to serve with its own (MetricsGatherer).
	EmbeddedMetrics bool
	// Nodes, when set, makes the master create, relaunch and delete the
	// job's nodes on a platform (rover submit); without it, agents are
	// started by someone else.
	Nodes *NodesConfig
	// AutoScale, when set, lets the master decide the job's node count
	// within its --nnodes (docs/design/autoscale.md): the policy's knobs,
	// whose MinNodes, MaxNodes and NodeUnit are the rendezvous's. It needs
	// Nodes: only a master that creates the nodes can add or remove them.
	AutoScale *autoscale.Config
	// PSScale, when set, scales a parameter-server job's PS by their CPU
	// use (autoscale.PSPolicy): it needs Nodes, and Nodes.CPU to sample
	// the roles' CPU (without it nothing is decided).
	PSScale *autoscale.PSConfig
}

// Master serves one job's control plane.
type Master struct {
	cfg  Config
	core *core
	ln   net.Listener
	srv  *http.Server
	// split and plain serve a TLS master's port: split tells TLS
	// connections from cleartext ones, which plain answers with an error.
	// Both are nil for a cleartext master.
	split *splitListener
	plain *http.Server
	log   *slog.Logger

	checkpoints *checkpoints
	closeStore  func() error
	fleet       *fleet // nil unless Config.Nodes is set
	sessions    *sessionCount
	// metrics and metricsSrv are nil without Config.MetricsAddr.
	metrics    *metrics.Master
	metricsSrv *metrics.Server

	// ended is closed when Run returns, after runErr is set.
	ended  chan struct{}
	runErr error
}

// Addr is the host:port the master serves on.
func (m *Master) Addr() string { return m.ln.Addr().String() }

// Run serves until ctx ends, or until the store fails: then it stops
// serving at once and returns an error wrapping ErrStoreFailed. Run is
// called once.
func (m *Master) Run(ctx context.Context) (err error) {
	defer func() {
		m.runErr = err
		close(m.ended)
	}()
	m.log.Info("master serving", "addr", m.Addr(), "tls", m.split != nil)
	g, ctx := errgroup.WithContext(ctx)
	if m.split == nil {
		g.Go(serve(m.srv, m.ln, false))
	} else {
		g.Go(m.split.run)
		g.Go(serve(m.srv, m.split.tls, true))
		g.Go(serve(m.plain, m.split.plain, false))
	}
	if m.fleet != nil {
		g.Go(func() error { return m.fleet.run(ctx) })
	}
	if m.metricsSrv != nil {
		// The web dashboard shares the metrics' listener (docs/observability.md).
		d := dashboard.New(m.DashboardSource(nil), dashboard.Options{Logger: m.log})
		m.metricsSrv.Mux.Handle("/", d)
		m.log.Info("serving metrics and the dashboard", "addr", m.metricsSrv.Addr(), "url", m.metricsSrv.URL(),
			"dashboard", "http://"+m.metricsSrv.Addr()+"/")
		g.Go(func() error { return d.Run(ctx) })
		g.Go(func() error { return m.metricsSrv.Serve(ctx) })
	}
	g.Go(func() error { return m.shutdown(ctx) })
	g.Go(func() error { return m.tickLoop(ctx) })
	g.Go(func() error { return m.logNodeChecks(ctx) })
	g.Go(func() error { return m.watchStore(ctx) })
	err = g.Wait()
	m.checkpoints.close()
	if cerr := m.closeStore(); cerr != nil && err == nil {
		err = fmt.Errorf("close the master's state: %w", cerr)
	}
	return err
}

// serve serves srv on ln, over TLS or not, until srv is shut down.
func serve(srv *http.Server, ln net.Listener, tls bool) func() error {
	return func() error {
		var err error
		if tls {
			err = srv.ServeTLS(ln, "", "")
		} else {
			err = srv.Serve(ln)
		}
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	}
}

// shutdown stops serving once ctx ends and a master that owns its nodes
// has stopped them.
func (m *Master) shutdown(ctx context.Context) error {
	<-ctx.Done()
	if m.fleet != nil {
		<-m.fleet.gone // agents being stopped still talk to the master
	}
	close(m.core.watchEnd) // the event streams end in order
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var err error
	if m.plain != nil {
		_ = m.plain.Shutdown(sctx)
		err = m.plain.Close()
	}
	_ = m.srv.Shutdown(sctx) // streams are long-lived: close what is left
	_ = m.ln.Close()         // a TLS master's listener is the splitter's
	return errors.Join(m.srv.Close(), err)
}

// watchStore returns an error wrapping ErrStoreFailed, to stop the master,
// once the store refused a write; nil when ctx ends first.
func (m *Master) watchStore(ctx context.Context) error {
	failed, cause := m.core.storeFailed()
	select {
	case <-ctx.Done():
		return nil
	case <-failed:
		// Nothing more can be made durable: stop, so that a master
		// restarted on the store resumes from what is.
		err := fmt.Errorf("%w; stopping: free space on (or repair) the state's disk, then restart the master on the same state to resume the job", cause())
		m.log.Error("the master's store refused a write: nothing more can be made durable, so the master stops", "err", cause())
		return err
	}
}

func (m *Master) tickLoop(ctx context.Context) error {
	t := time.NewTicker(m.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			now := m.cfg.Clock.Now()
			if err := m.core.tick(ctx, now); err != nil {
				m.log.Error("advance timeouts", "err", err)
			}
			if err := m.core.checkProgress(ctx, now, m.log); err != nil {
				m.log.Error("restart the hung workers", "err", err)
			}
			if err := m.autoScaleTick(ctx, now); err != nil {
				m.log.Error("auto-scale", "err", err)
			}
			if err := m.psScaleTick(ctx, now); err != nil {
				m.log.Error("scale the PS", "err", err)
			}
		}
	}
}

// Outcome is how a job ended.
type Outcome struct {
	Succeeded bool
	Reason    string
}

// WaitFinished blocks until the job succeeds or fails, or ctx ends, or the
// master can no longer finish it: its store failed (an error wrapping
// ErrStoreFailed), or Run returned (ErrStopped, wrapping Run's error).
func (m *Master) WaitFinished(ctx context.Context) (Outcome, error) {
	failed, cause := m.core.storeFailed()
	for {
		done, state, changed := m.core.finished()
		if done {
			return Outcome{Succeeded: state == rendezvous.Succeeded, Reason: m.core.job().GetReason()}, nil
		}
		select {
		case <-changed:
		case <-failed:
			return Outcome{}, cause()
		case <-m.ended:
			if m.runErr != nil {
				return Outcome{}, fmt.Errorf("%w: %w", ErrStopped, m.runErr)
			}
			return Outcome{}, ErrStopped
		case <-ctx.Done():
			return Outcome{}, ctx.Err()
		}
	}
}

// RunJob runs the master (Run) until the job ends, keeps serving for linger
// so that every agent learns the outcome, then stops serving and returns
// how the job ended. It returns Run's error if Run failed, else
// WaitFinished's: ctx's error when ctx ended first, one wrapping
// ErrStoreFailed when the store failed. RunJob is called instead of Run.
func (m *Master) RunJob(ctx context.Context, linger time.Duration) (Outcome, error) {
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	out, werr := m.WaitFinished(runCtx)
	if werr == nil {
		// Keep serving a little so every agent receives the outcome.
		select {
		case <-time.After(linger):
		case <-ctx.Done():
		}
	}
	cancel(nil)
	if err := <-done; err != nil {
		return Outcome{}, err
	}
	if werr != nil {
		if ctx.Err() != nil {
			// ctx ended first; WaitFinished may have seen Run return
			// (ErrStopped) before it saw ctx end.
			return Outcome{}, context.Cause(ctx)
		}
		return Outcome{}, werr
	}
	return out, nil
}

// Cancel ends the job because its user stopped it: it fails with reason,
// every agent learns it as it learns any failure and stops its workers, and
// a master that owns its nodes then deletes them (see NodesGone).
func (m *Master) Cancel(ctx context.Context, reason string) error {
	return m.core.apply(ctx, &jobstate.Event{Type: jobstate.EventCancel, Time: m.cfg.Clock.Now(), Reason: reason})
}

// ErrNoNodes is Scale's error on a master that does not own its nodes.
var ErrNoNodes = errors.New("this master does not own the job's nodes: scaling needs a master with a platform (rover submit, or Kubernetes)")

// Scale sets how many nodes group (e.g. "worker") should have, within its
// minimum and maximum (the job's --nnodes): the node manager creates the
// missing ranks, which join the job at its next round, or removes the
// highest ranks, whose departure starts a new round without spending a
// restart. why is logged and kept with the nodes' history. Errors wrap
// ErrNoNodes, nodemanager.ErrBadScale (say so to the user as it is) or
// nodemanager.ErrJobOver.
func (m *Master) Scale(ctx context.Context, group string, nodes int, why string) error {
	if m.fleet == nil {
		return ErrNoNodes
	}
	req := scaleRequest{group: group, nodes: nodes, why: why, done: make(chan error, 1)}
	select {
	case m.fleet.scales <- req:
	case <-m.fleet.gone:
		return fmt.Errorf("%w: the job has ended", nodemanager.ErrJobOver)
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Status is the job's status, as GetJob answers it.
func (m *Master) Status() *roverv1.GetJobResponse {
	r := m.core.jobAt(m.cfg.Clock.Now())
	r.CheckpointStep = m.checkpoints.latestStep()
	return r
}

// Events is the job's event log (package eventlog), for a caller that
// carries the events elsewhere (Kubernetes Events); it only reads it.
func (m *Master) Events() *eventlog.Log { return m.core.events }

// NodesGone is closed once a master that owns its nodes (Config.Nodes) has
// deleted them all: after the job ended, or Run's context ended. It is
// closed at once for a master that owns none.
func (m *Master) NodesGone() <-chan struct{} {
	if m.fleet == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return m.fleet.gone
}

func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
