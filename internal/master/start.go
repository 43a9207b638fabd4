package master

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/roverml/rover/internal/ckpt"
	"github.com/roverml/rover/internal/diagnosis"
	"github.com/roverml/rover/internal/eventlog"
	"github.com/roverml/rover/internal/store"
)

// How a master starts (New): open its store, restore the job's state from
// it, check the configuration against that state, listen, and make the
// HTTP/2 servers of its API.

// The HTTP/2 settings that bound what a client's connection costs the
// master before anything reads it.
const (
	// receiveWindow is the flow-control window of a master's connections
	// and streams: what a client may send before the master reads it.
	// 256 KiB rather than Go's 1 MiB: control messages are small, and the
	// largest (8 MiB) still streams at 256 KiB per round trip.
	receiveWindow = 256 << 10
	// readFrameSize is the largest frame a client may send.
	readFrameSize = 16 << 10
)

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
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("component", "master", "job", cfg.Job)
	if err := checkPSScale(cfg); err != nil {
		return nil, err
	}
	if err := checkAutoScale(cfg); err != nil {
		return nil, err
	}
	closeStore, err := openStore(&cfg, log)
	if err != nil {
		return nil, err
	}
	m, err := newMaster(ctx, cfg, log)
	if err != nil {
		closeStore()
		return nil, err
	}
	m.closeStore = func() error { return errors.Join(m.core.events.Close(), closeStore()) }
	return m, nil
}

// openStore sets cfg.Store, unless it is set: the bbolt store in
// cfg.StateDir, or one in memory. It returns the func that closes what it
// opened.
func openStore(cfg *Config, log *slog.Logger) (closeStore func() error, err error) {
	closeStore = func() error { return nil }
	switch {
	case cfg.Store != nil:
	case cfg.StateDir != "":
		b, err := store.Open(cfg.StateDir, store.Options{Logger: log, DiscardDamaged: cfg.DiscardState})
		if err != nil {
			return nil, stateError(err)
		}
		if d := b.Discarded(); d != nil {
			log.Warn("--discard-state: dropped what could not be trusted of the master's state", "file", d.Path,
				"problem", d.Problem, "dropped", describeLoss(d))
		}
		cfg.Store, closeStore = b, b.Close
	default:
		cfg.Store = store.NewMemory()
	}
	return closeStore, nil
}

// newMaster makes the master of cfg's job on its open store.
func newMaster(ctx context.Context, cfg Config, log *slog.Logger) (*Master, error) {
	c, err := restoreCore(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	if err := configureJob(ctx, c, cfg); err != nil {
		return nil, err
	}
	ln := cfg.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return nil, fmt.Errorf("listen on %s: %w", cfg.Listen, err)
		}
	}
	m := &Master{cfg: cfg, core: c, ln: ln, log: log, sessions: newSessionCount(), ended: make(chan struct{})}
	if cfg.Nodes != nil {
		if m.fleet, err = newFleet(*cfg.Nodes, c, cfg.Clock, log); err != nil {
			ln.Close()
			return nil, fmt.Errorf("the job's nodes: %w", err)
		}
	}
	m.checkpoints = newCheckpoints(cfg.Clock, log)
	if job := c.config(); job != nil {
		m.checkpoints.prepare(ctx, job.Checkpoint, c.fresh())
	}
	if err := m.listenMetrics(); err != nil {
		ln.Close()
		return nil, err
	}
	m.makeServers()
	if cfg.AddrFile != "" {
		if err := writeFileAtomic(cfg.AddrFile, []byte(m.Addr()+"\n")); err != nil {
			ln.Close()
			if m.metricsSrv != nil {
				m.metricsSrv.Close()
			}
			return nil, fmt.Errorf("write address file: %w", err)
		}
	}
	return m, nil
}

// restoreCore makes the job's state and restores it from cfg.Store.
func restoreCore(ctx context.Context, cfg Config, log *slog.Logger) (*core, error) {
	start := time.Now()
	var err error
	c := newCore(cfg.Job, cfg.Store)
	c.log = log
	if cfg.Nodes != nil && cfg.Nodes.Platform != nil {
		// Set before the replay: diagnoses replay as they were made.
		c.st.Owned = true
		c.st.Caps = diagnosis.Caps{Relaunch: true, MoreMemory: cfg.Nodes.Platform.Capabilities().Resources}
		if gs := cfg.Nodes.Spec.Groups; len(gs) > 0 {
			c.st.Caps.Memory = gs[0].Memory() // what a worker killed for memory grows from
		}
	}
	if cfg.StateDir != "" {
		if c.events, err = eventlog.Open(cfg.StateDir, eventlog.Options{}); err != nil {
			return nil, fmt.Errorf("open the job's event log: %w", err)
		}
	}
	if cfg.AutoScale != nil {
		_ = c.st.AutoScale.Enable(*cfg.AutoScale, nil) // the job's configuration makes the policy
	}
	if cfg.PSScale != nil {
		if c.psScale, err = newPSScaleState(*cfg.PSScale); err != nil {
			return nil, err
		}
	}
	n, err := c.restore(ctx, cfg.Clock.Now())
	if err != nil {
		c.events.Close()
		return nil, fmt.Errorf("restore the master's state: %w", err)
	}
	if job := c.config(); job != nil && cfg.AutoScale != nil {
		// A job configured by a master that did not auto-scale.
		c.mu.Lock()
		err := c.st.AutoScale.Enable(*cfg.AutoScale, &job.Rendezvous)
		c.mu.Unlock()
		if err != nil {
			log.Warn("auto-scaling is off", "err", err)
		}
	}
	c.logEvents(startedEvent(n, c.st.Members.Status(), cfg.Clock.Now()))
	if n > 0 {
		j := c.job()
		log.Info("restored master state", "records", n, "round", j.GetRound(), "restarts", j.GetRestartCount(),
			"nodes", len(j.GetNodes()), "state", j.GetJobState().String(), "took", time.Since(start).Round(time.Millisecond))
	}
	return c, nil
}

