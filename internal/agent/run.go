package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/agent/ckptsaver"
	"github.com/roverml/rover/internal/agent/hostmaster"
	"github.com/roverml/rover/internal/agent/stacks"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/proc"
	"github.com/roverml/rover/internal/runconfig"
	"github.com/roverml/rover/internal/shardbatch"
	"golang.org/x/sync/errgroup"
)

// Run runs the node agent until the job ends or ctx is cancelled. Its error
// maps to the process exit code through ExitCode. When the agent itself has
// TORCHELASTIC_ERROR_FILE set, a failure is also written there, as torchrun
// does: the root cause's error file when workers failed the job.
func Run(ctx context.Context, cfg *runconfig.Config, opts Options) (err error) {
	a := newAgent(cfg, opts.withDefaults())
	defer func() { a.writeAgentError(err) }()
	var done cleanups // what the steps opened, closed last first
	defer done.run()
	conn, err := a.chooseMaster(&done)
	if err != nil {
		return err
	}
	httpClient, err := conn.via.HTTPClient()
	if err != nil {
		return exitErr(ExitUsage, "%w", err) // a CA bundle that cannot be read
	}
	if err := a.openRunDir(); err != nil {
		return err
	}
	// A master this agent runs that stops on its own ends the agent's run,
	// as a signal would, with the master's error as the cause.
	ctx, endRun := context.WithCancelCause(ctx)
	done.add(func() { endRun(nil) })
	if err := a.startOwnMaster(ctx, &conn, endRun, &done); err != nil {
		return err
	}
	// Closed before an embedded master stops, which then has no connection
	// to wait for.
	done.add(httpClient.CloseIdleConnections)
	a.dial(httpClient, conn)
	if err := a.openNode(conn.token, &done); err != nil {
		return err
	}
	if err := a.serveMetrics(ctx, &done); err != nil {
		return err
	}
	a.startPersister(ctx, &done)
	err = a.runJob(ctx)
	if err == nil && a.tempDir != "" {
		os.RemoveAll(a.tempDir)
	}
	return err
}

// cleanups is what Run's steps opened, to close when Run returns, the last
// opened first.
type cleanups []func()

func (c *cleanups) add(f func()) { *c = append(*c, f) }

// run runs the cleanups, the last added first. Its pointer receiver
// matters: `defer done.run()` must see what was added after the defer.
func (c *cleanups) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
}

// withDefaults fills in what the program left unset.
func (opts Options) withDefaults() Options {
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
	return opts
}

func newAgent(cfg *runconfig.Config, opts Options) *agent {
	a := &agent{
		cfg:    cfg,
		opts:   opts,
		argv:   cfg.WorkerArgv(opts.PythonExec),
		out:    proc.NewSyncWriter(opts.Stdout),
		errOut: proc.NewSyncWriter(opts.Stderr),
		views:  newLatestView(),
	}
	a.incarnation = hostmaster.NewToken()[:16]
	a.progress = newProgressBook()
	a.progress.devices = opts.Devices
	a.events = newEventQueue(eventQueueLimit)
	a.life = newLifecycle(a.events, func() int64 { return time.Now().UnixNano() })
	a.log = opts.Logger
	a.metrics = a.newMetrics()
	return a
}

// masterConn is how the agent reaches the job's master.
type masterConn struct {
	token string
	// hostLn is the endpoint, bound to host the job's master with
	// $ROVER_TOKEN; nil: none.
	hostLn net.Listener
	// The embedded master of a standalone job serves cleartext HTTP/2 on
	// loopback; a master elsewhere is reached as --tls-ca says.
	via client.TLS
}

// chooseMaster settles which master the agent joins, and with which token:
// the one the agents of a job without `rover master` host, a standalone
// job's embedded one (started by startOwnMaster, which sets its token), or
// a `rover master` at the endpoint (which an agent may host with
// $ROVER_TOKEN when nothing listens there).
func (a *agent) chooseMaster(done *cleanups) (masterConn, error) {
	var conn masterConn
	if a.hosted = hostmaster.Masterless(a.cfg, a.opts.Getenv); a.hosted {
		a.useHostedDefaults()
		if a.cfg.TLSCA != "" {
			return conn, exitErr(ExitUsage, "--tls-ca needs a `rover master` started with --tls-cert, and its --token-file: "+
				"the master an agent hosts (this job has no token, so its agents host the master) serves cleartext")
		}
		var err error
		if conn.token, a.tokenFrom, err = hostedToken(a.cfg, a.opts.Getenv, os.TempDir()); err != nil {
			return conn, err
		}
		a.addr = a.cfg.RdzvEndpoint
		return conn, nil
	}
	if a.cfg.Standalone {
		return conn, nil
	}
	// Before anything is created: a missing token is a usage error.
	var err error
	if conn.token, err = a.token(); err != nil {
		return conn, err
	}
	a.addr = a.cfg.RdzvEndpoint
	conn.via = client.TLS{CAFile: a.cfg.TLSCA, ServerName: a.cfg.TLSServerName}
	if ln := hostmaster.ListenWithEnvToken(a.cfg, a.opts.Getenv, a.log); ln != nil {
		conn.hostLn = ln
		done.add(func() { ln.Close() }) // a no-op once the master owns it
		a.useHostedDefaults()
		a.hosted, a.tokenFrom = true, hostmaster.Source("$"+client.TokenEnv)
	}
	return conn, nil
}

// useHostedDefaults gives the agent the defaults of a job without `rover
// master`, which differ.
func (a *agent) useHostedDefaults() {
	c := *a.cfg
	if _, set := c.RdzvConf["master_timeout"]; !set {
		c.MasterTimeout = hostmaster.DefaultMasterTimeout
	}
	a.cfg = &c
}

