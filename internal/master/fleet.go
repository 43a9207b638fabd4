package master

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roverml/rover/internal/eventlog"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/nodemanager"
	"github.com/roverml/rover/internal/platform"
)

// NodesConfig makes a master own its job's nodes: it creates them on a
// platform, relaunches those that die, and deletes them when the job ends.
// The rules are the node manager's (package nodemanager); the platform is
// only how nodes are made, so the same master drives local processes and
// Kubernetes pods.
type NodesConfig struct {
	Platform platform.Platform
	// Name names the platform for `rover status` ("local", "kubernetes").
	Name string
	// Spec is the job's node groups and relaunch rules.
	Spec nodemanager.Spec
	// ExitGrace is how long nodes may take to exit on their own once the
	// job has ended before they are deleted (default 30s).
	ExitGrace time.Duration
	// CPU, when set, reads the CPU time of nodes that run no agent (a
	// parameter-server job's roles), for PS scaling (Config.PSScale).
	CPU CPUReader
	// KeepNodes leaves the nodes running when Run's context ends before
	// the job does, for a master restarted on the same state to adopt
	// (Kubernetes: the master's pod is replaced, the workers' are not).
	// Without it they are deleted (rover submit stopping).
	KeepNodes bool
}

// defaultExitGrace: agents learn the outcome from their push stream within
// a second, then stop their workers; 30 s covers a slow persist.
const defaultExitGrace = 30 * time.Second

// fleet drives the node manager: it feeds it the platform's events and the
// core's notices (a node's agent lost, a diagnosis that calls for a
// relaunch), journals its state through the core before anything it decided
// is done, and carries out its commands on the platform. It is the only
// goroutine that touches the manager.
type fleet struct {
	cfg   NodesConfig
	core  *core
	clock Clock
	log   *slog.Logger

	mgr   *nodemanager.Manager
	saved []byte // the state last journaled

	// restored are the live nodes of a manager restored from the journal,
	// to check against the platform's first report (Synced); replayed are
	// the nodes that report named.
	restored []string
	replayed map[string]bool
	synced   bool

	mu      sync.Mutex
	queue   []platform.Event
	wake    chan struct{}
	held    map[string]bool // node ids created or reported and not yet deleted: true once exited
	deletes sync.WaitGroup

	// found is the node manager's Capacity of the worker group, -1
	// unknown: the loop, which owns the manager, stores it for capacity.
	found atomic.Int64

	changes chan ScaleChange // the master's own changes of the count (ScaleChanges)

	scales chan scaleRequest // Master.Scale's requests, for the loop
	gone   chan struct{}     // closed once the job ended and every node is deleted
}

// scaleRequest asks the fleet's loop to scale a group; the answer goes
// to done.
type scaleRequest struct {
	group string
	nodes int
	why   string
	done  chan error
}

func newFleet(cfg NodesConfig, c *core, clock Clock, log *slog.Logger) (*fleet, error) {
	if cfg.Platform == nil {
		return nil, errors.New("NodesConfig.Platform is nil")
	}
	if err := cfg.Spec.Validate(); err != nil {
		return nil, err
	}
	if cfg.ExitGrace <= 0 {
		cfg.ExitGrace = defaultExitGrace
	}
	if !cfg.Platform.Capabilities().Resources {
		cfg.Spec.RightSize = false // nothing to size: the platform reserves no resources
	}
	f := &fleet{cfg: cfg, core: c, clock: clock, log: log.With("platform", cfg.Name),
		wake: make(chan struct{}, 1), held: map[string]bool{}, scales: make(chan scaleRequest), gone: make(chan struct{}),
		changes: make(chan ScaleChange, 16)}
	f.found.Store(-1)
	return f, nil
}

