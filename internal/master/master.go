package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"connectrpc.com/connect"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/rendezvous"
	"github.com/roverml/rover/internal/store"
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
	// Job names the job (torchrun's --rdzv-id); agents asking for another are refused.
	Job string
	// Token is the job's secret; every request must carry it.
	Token string
	// Preset, when set, fixes the rendezvous configuration before any agent
	// joins. Without it, the first agent's configuration is taken.
	Preset *RendezvousPreset
	// TickInterval is how often timeouts are checked (default 50ms).
	TickInterval time.Duration
	// Store persists the master's journal (default: in memory).
	Store Store
	// Clock defaults to the wall clock.
	Clock  Clock
	Logger *slog.Logger
	// AddrFile, when set, receives the address the master listens on.
	AddrFile string
	StateDir string // directory of the durable store (bbolt); empty keeps the state in memory
}

// RendezvousPreset is a rendezvous configuration given to the master itself.
type RendezvousPreset = jobConfig

// Master serves one job's control plane.
type Master struct {
	cfg  Config
	core *core
	ln   net.Listener
	srv  *http.Server
	log  *slog.Logger

	checkpoints *checkpoints
}

// New validates cfg, replays the store's journal and opens the listener.
func New(ctx context.Context, cfg Config) (*Master, error) {
	if cfg.Token == "" {
		return nil, errors.New("master needs a job token")
	}
	if cfg.Job == "" {
		cfg.Job = "default"
	}
	if cfg.TickInterval <= 0 {
		cfg.TickInterval = 50 * time.Millisecond
	}
	if cfg.Store == nil {
		cfg.Store = store.NewMemory()
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("component", "master", "job", cfg.Job)
	c := newCore(cfg.Job, cfg.Store)
	n, err := c.restore(ctx, cfg.Clock.Now())
	if err != nil {
		return nil, fmt.Errorf("restore master state: %w", err)
	}
	if n > 0 {
		log.Info("restored master state", "records", n)
	}
	if cfg.Preset != nil {
		if err := c.configure(ctx, *cfg.Preset, cfg.Clock.Now()); err != nil {
			return nil, fmt.Errorf("configure rendezvous: %w", err)
		}
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	m := &Master{cfg: cfg, core: c, ln: ln, log: log}
	mux := http.NewServeMux()
	m.checkpoints = newCheckpoints(cfg.Clock)
	mux.Handle(roverv1connect.NewMasterServiceHandler(&service{core: c, clock: cfg.Clock, checkpoints: m.checkpoints},
		connect.WithInterceptors(tokenInterceptor{token: cfg.Token}),
		connect.WithReadMaxBytes(8<<20),
		connect.WithCompressMinBytes(compressMinBytes)))
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	m.srv.Protocols = new(http.Protocols)
	m.srv.Protocols.SetHTTP1(true)
	m.srv.Protocols.SetUnencryptedHTTP2(true)
	m.srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 1 << 20}
	if cfg.AddrFile != "" {
		if err := writeFileAtomic(cfg.AddrFile, []byte(m.Addr()+"\n")); err != nil {
			ln.Close()
			return nil, fmt.Errorf("write address file: %w", err)
		}
	}
	return m, nil
}

// Addr is the host:port the master serves on.
func (m *Master) Addr() string { return m.ln.Addr().String() }

// Run serves until ctx ends.
func (m *Master) Run(ctx context.Context) error {
	m.log.Info("master serving", "addr", m.Addr())
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := m.srv.Serve(m.ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = m.srv.Shutdown(sctx) // streams are long-lived: close what is left
		return m.srv.Close()
	})
	g.Go(func() error { return m.tickLoop(ctx) })
	err := g.Wait()
	m.checkpoints.close()
	return err
}

func (m *Master) tickLoop(ctx context.Context) error {
	t := time.NewTicker(m.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := m.core.tick(ctx, m.cfg.Clock.Now()); err != nil {
				m.log.Error("advance timeouts", "err", err)
			}
		}
	}
}

// Outcome is how a job ended.
type Outcome struct {
	Succeeded bool
	Reason    string
}

// WaitFinished blocks until the job succeeds or fails, or ctx ends.
func (m *Master) WaitFinished(ctx context.Context) (Outcome, error) {
	for {
		done, state, changed := m.core.finished()
		if done {
			return Outcome{Succeeded: state == rendezvous.Succeeded, Reason: m.core.job().GetReason()}, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return Outcome{}, ctx.Err()
		}
	}
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