// openRunDir names the node and opens the run's log directory.
func (a *agent) openRunDir() error {
	a.nodeID = a.defaultNodeID()
	a.log = a.opts.Logger.With("component", "agent", "job", a.cfg.RunID, "node", a.nodeID)
	if err := a.openLogDir(); err != nil {
		return err
	}
	a.hangs = stacks.NewCollector(a.logDir, a.nodeID)
	return nil
}

// startOwnMaster starts the master this agent runs, if any: a standalone
// job's embedded master (whose address and token conn then names), or the
// master it hosts for a job without `rover master`.
func (a *agent) startOwnMaster(ctx context.Context, conn *masterConn, endRun context.CancelCauseFunc, done *cleanups) error {
	if a.cfg.Standalone {
		m, err := a.startMaster(ctx, EmbeddedMaster{})
		if err != nil {
			return err
		}
		done.add(m.Stop)
		a.addr, conn.token = m.Addr, m.Token
		go a.watchMaster(ctx, m, endRun)
	}
	if a.hosted && (hostmaster.MayHost(a.cfg) || conn.hostLn != nil) {
		stop, err := a.hostMaster(ctx, conn.token, conn.hostLn, endRun)
		if err != nil {
			return err
		}
		done.add(stop)
	}
	return nil
}

// dial makes the agent's client of the master, and its shard batcher.
func (a *agent) dial(httpClient *http.Client, conn masterConn) {
	a.client = client.New(httpClient, conn.via.URL(a.addr), conn.token)
	a.shards = shardbatch.New(a.client, shardbatch.Options{MaxOps: client.MaxBatchOps, InFlight: 2})
	a.host = a.cfg.LocalAddr
	if a.host == "" {
		a.host = routeAddr(a.addr)
	}
}

// openNode opens what the node's workers use: the checkpoint saver's
// arenas and the local API.
func (a *agent) openNode(token string, done *cleanups) error {
	var err error
	if a.ckpt, err = a.openSaver(token); err != nil {
		return err
	}
	done.add(a.ckpt.Close)
	a.saver.Store(a.ckpt)
	if err := a.startPeerServer(token, done); err != nil {
		return fmt.Errorf("serve this node's checkpoints to its peers: %w", err)
	}
	if ranks := a.ckpt.Adopted(); len(ranks) > 0 {
		a.log.Info("adopted the checkpoint arenas of a killed agent of this job", "local_ranks", ranks)
	}
	local, err := a.startLocalAPI()
	if err != nil {
		return err
	}
	done.add(local.close)
	a.local = local
	if a.cfg.StandbyWorkers && !a.cfg.NoPython {
		a.standby = newStandbyPool(standbyScript(local.pypath), a.log)
		done.add(a.standby.close) // before the local API's directory goes
	}
	if needsOMPWarning(a.cfg.NprocPerNode) {
		a.log.Warn("setting OMP_NUM_THREADS=1 for each worker to avoid overloading the node; tune it for best performance")
	}
	return nil
}

// startPersister runs the saver's persistence. It outlives the loop: on
// every way the loop ends (a signal, the workers' failure, the master
// ending the job) its last act is to persist what the workers left in
// memory, so storage must stay open until the loop has returned, whatever
// ended ctx.
func (a *agent) startPersister(ctx context.Context, done *cleanups) {
	persistCtx, stopPersister := context.WithCancel(context.WithoutCancel(ctx))
	persisterDone := make(chan struct{})
	go func() {
		defer close(persisterDone)
		a.ckpt.Run(persistCtx)
	}()
	done.add(func() {
		stopPersister()
		<-persisterDone
	})
}

// runJob joins the job and runs the loop until the job ends or ctx does,
// with the session and the shard batcher in the background.
func (a *agent) runJob(ctx context.Context) error {
	bg, bgctx := errgroup.WithContext(ctx)
	bgctx, stopBackground := context.WithCancel(bgctx)
	bg.Go(func() error { a.shards.Run(bgctx); return nil })
	firstJoin := make(chan error, 1) // written once by the session goroutine
	bg.Go(func() error { a.sessionLoop(bgctx, firstJoin); return nil })
	var err error
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
	return err
}

var _ ckptsaver.Master = roverv1connect.MasterServiceClient(nil)

// openSaver opens the flash-checkpoint saver of the job's node.
func (a *agent) openSaver(token string) (*ckptsaver.Saver, error) {
	self := ckptsaver.Owner{NodeID: a.nodeID, Generated: a.cfg.NodeID == "" && a.cfg.NodeRank < 0}
	return ckptsaver.Open(ckptsaver.Config{
		JobKey: ckptsaver.JobKey(a.cfg.RunID, token), Owner: self, NprocPerNode: a.cfg.NprocPerNode,
		NodeID: a.nodeID, MasterAddr: a.addr, Master: a.client, Retry: a.callMaster, Log: a.log,
		Round:       func() int { _, round := a.joined.get(); return round },
		AgreedStep:  a.agreedMemoryStep,
		Durable:     a.life.durable,
		Saved:       a.metrics.Saved,
		Persisted:   a.metrics.Persisted,
		BackupBytes: a.cfg.CheckpointBackupBytes,
		Pushed:      a.metrics.BackupPushed,
		PushFailed:  a.metrics.BackupPushFailed,
	})
}

// agreedMemoryStep is the step in memory the newest view's assignment
// says the workers restore from; nil: none.
func (a *agent) agreedMemoryStep() *int64 {
	if v, _ := a.views.get(); v != nil && v.GetAssignment() != nil && v.GetAssignment().MemoryStep != nil {
		step := v.GetAssignment().GetMemoryStep()
		return &step
	}
	return nil
}