// run drives the nodes until the job ends and its nodes are gone, or ctx
// ends; either way it deletes every node it holds before it returns.
func (f *fleet) run(ctx context.Context) error {
	defer close(f.gone)
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch()
	watched := make(chan error, 1)
	go func() { watched <- f.cfg.Platform.Watch(watchCtx, f.enqueue) }()

	cmds, err := f.start()
	if err != nil {
		return err
	}
	f.carry(ctx, cmds)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		done, _, changed := f.core.finished()
		if done {
			f.drain(ctx)
			return nil
		}
		f.found.Store(int64(f.mgr.Capacity(nodemanager.DefaultGroup)))
		f.arm(timer)
		select {
		case <-ctx.Done():
			if !f.cfg.KeepNodes {
				f.stop()
			}
			return nil
		case err := <-watched:
			f.deleteAll()
			return fmt.Errorf("watch the %s platform's nodes: %w", f.cfg.Name, err)
		case <-f.wake:
			f.observeUsage() // usage that came first shapes the relaunches
			f.observeAll(ctx, f.take())
		case <-f.core.noticeCh:
			f.observeUsage()
			var cmds []nodemanager.Command
			for _, n := range f.core.takeNotices() {
				if f.ended() || failsJob(cmds) {
					break
				}
				cmds = append(cmds, f.notice(n)...)
			}
			f.carry(ctx, cmds)
		case <-f.core.usage.ready:
			f.observeUsage()
		case <-timer.C:
			if !f.ended() {
				f.carry(ctx, f.mgr.Tick(f.clock.Now()))
			}
		case req := <-f.scales:
			req.done <- f.scale(ctx, req)
		case <-changed:
		}
	}
}

// scale carries out one Master.Scale.
func (f *fleet) scale(ctx context.Context, req scaleRequest) error {
	if f.ended() {
		return fmt.Errorf("%w: the job has ended", nodemanager.ErrJobOver)
	}
	cmds, err := f.mgr.Scale(req.group, req.nodes, req.why, f.clock.Now())
	if err != nil {
		return err
	}
	f.log.Info("scaling the job's nodes", "group", req.group, "nodes", req.nodes, "why", req.why)
	f.core.logEvents(eventlog.Event{Time: f.clock.Now(), Kind: eventlog.ScaleDecision, Severity: eventlog.Normal, Nodes: req.nodes,
		Reason: req.why, Message: fmt.Sprintf("node group %s is scaled to %d nodes: %s", req.group, req.nodes, req.why)})
	f.carry(ctx, cmds)
	return nil
}

// ScaleChange is a change of the node count the master made on its own:
// an auto-scaling grow or shrink, or a node given up after pending past
// its timeout; or a PS migrated by the PS scaling rule.
type ScaleChange struct {
	// Group is the group changed: "" for the worker group, "ps" for a
	// parameter-server job's PS.
	Group   string
	Nodes   int    // the group's nodes now
	Why     string // a bounded code: "auto-scale grow: predicted_gain", "pending timeout"
	Message string // why, in a sentence
	// Migrated, Rank and MilliCPU name a migrated PS: its node, its rank
	// and the CPU its new node asks for; empty for a count change.
	Migrated string
	Rank     int
	MilliCPU int64
}

// ScaleChanges delivers the changes of the worker count the master made on
// its own, once the node manager carried them out, for the platform's own
// record of the count (Kubernetes: a ScalePlan labelled scale-type: auto,
// and the job's replicas). It holds 16; later ones are dropped while
// nobody reads it (rover submit keeps no other record). A master that owns
// no nodes returns nil.
func (m *Master) ScaleChanges() <-chan ScaleChange {
	if m.fleet == nil {
		return nil
	}
	return m.fleet.changes
}

// passOn offers c to ScaleChanges' reader.
func (f *fleet) passOn(c ScaleChange) {
	select {
	case f.changes <- c:
	default:
		f.log.Debug("a change of the node count is not passed on: nobody reads ScaleChanges", "nodes", c.Nodes, "why", c.Why)
	}
}

// capacity is how many nodes the platform can place for the job: the
// smaller known of its own bound (the local platform's --max-nodes-here)
// and what the node manager found when nodes pended past their timeout;
// -1 when neither is known. Any goroutine may call it.
func (f *fleet) capacity() int {
	c := f.cfg.Platform.Capabilities().Capacity()
	if m := int(f.found.Load()); m >= 0 && (c < 0 || m < c) {
		c = m
	}
	return c
}

func (f *fleet) ended() bool {
	done, _, _ := f.core.finished()
	return done
}

// start restores the manager from the journal, or creates it and its
// first nodes.
func (f *fleet) start() ([]nodemanager.Command, error) {
	if saved := f.core.fleetSaved(); saved != nil {
		m, err := nodemanager.Restore(saved)
		if err != nil {
			return nil, fmt.Errorf("restore the node manager: %w", err)
		}
		f.mgr, f.saved = m, saved
		for _, n := range m.Status().Nodes {
			if n.State == nodemanager.Pending || n.State == nodemanager.Running {
				f.restored = append(f.restored, n.NodeID)
			}
		}
		f.log.Info("restored the node manager", "nodes", len(m.Status().Nodes), "live", len(f.restored))
		return nil, nil
	}
	m, err := nodemanager.New(f.cfg.Spec)
	if err != nil {
		return nil, err
	}
	f.mgr = m
	if c := f.cfg.Platform.Capabilities().Capacity(); c > 0 {
		f.log.Info("the platform runs at most this many nodes at once; those beyond pend", "capacity", c)
	}
	return m.Start(f.clock.Now()), nil
}

