package jobstate

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/roverml/rover/internal/diagnosis"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/stall"
)

// Progress is the job's runtime progress (docs/design/hang-and-stragglers.md):
// the per-node step times and their stragglers, and the hang timer, both
// package stall's pure logic fed by the agents' heartbeats. It is the one
// sub-state that is not journaled: it is outside MarshalSnapshot and
// RestoreSnapshot, and a restarted master starts it afresh, arming its hang
// timer at the next completed step. Its events (Follow, Report, Tick) take
// the time from the caller; the master calls them under its core's lock.
type Progress struct {
	window *stall.Window // nil until Follow
	hang   *stall.Hang
	cfg    jobconfig.Hang
	round  int64
	step   int64 // newest step of the round; -1 none
	nodes  map[string]*nodeProgress
	notice *HangNotice
	hung   bool
	reason string
	hangs  int64
	slow   []string // the stragglers last reported
	why    string
	// at is where the ranks stood in their collectives at the newest hang.
	at []stall.RankCollective
}

// nodeProgress is what Progress knows of one node in the round.
type nodeProgress struct {
	steps map[int32]int64 // newest step by local rank
	last  time.Time       // of its newest progress
	step  int64
	util  []int // its devices' utilisation in the newest sample
	// colls is the newest collective and DDP step of each local rank that
	// reported one.
	colls map[int32]stall.RankCollective
}

// NodeReport is one node's progress, as its heartbeat carries it.
type NodeReport struct {
	Round   int64
	Workers []WorkerReport
	Devices []diagnosis.DeviceSample
	// LinkRTT is the node's link round trip in seconds (0: not measured).
	LinkRTT float64
}

// WorkerReport is one worker's progress: its newest step, and the steps it
// completed since its last report with the wall and CPU seconds they took.
type WorkerReport struct {
	LocalRank   int32
	Step        int64
	Steps       int64
	WallSeconds float64
	CPUSeconds  float64
	// Collective timing, where the worker reports it: its global rank, the
	// seconds of the Steps in collectives and the collectives issued, and
	// its newest collective (nil: unchanged since its previous report).
	Rank        int32
	CommSeconds float64
	Collectives int64
	Collective  *stall.Collective
	// The DDP step the worker is in (nil: unchanged since its previous
	// report, or no DDP).
	DDPStep *stall.DDPStep
	// GPU timing with CUDA events, where the worker reports it: the
	// floating-point operations of its matmuls and their kernels' seconds.
	MatmulFlops   int64
	MatmulSeconds float64
	// Samples is the training samples of the Steps (0: not reported).
	Samples int64
}

// HangNotice tells the agents that the job hangs: they collect their
// workers' stacks once per ID.
type HangNotice struct {
	ID     int64
	Policy stall.Policy
	Reason string
}

// ProgressView is the job's progress for GetJob.
type ProgressView struct {
	Step            int64 // newest step of the round; -1 none
	Hung            bool
	HangReason      string // while hung
	Hangs           int64
	Stragglers      []string
	StragglerReason string
	Nodes           []stall.NodeTime // in the window's order
	// HangCollectives is where each rank stood in its collectives when the
	// hang was declared, by rank; while hung.
	HangCollectives []stall.RankCollective
}

// ProgressTick is what a tick found: the stragglers when they changed, and
// the hang it declared.
type ProgressTick struct {
	StragglersChanged bool
	Stragglers        []string
	StragglerReason   string
	Hang              *HangNotice // a hang declared at this tick; nil none
}

// NewProgress returns the progress of a job that has made none.
func NewProgress() *Progress { return &Progress{} }

// Follow follows the job's hang configuration and its round: a changed
// configuration starts afresh, and so do a new round's workers.
func (p *Progress) Follow(cfg jobconfig.Hang, round int64) {
	if p.window == nil || p.cfg != cfg {
		p.cfg = cfg
		p.window = stall.NewWindow(stall.DefaultStraggler)
		p.hang = stall.NewHang(cfg.Timeout)
		p.nodes = map[string]*nodeProgress{}
		p.step = -1
	}
	if round <= p.round {
		return
	}
	p.round, p.step, p.hung, p.slow, p.why = round, -1, false, nil, ""
	p.hang.NewRound(round)
	p.window.Reset()
	clear(p.nodes)
}

// Round is the round Progress follows.
func (p *Progress) Round() int64 { return p.round }