// configureJob checks cfg's checkpoint storage, also against the restored
// job's, and configures the job with cfg.Preset when it is set.
func configureJob(ctx context.Context, c *core, cfg Config) error {
	if err := checkStorage(cfg.Checkpoint, ckpt.FromOperator); err != nil {
		return fmt.Errorf("--checkpoint-dir: %w", err)
	}
	if job := c.config(); job != nil && cfg.Checkpoint.URL != "" && !ckpt.SameLocation(job.Checkpoint.URL, cfg.Checkpoint.URL) {
		return fmt.Errorf("the job in this state dir keeps its checkpoints in %q, not %q: give the same --checkpoint-dir, or another --state-dir for a new job",
			job.Checkpoint.URL, cfg.Checkpoint.URL)
	}
	if cfg.Preset != nil {
		preset := *cfg.Preset
		preset.Checkpoint = cfg.Checkpoint
		if err := c.configure(ctx, preset, cfg.Clock.Now()); err != nil {
			return fmt.Errorf("configure rendezvous: %w", err)
		}
	}
	return nil
}

// makeServers makes the servers of the master's API on its listener: m.srv,
// and for a TLS master m.split and m.plain, which tell TLS connections from
// cleartext ones and answer the latter with an error.
func (m *Master) makeServers() {
	cfg, c := m.cfg, m.core
	methods := methodHandler(&service{core: c, clock: cfg.Clock, checkpoints: m.checkpoints, storage: cfg.Checkpoint, sessions: m.sessions, holders: newHolders()},
		connect.WithCodec(strictJSON{}), connect.WithInterceptors(m.metrics.Interceptor()),
		connect.WithCompressMinBytes(compressMinBytes))
	m.srv = newAPIServer(requireToken(cfg.Token, methods), cfg.TLS)
	if cfg.TLS != nil {
		m.split = newSplitListener(m.ln)
		m.plain = newCleartextServer()
	}
}

// newAPIServer is the HTTP server of the master's API, over TLS with tc
// (its minimum version at least TLS 1.2), else cleartext HTTP/2 (h2c).
func newAPIServer(h http.Handler, tc *tls.Config) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	// Streams per connection are bounded: every agent holds one session
	// stream, and agents share connections only in benchmarks (10,000
	// simulated agents over 32 connections is about 300 each). So is what
	// a connection may send before the master reads it (receiveWindow), and
	// the frames it is read in (16 KiB, HTTP/2's own default, where Go's
	// server takes up to 1 MiB and keeps a buffer of the largest frame per
	// connection): a request refused unread (no token, over its limit) can
	// have cost the master at most a window of its body, per connection,
	// while the refusal is on its way. TestMasterMemoryUnderFloods in
	// test/e2e measures it.
	srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 4096, MaxReadFrameSize: readFrameSize,
		MaxReceiveBufferPerConnection: receiveWindow, MaxReceiveBufferPerStream: receiveWindow}
	if tc == nil {
		srv.Protocols.SetUnencryptedHTTP2(true)
		return srv
	}
	srv.Protocols.SetHTTP2(true)
	srv.TLSConfig = tc.Clone()
	srv.TLSConfig.MinVersion = max(srv.TLSConfig.MinVersion, tls.VersionTLS12)
	return srv
}

// newCleartextServer is the server of a TLS master's cleartext
// connections: it tells the clients to use TLS.
func newCleartextServer() *http.Server {
	plain := &http.Server{Handler: refuseCleartext(), ReadHeaderTimeout: 10 * time.Second}
	plain.Protocols = new(http.Protocols)
	plain.Protocols.SetHTTP1(true)
	plain.Protocols.SetUnencryptedHTTP2(true)
	plain.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 16, MaxReadFrameSize: readFrameSize,
		MaxReceiveBufferPerConnection: receiveWindow, MaxReceiveBufferPerStream: receiveWindow}
	return plain
}

// checkAutoScale refuses auto-scaling without a platform to make nodes on,
// and knobs that do not fit the job's --nnodes.
func checkAutoScale(cfg Config) error {
	if cfg.AutoScale == nil {
		return nil
	}
	if cfg.Nodes == nil {
		return errors.New("auto-scaling needs a master that creates the job's nodes: run the job with rover submit --auto-scale, " +
			"or as an ElasticJob with autoScale: true on Kubernetes")
	}
	if cfg.Preset != nil {
		a := *cfg.AutoScale
		r := cfg.Preset.Rendezvous
		a.MinNodes, a.MaxNodes, a.NodeUnit = r.MinNodes, r.MaxNodes, r.NodeUnit
		if err := a.Validate(); err != nil {
			return fmt.Errorf("auto-scaling: %w", err)
		}
	}
	return nil
}