// arm sets timer to the manager's next pending deadline.
func (f *fleet) arm(timer *time.Timer) {
	d := time.Hour
	if next, ok := f.mgr.NextDeadline(); ok {
		d = max(next.Sub(f.clock.Now()), 0)
	}
	if !timer.Stop() {
		select {
		case <-timer.C:
		default:
		}
	}
	timer.Reset(d)
}

// enqueue is the platform's event callback: it never blocks.
func (f *fleet) enqueue(ev platform.Event) {
	f.mu.Lock()
	f.queue = append(f.queue, ev)
	switch ev.Kind {
	case platform.Pending, platform.Running:
		if _, ok := f.held[ev.NodeID]; !ok {
			f.held[ev.NodeID] = false
		}
	case platform.Exited:
		f.held[ev.NodeID] = true
	case platform.Deleted:
		delete(f.held, ev.NodeID)
	}
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// requeue puts events taken but not handled back at the queue's head.
func (f *fleet) requeue(evs []platform.Event) {
	f.mu.Lock()
	f.queue = append(evs, f.queue...)
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

func (f *fleet) take() []platform.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queue
	f.queue = nil
	return q
}

// observeAll feeds the platform's events to the manager in order, then
// carries out what it decided about all of them at once: one journal
// write for the batch, and its creates overlapping (a hundred pods that
// fail together arrive together). A node whose agent ended without
// success is lost to the rendezvous first, the batch's losses journaled
// as one group: the platform knows before the heartbeats do. Once the job
// has ended its agents exit, some with failures: those are the ending,
// not faults to relaunch, and are left for drain; so are the events after
// one that fails the job.
func (f *fleet) observeAll(ctx context.Context, evs []platform.Event) {
	if f.ended() {
		f.requeue(evs)
		return
	}
	now := f.clock.Now()
	evs = f.sync(evs, now)
	f.recordLosses(ctx, evs, now)
	var cmds []nodemanager.Command
	for i, ev := range evs {
		if f.ended() || failsJob(cmds) {
			f.requeue(evs[i:])
			break
		}
		cmds = append(cmds, f.mgr.Observe(ev, now)...)
	}
	f.carry(ctx, cmds)
}

// failsJob reports whether cmds end the job: what comes after is decided
// once the failure is recorded.
func failsJob(cmds []nodemanager.Command) bool {
	return slices.ContainsFunc(cmds, func(c nodemanager.Command) bool { return c.Kind == nodemanager.FailJob })
}

// sync follows the platform's first report, until its Synced event, which
// it replaces with the nodes the restored manager had live that the
// platform does not hold: they went away while the master was down (a
// reboot, a pod deleted meanwhile), and are replaced.
func (f *fleet) sync(evs []platform.Event, now time.Time) []platform.Event {
	if f.synced {
		return evs
	}
	var out []platform.Event
	for _, ev := range evs {
		switch {
		case f.synced:
			out = append(out, ev)
		case ev.Kind != platform.Synced:
			if f.replayed == nil {
				f.replayed = map[string]bool{}
			}
			f.replayed[ev.NodeID] = true
			out = append(out, ev)
		default:
			f.synced = true
			for _, id := range f.restored {
				if !f.replayed[id] {
					out = append(out, platform.Event{NodeID: id, Kind: platform.Deleted, Reason: "gone while the master was away", Time: now})
				}
			}
			f.restored, f.replayed = nil, nil
		}
	}
	return out
}

// recordLosses tells the core of the nodes evs lose, as one group.
func (f *fleet) recordLosses(ctx context.Context, evs []platform.Event, now time.Time) {
	var losses []*jobstate.Event
	for _, ev := range evs {
		if ev.Failed() || ev.Kind == platform.Deleted {
			losses = append(losses, &jobstate.Event{Type: jobstate.EventNodeLost, Time: now, Node: ev.NodeID, Reason: "its agent " + ev.Describe(), Since: ev.Time})
		}
	}
	if len(losses) == 0 {
		return
	}
	for i, err := range f.core.applyAll(ctx, losses) {
		if err != nil && !errors.Is(err, errNotConfigured) {
			f.log.Warn("record a node's loss", "node", losses[i].Node, "err", err)
		}
	}
}

// notice feeds the manager what the core learned.
func (f *fleet) notice(n jobstate.FleetNotice) []nodemanager.Command {
	now := f.clock.Now()
	if n.Lost {
		return f.mgr.Lost(n.Node, n.Reason, now)
	}
	return f.mgr.Act(n.Action, now)
}

// carry journals the manager's state, shows it, then carries out cmds in
// order, their creates overlapping (see creates); once ctx has ended or
// the job is over it creates no more nodes. Deletes run in the background
// (they wait out the agent's grace period); a create the platform refuses
// is reported back as the node's failure, for the manager to relaunch or
// give up on.
func (f *fleet) carry(ctx context.Context, cmds []nodemanager.Command) {
	state, err := f.mgr.MarshalState()
	if err != nil {
		f.log.Error("encode the node manager's state", "err", err)
		return
	}
	if !bytes.Equal(state, f.saved) {
		if err := f.core.apply(ctx, &jobstate.Event{Type: jobstate.EventFleet, Time: f.clock.Now(), Fleet: state, Nodes: f.mgr.Live()}); err != nil {
			// Nothing is done that the journal does not hold: the master
			// stops when its store fails, and a restarted one redoes it.
			f.log.Error("journal the node manager's state", "err", err)
			return
		}
		f.saved = state
	}
	f.core.setFleetView(f.mgr.Status(), f.cfg.Name)
	f.core.logEvents(commandEvents(cmds, f.clock.Now())...)
	for _, c := range cmds {
		if c.Kind == nodemanager.DeleteNode && c.GivenUp {
			f.passOn(ScaleChange{Nodes: c.Nodes, Why: "pending timeout", Message: c.Reason})
		}
	}
	creating := newCreates(ctx, f)
	skipped := 0
	for i, c := range cmds {
		switch c.Kind {
		case nodemanager.CreateNode:
			if ctx.Err() != nil || f.ended() {
				// Cancelled or over while its nodes were starting: start no
				// more; those started are deleted with the rest.
				skipped++
				continue
			}
			for _, ch := range c.RightSized {
				f.core.metrics.RightSized(ch.Resource, ch.Direction)
			}
			creating.start(i, c)
		case nodemanager.DeleteNode:
			f.log.Info("node manager: "+c.Kind.String(), "node", c.NodeID, "reason", c.Reason)
			f.remove(ctx, c)
		case nodemanager.FailJob:
			f.log.Info("node manager: "+c.Kind.String(), "reason", c.Reason)
			skipped += creating.wait() // the nodes decided before the failure are made first
			if err := f.core.apply(ctx, &jobstate.Event{Type: jobstate.EventFailNodes, Time: f.clock.Now(), Reason: c.Reason}); err != nil {
				f.log.Error("fail the job", "reason", c.Reason, "err", err)
			}
		case nodemanager.SucceedJob:
			f.log.Info("node manager: "+c.Kind.String(), "reason", c.Reason)
			skipped += creating.wait()
			if err := f.core.apply(ctx, &jobstate.Event{Type: jobstate.EventSucceedNodes, Time: f.clock.Now(), Reason: c.Reason}); err != nil {
				f.log.Error("end the job as succeeded", "reason", c.Reason, "err", err)
			}
		}
	}
	if skipped += creating.wait(); skipped > 0 {
		f.log.Info("the job ended or its master is stopping: nodes not started", "nodes", skipped)
	}
}

// remove carries out a DeleteNode command.
func (f *fleet) remove(ctx context.Context, c nodemanager.Command) {
	if c.Removed {
		// Scaled away: the rendezvous lets it go before its agent is
		// stopped, so its end is no failure.
		e := &jobstate.Event{Type: jobstate.EventNodeLost, Time: f.clock.Now(), Node: c.NodeID, Reason: c.Reason, Planned: true}
		if err := f.core.apply(ctx, e); err != nil && !errors.Is(err, errNotConfigured) {
			f.log.Warn("record a node's removal", "node", c.NodeID, "err", err)
		}
	}
	f.delete(c.NodeID)
}

// hold records id as held from its create on, not from the platform's
// first event of it: a node created just before the job ends must be
// deleted with the rest.
func (f *fleet) hold(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.held[id]; !ok {
		f.held[id] = false
	}
}

func (f *fleet) delete(id string) {
	f.deletes.Add(1)
	go func() {
		defer f.deletes.Done()
		if err := f.cfg.Platform.Delete(context.Background(), id); err != nil {
			f.log.Warn("delete a node", "node", id, "err", err)
		}
	}()
}
