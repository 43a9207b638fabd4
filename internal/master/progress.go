package master

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/diagnosis"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/rendezvous"
	"github.com/roverml/rover/internal/stall"
	"google.golang.org/protobuf/encoding/protojson"
)

// tracker is the master's view of the job's runtime progress
// (docs/design/hang-and-stragglers.md): the per-node step times and their
// stragglers, and the hang timer, both package progress's pure logic fed by
// the agents' heartbeats. It is not journaled: a restarted master starts
// afresh, and arms its hang timer at the next completed step. Its mutex is
// taken after core.mu, never before.
type tracker struct {
	mu     sync.Mutex
	window *stall.Window
	hang   *stall.Hang
	cfg    jobconfig.Hang
	round  int64
	step   int64 // newest step of the round; -1 none
	nodes  map[string]*nodeProgress
	notice *roverv1.HangNotice
	hung   bool
	reason string
	hangs  int64
	slow   []string // the stragglers last logged
	why    string
}

// nodeProgress is what the tracker knows of one node in the round.
type nodeProgress struct {
	steps map[int32]int64 // newest step by local rank
	last  time.Time       // of its newest progress
	step  int64
	util  []int32 // its devices' utilisation in the newest sample
}

func (t *tracker) initLocked(cfg jobconfig.Hang) {
	if t.window == nil || t.cfg != cfg {
		t.cfg = cfg
		t.window = stall.NewWindow(stall.DefaultStraggler)
		t.hang = stall.NewHang(cfg.Timeout)
		t.nodes = map[string]*nodeProgress{}
		t.step = -1
	}
}

// syncLocked follows the job to round: a new round's workers start afresh.
func (t *tracker) syncLocked(round int64) {
	if round <= t.round {
		return
	}
	t.round, t.step, t.hung, t.slow, t.why = round, -1, false, nil, ""
	t.hang.NewRound(round)
	t.window.Reset()
	clear(t.nodes)
}

// progressReport records a node's heartbeat progress at now. It returns a
// failure to report for the node when its devices reported a hardware
// error (an Xid or an uncorrectable ECC error), for the diagnosis to act on.
func (c *core) progressReport(node string, np *roverv1.NodeProgress, now time.Time) (*jobstate.Event, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.st.Members.Configured() || np == nil {
		return nil, false
	}
	s := c.st.Members.Status()
	mb, worldRound, _, member := c.st.Members.Rendezvous().WorldMember(node)
	t := &c.prog
	t.mu.Lock()
	defer t.mu.Unlock()
	t.initLocked(c.st.Members.Config().Hang)
	t.syncLocked(int64(s.Round))
	if np.GetRound() == t.round && !s.Open && member {
		t.recordLocked(node, np, now)
	}
	msg, bad := diagnosis.DeviceError(deviceSamples(np.GetDevices()))
	if !bad || !member || s.Open || s.Job != rendezvous.Running {
		return nil, false
	}
	f := &roverv1.WorkerFailure{NodeId: node, NodeRank: int32(mb.NodeRank), Host: mb.Addr, Rank: int32(mb.RankOffset),
		ExitCode: -1, TimeUnixNanos: now.UnixNano(), Round: int64(worldRound), Message: msg}
	b, err := protojson.Marshal(f)
	if err != nil {
		return nil, false
	}
	return &jobstate.Event{Type: jobstate.EventWorkerFailed, Time: now, Node: node, Round: worldRound, Failures: []json.RawMessage{b}}, true
}

func (t *tracker) recordLocked(node string, np *roverv1.NodeProgress, now time.Time) {
	n := t.nodes[node]
	if n == nil {
		n = &nodeProgress{steps: map[int32]int64{}}
		t.nodes[node] = n
	}
	n.util = n.util[:0]
	for _, d := range np.GetDevices() {
		n.util = append(n.util, d.GetUtilizationPercent())
	}
	moved, completed := false, false
	var wall, busy float64
	for _, w := range np.GetWorkers() {
		if old, ok := n.steps[w.GetLocalRank()]; !ok || old != w.GetStep() {
			moved = true
		}
		n.steps[w.GetLocalRank()] = w.GetStep()
		n.step = max(n.step, w.GetStep())
		t.step = max(t.step, w.GetStep())
		if k := w.GetSteps(); k > 0 {
			completed = true
			// The node's time is its slowest worker's.
			wall = max(wall, w.GetWallSeconds()/float64(k))
			busy = max(busy, w.GetCpuSeconds()/float64(k))
		}
	}
	if completed {
		t.window.Add(node, wall, busy, n.step)
	}
	if moved || completed {
		n.last = now
		t.hang.Progress(t.round, completed, now)
		t.hung = false
	}
}