// Report records a node's progress at now; the caller has called Follow and
// checked that the node is a member of the round's world.
func (p *Progress) Report(node string, r NodeReport, now time.Time) {
	n := p.nodes[node]
	if n == nil {
		n = &nodeProgress{steps: map[int32]int64{}, colls: map[int32]stall.RankCollective{}}
		p.nodes[node] = n
	}
	n.util = n.util[:0]
	for _, d := range r.Devices {
		n.util = append(n.util, d.Utilization)
	}
	moved, completed, timed := false, false, false
	var wall, busy, compute, wait, flops, matmul float64
	for _, w := range r.Workers {
		flops, matmul = flops+float64(w.MatmulFlops), matmul+w.MatmulSeconds
		if w.Collective != nil || w.DDPStep != nil {
			rc := n.colls[w.LocalRank]
			rc.Rank, rc.Node = w.Rank, node
			if w.Collective != nil {
				rc.Collective = *w.Collective
			}
			if w.DDPStep != nil {
				rc.Step = *w.DDPStep
			}
			n.colls[w.LocalRank] = rc
		}
		if old, ok := n.steps[w.LocalRank]; !ok || old != w.Step {
			moved = true
		}
		n.steps[w.LocalRank] = w.Step
		n.step = max(n.step, w.Step)
		p.step = max(p.step, w.Step)
		if k := w.Steps; k > 0 {
			completed = true
			// The node's time is its slowest worker's.
			wall = max(wall, w.WallSeconds/float64(k))
			busy = max(busy, w.CPUSeconds/float64(k))
			if w.Collectives > 0 {
				// The node's compute is its slowest worker's, with that
				// worker's wait.
				c := max(w.WallSeconds-w.CommSeconds, 0) / float64(k)
				if !timed || c > compute {
					compute, wait = c, w.CommSeconds/float64(k)
				}
				timed = true
			}
		}
	}
	if completed {
		p.window.Add(node, wall, busy, n.step)
		if timed {
			p.window.AddWait(node, compute, wait)
		}
		if r.LinkRTT > 0 {
			p.window.AddLink(node, r.LinkRTT)
		}
	}
	if matmul > 0 {
		p.window.AddMatmul(node, flops, matmul)
	}
	if moved || completed {
		n.last = now
		p.hang.Progress(p.round, completed, now)
		p.hung = false
	}
}

// Tick checks the stragglers and the hang timer at now; running says the
// job runs in a closed round (only then can it hang). The caller has called
// Follow.
func (p *Progress) Tick(now time.Time, running bool) ProgressTick {
	var out ProgressTick
	slow, why := p.window.Stragglers()
	if !slices.Equal(slow, p.slow) {
		p.slow, p.why = slow, why
		out.StragglersChanged, out.Stragglers, out.StragglerReason = true, slow, why
	}
	if running && p.hang.Check(now) {
		p.hung, p.hangs = true, p.hangs+1
		idle := now.Sub(p.hang.Since()).Round(time.Millisecond)
		p.reason = fmt.Sprintf("no worker made progress for %s (newest step %d, round %d)%s%s", idle, p.step, p.round, p.utilisation(), p.locate())
		p.notice = &HangNotice{ID: now.UnixNano(), Policy: stall.Policy(p.cfg.Policy), Reason: p.reason}
		n := *p.notice
		out.Hang = &n
	}
	return out
}

// locate records where the ranks stand in their collectives and DDP
// steps, and says it ("" when no rank reported either): the collective
// some ranks wait in for the others (stall.Locate), else the DDP step
// some ranks never began (stall.LocateStep: where DDP's gradient buckets
// are not timed, a rank missing from them shows only there), else where
// they all stand.
func (p *Progress) locate() string {
	p.at = p.at[:0]
	for _, n := range p.nodes {
		for _, c := range n.colls {
			p.at = append(p.at, c)
		}
	}
	if len(p.at) == 0 {
		return ""
	}
	slices.SortFunc(p.at, func(a, b stall.RankCollective) int { return int(a.Rank) - int(b.Rank) })
	if l, ok := stall.Locate(p.at); ok {
		return "; collectives: " + l.String()
	}
	if l, ok := stall.LocateStep(p.at); ok {
		return "; DDP steps: " + l.String()
	}
	if s := stall.Unlocated(p.at); s != "" {
		return "; collectives: " + s
	}
	return ""
}

// utilisation describes the devices' utilisation, where nodes report it.
func (p *Progress) utilisation() string {
	var parts []string
	for id, n := range p.nodes {
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

// Hung reports whether the job is hung: declared so, and no progress since.
func (p *Progress) Hung() bool { return p.hung }

// Reason is why the job was last declared hung.
func (p *Progress) Reason() string { return p.reason }

// LeastProgressed is the node of candidates (in order) whose workers
// progressed least: the lowest newest step, then the oldest progress; a
// node that reported nothing is behind every other. The first wins a tie;
// ok is false for no candidates.
func (p *Progress) LeastProgressed(candidates []string) (string, bool) {
	pick, found := "", false
	var pickNode *nodeProgress
	for _, id := range candidates {
		n := p.nodes[id]
		if !found || behind(n, pickNode) {
			pick, pickNode, found = id, n, true
		}
	}
	return pick, found
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

// View is the job's progress in round, as Follow(round) would leave it.
func (p *Progress) View(round int64) ProgressView {
	if p.window == nil || round > p.round {
		return ProgressView{Step: -1, Hangs: p.hangs}
	}
	v := ProgressView{Step: p.step, Hung: p.hung, Hangs: p.hangs, Stragglers: slices.Clone(p.slow), StragglerReason: p.why}
	if p.hung {
		v.HangReason = p.reason
		v.HangCollectives = slices.Clone(p.at)
	}
	v.Nodes = p.window.Nodes()
	return v
}

// Notice is the newest hang's notice, kept after the hang ends so that an
// agent that missed a view still collects once (agents act once per ID);
// ok is false before the first hang.
func (p *Progress) Notice() (HangNotice, bool) {
	if p.notice == nil {
		return HangNotice{}, false
	}
	return *p.notice, true
}