// checkProgress runs on the master's tick: it logs changes of the
// stragglers, and declares a hang when the timer says so, carrying out the
// job's policy.
func (c *core) checkProgress(ctx context.Context, now time.Time, log *slog.Logger) error {
	c.mu.Lock()
	if !c.st.Members.Configured() {
		c.mu.Unlock()
		return nil
	}
	s := c.st.Members.Status()
	t := &c.prog
	t.mu.Lock()
	t.initLocked(c.st.Members.Config().Hang)
	t.syncLocked(int64(s.Round))
	slow, why := t.window.Stragglers()
	if !slices.Equal(slow, t.slow) {
		t.slow, t.why = slow, why
		if len(slow) > 0 {
			log.Warn("straggler: a node's steps are much slower than the others'", "nodes", strings.Join(slow, ","), "why", why)
		} else {
			log.Info("no straggler any more")
		}
	}
	var e *jobstate.Event
	if s.Job == rendezvous.Running && !s.Open && t.hang.Check(now) {
		t.hung, t.hangs = true, t.hangs+1
		idle := now.Sub(t.hang.Since()).Round(time.Millisecond)
		t.reason = fmt.Sprintf("no worker made progress for %s (newest step %d, round %d)%s", idle, t.step, t.round, t.utilLocked())
		t.notice = &roverv1.HangNotice{Id: now.UnixNano(), Policy: int32(t.cfg.Policy), Reason: t.reason}
		log.Warn("the job hangs; the agents collect their workers' stacks", "reason", t.reason,
			"policy", stall.Policy(t.cfg.Policy).String())
		if stall.Policy(t.cfg.Policy) == stall.Restart {
			e = c.hangFailureLocked(t, now)
		}
		c.changedLocked() // the views carry the notice
	}
	t.mu.Unlock()
	c.mu.Unlock()
	if e == nil {
		return nil
	}
	log.Warn("restarting the workers of the hung job (--hang-detection=2)", "node", e.Node, "round", e.Round)
	return c.apply(ctx, e)
}

// utilLocked describes the devices' utilisation, where nodes report it.
func (t *tracker) utilLocked() string {
	var parts []string
	for id, n := range t.nodes {
		if len(n.util) > 0 {
			parts = append(parts, fmt.Sprintf("%s %v%%", id, n.util))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	slices.Sort(parts)
	return "; device utilisation: " + strings.Join(parts, ", ")
}

// hangFailureLocked is the failure the master reports for a hung world,
// which restarts it: it is recorded against the member whose workers
// progressed least (the lowest newest step, then the oldest progress).
func (c *core) hangFailureLocked(t *tracker, now time.Time) *jobstate.Event {
	world := c.st.Members.Rendezvous().Snapshot()
	var pick *rendezvous.Member
	var pickNode *nodeProgress
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range c.st.Members.Addrs() {
			if !yield(id) {
				return
			}
		}
	}) {
		m, ok := world.Member(id)
		if !ok {
			continue
		}
		n := t.nodes[id]
		if pick == nil || behind(n, pickNode) {
			mm := m
			pick, pickNode = &mm, n
		}
	}
	if pick == nil {
		return nil
	}
	f := &roverv1.WorkerFailure{NodeId: pick.NodeID, NodeRank: int32(pick.NodeRank), Host: pick.Addr, Rank: int32(pick.RankOffset),
		ExitCode: -1, TimeUnixNanos: now.UnixNano(), Round: int64(world.WorldRound),
		Message: "hang: " + t.reason + "; the workers' stacks are in each node's log directory (hangs/hang-<id>.txt)"}
	b, err := protojson.Marshal(f)
	if err != nil {
		return nil
	}
	return &jobstate.Event{Type: jobstate.EventWorkerFailed, Time: now, Node: pick.NodeID, Round: world.WorldRound, Failures: []json.RawMessage{b}}
}

// behind reports whether a progressed less than b (nil: nothing at all).
func behind(a, b *nodeProgress) bool {
	switch {
	case a == nil:
		return b != nil
	case b == nil:
		return false
	case a.step != b.step:
		return a.step < b.step
	}
	return a.last.Before(b.last)
}

// proto is the job's progress for GetJob in round; nodes gives the node
// ranks.
func (t *tracker) proto(round int64, nodes []*roverv1.NodeStatus) *roverv1.JobProgress {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.window == nil {
		return &roverv1.JobProgress{Step: -1, Hangs: t.hangs}
	}
	t.syncLocked(round)
	p := &roverv1.JobProgress{Step: -1, Hung: t.hung, Hangs: t.hangs, Stragglers: t.slow, StragglerReason: t.why}
	p.Step = t.step
	if t.hung {
		p.HangReason = t.reason
	}
	for _, n := range t.window.Nodes() {
		ns := &roverv1.NodeStepTime{NodeId: n.Node, Step: n.Step, StepSeconds: n.Wall, BusySeconds: n.Busy,
			Samples: int32(n.Samples), Straggler: n.Straggler}
		for _, s := range nodes {
			if s.GetNodeId() == n.Node {
				ns.NodeRank = s.GetNodeRank()
			}
		}
		p.Nodes = append(p.Nodes, ns)
	}
	slices.SortFunc(p.Nodes, func(a, b *roverv1.NodeStepTime) int { return cmp.Compare(a.NodeRank, b.NodeRank) })
	return p
}

// noticeView is the hang notice for the node views: the newest hang's,
// kept after it ends so that an agent that missed a view still collects
// once (agents act once per id).
func (t *tracker) noticeView() *roverv1.HangNotice {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.notice
}

func deviceSamples(ds []*roverv1.DeviceHealth) []diagnosis.DeviceSample {
	out := make([]diagnosis.DeviceSample, len(ds))
	for i, d := range ds {
		s := diagnosis.DeviceSample{Index: int(d.GetIndex()), Utilization: int(d.GetUtilizationPercent()), ECCUncorrected: d.GetEccUncorrected()}
		for _, x := range d.GetXids() {
			s.Xids = append(s.Xids, int(x))
		}
		out[i] = s
	}
	return out
}
