package jobstate

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/diagnosis"
	"github.com/roverml/rover/internal/jobconfig"
	"github.com/roverml/rover/internal/stall"
)

func workerAt(step, steps int64, wall, cpu float64) WorkerReport {
	return WorkerReport{Step: step, Steps: steps, WallSeconds: wall, CPUSeconds: cpu}
}

// TestProgressHang drives the hang timer through reports and ticks: a
// started step does not arm it, a completed one does; no progress for the
// timeout declares one hang, with a notice that says why and outlives the
// hang; a new round starts afresh.
func TestProgressHang(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := jobconfig.Hang{Timeout: 10 * time.Second, Policy: int(stall.Restart)}
	p := NewProgress()
	if v := p.View(1); v.Step != -1 || v.Hangs != 0 {
		t.Fatalf("view before any progress: %+v", v)
	}
	p.Follow(cfg, 1)
	p.Report("a", NodeReport{Round: 1, Workers: []WorkerReport{workerAt(1, 0, 0, 0)}}, t0)
	if tick := p.Tick(t0.Add(time.Hour), true); tick.Hang != nil {
		t.Fatalf("a started first step is a hang: %+v", tick.Hang)
	}
	p.Report("a", NodeReport{Round: 1, Workers: []WorkerReport{workerAt(2, 1, 1, 1)},
		Devices: []diagnosis.DeviceSample{{Index: 0, Utilization: 0}}}, t0.Add(time.Hour+time.Second))
	if tick := p.Tick(t0.Add(time.Hour+10*time.Second), false); tick.Hang != nil {
		t.Fatal("a job in an open round hangs")
	}
	tick := p.Tick(t0.Add(time.Hour+11*time.Second), true)
	want := "no worker made progress for 10s (newest step 2, round 1); device utilisation: a [0]%"
	if tick.Hang == nil || tick.Hang.Reason != want || tick.Hang.Policy != stall.Restart {
		t.Fatalf("hang %+v, want reason %q", tick.Hang, want)
	}
	if again := p.Tick(t0.Add(2*time.Hour), true); again.Hang != nil {
		t.Fatal("a hang declared twice")
	}
	if v := p.View(1); !v.Hung || v.HangReason != want || v.Hangs != 1 || v.Step != 2 {
		t.Fatalf("view while hung: %+v", v)
	}
	p.Follow(cfg, 2)
	v := p.View(2)
	if v.Hung || v.Hangs != 1 || v.Step != -1 || len(v.Nodes) != 0 {
		t.Fatalf("view of the new round: %+v", v)
	}
	if n, ok := p.Notice(); !ok || n.ID != tick.Hang.ID || n.Reason != want {
		t.Fatalf("notice after the hang: %+v %v", n, ok)
	}
}

// TestProgressViewOfALaterRound: a view of a round Progress has not
// followed yet is what Follow would leave, and leaves the state alone.
func TestProgressViewOfALaterRound(t *testing.T) {
	p := NewProgress()
	p.Follow(jobconfig.Hang{}, 1)
	p.Report("a", NodeReport{Round: 1, Workers: []WorkerReport{workerAt(5, 5, 1, 1)}}, time.Unix(0, 0))
	if v := p.View(2); v.Step != -1 || len(v.Nodes) != 0 {
		t.Fatalf("view of round 2: %+v", v)
	}
	if v := p.View(1); v.Step != 5 || len(v.Nodes) != 1 {
		t.Fatalf("view of round 1 after viewing round 2: %+v", v)
	}
}

// TestProgressStragglers: a node at 3x the other's step time is reported
// once when named, and once when it is no longer.
func TestProgressStragglers(t *testing.T) {
	p := NewProgress()
	p.Follow(jobconfig.Hang{}, 1)
	now := time.Unix(0, 0)
	for i := int64(1); i <= 4; i++ {
		p.Report("a", NodeReport{Round: 1, Workers: []WorkerReport{workerAt(10*i, 10, 1, 1)}}, now)
		p.Report("b", NodeReport{Round: 1, Workers: []WorkerReport{workerAt(10*i, 10, 3, 3)}}, now)
	}
	tick := p.Tick(now, true)
	if !tick.StragglersChanged || !cmp.Equal(tick.Stragglers, []string{"b"}) || !strings.Contains(tick.StragglerReason, "b takes 0.300s per step, 3.0x") {
		t.Fatalf("tick %+v, want straggler b", tick)
	}
	if again := p.Tick(now, true); again.StragglersChanged {
		t.Fatal("an unchanged straggler reported again")
	}
	v := p.View(1)
	if !cmp.Equal(v.Stragglers, []string{"b"}) || len(v.Nodes) != 2 {
		t.Fatalf("view %+v", v)
	}
	p.Follow(jobconfig.Hang{}, 2)
	if tick := p.Tick(now, true); tick.StragglersChanged || tick.Stragglers != nil {
		t.Fatalf("a new round's tick %+v: Follow forgot the stragglers already", tick)
	}
}

// TestLeastProgressed: the node with the lowest newest step, then the
// oldest progress, and one that reported nothing before all.
func TestLeastProgressed(t *testing.T) {
	p := NewProgress()
	p.Follow(jobconfig.Hang{}, 1)
	t0 := time.Unix(100, 0)
	p.Report("a", NodeReport{Round: 1, Workers: []WorkerReport{workerAt(5, 1, 1, 1)}}, t0.Add(time.Second))
	p.Report("b", NodeReport{Round: 1, Workers: []WorkerReport{workerAt(5, 1, 1, 1)}}, t0)
	p.Report("c", NodeReport{Round: 1, Workers: []WorkerReport{workerAt(7, 1, 1, 1)}}, t0)
	tests := []struct {
		candidates []string
		want       string
		ok         bool
	}{
		{nil, "", false},
		{[]string{"a", "c"}, "a", true},
		{[]string{"a", "b", "c"}, "b", true},
		{[]string{"a", "b", "d"}, "d", true},
	}
	for _, tt := range tests {
		if got, ok := p.LeastProgressed(tt.candidates); got != tt.want || ok != tt.ok {
			t.Errorf("LeastProgressed(%v) = %q, %v; want %q, %v", tt.candidates, got, ok, tt.want, tt.ok)
		}
	}
}

// TestProgressIsNotJournaled: a state's snapshot is the same whatever its
// progress.
func TestProgressIsNotJournaled(t *testing.T) {
	st := NewState(nil, nil)
	before, err := st.MarshalSnapshot("j")
	if err != nil {
		t.Fatal(err)
	}
	st.Progress.Follow(jobconfig.Hang{Timeout: time.Second}, 1)
	st.Progress.Report("a", NodeReport{Round: 1, Workers: []WorkerReport{workerAt(5, 1, 1, 1)}}, time.Unix(0, 0))
	st.Progress.Tick(time.Unix(10, 0), true)
	after, err := st.MarshalSnapshot("j")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(before), string(after)); diff != "" {
		t.Fatalf("progress changed the snapshot (-before +after):\n%s", diff)
	}
}

// TestProgressCollectives drives collective timing through reports: a node
// whose wall and busy time per step equal the others' but that computes
// longest between collectives is the straggler, with the wait figures in
// the view; a hang names the collective the others wait in and the rank
// that never arrived, in the reason and the view, until the next round.
func TestProgressCollectives(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := NewProgress()
	p.Follow(jobconfig.Hang{Timeout: 10 * time.Second}, 1)
	coll := func(seq int64, done bool) *stall.Collective {
		return &stall.Collective{Op: "all_reduce (DDP bucket)", Bytes: 17412, Group: "world", Seq: seq, Done: done}
	}
	worker := func(rank int32, step int64, comm float64, c *stall.Collective) WorkerReport {
		return WorkerReport{LocalRank: 0, Rank: rank, Step: step, Steps: 10, WallSeconds: 8.5, CPUSeconds: 0.8,
			CommSeconds: comm, Collectives: 10, Collective: c}
	}
	now := t0
	for i := int64(1); i <= 5; i++ {
		now = t0.Add(time.Duration(i) * time.Second)
		p.Report("a", NodeReport{Round: 1, Workers: []WorkerReport{worker(0, 10*i, 7.7, coll(10*i, true))}}, now)
		p.Report("b", NodeReport{Round: 1, Workers: []WorkerReport{worker(1, 10*i, 7.6, coll(10*i, true))}}, now)
		p.Report("c", NodeReport{Round: 1, Workers: []WorkerReport{worker(2, 10*i, 0.5, coll(10*i, true))}}, now)
	}
	tick := p.Tick(now, true)
	if !cmp.Equal(tick.Stragglers, []string{"c"}) || !strings.Contains(tick.StragglerReason, "c computes 0.800s per step between collectives") {
		t.Fatalf("stragglers %v: %s", tick.Stragglers, tick.StragglerReason)
	}
	for _, n := range p.View(1).Nodes {
		if want := map[string]float64{"a": 0.77, "b": 0.76, "c": 0.05}[n.Node]; !approx(n.Wait, want) {
			t.Errorf("node %s: wait %v per step, want %v", n.Node, n.Wait, want)
		}
		if n.MatmulTFLOPS != 0 {
			t.Errorf("node %s: matmul throughput %v without GPU timing", n.Node, n.MatmulTFLOPS)
		}
	}
	// Ranks 0 and 1 issue collective 51; rank 2 never does (it loops in
	// user code), having completed 50; an untimed report leaves it.
	p.Report("a", NodeReport{Round: 1, Workers: []WorkerReport{{Rank: 0, Step: 51, Collective: coll(51, false)}}}, now.Add(time.Second))
	p.Report("b", NodeReport{Round: 1, Workers: []WorkerReport{{Rank: 1, Step: 51, Collective: coll(51, false)}}}, now.Add(time.Second))
	p.Report("c", NodeReport{Round: 1, Workers: []WorkerReport{{Rank: 2, Step: 51}}}, now.Add(time.Second))
	tick = p.Tick(now.Add(12*time.Second), true)
	want := "ranks 0-1 wait in all_reduce (DDP bucket) #51 (group world, 17.0 KiB); rank 2 (c) never arrived: it last completed all_reduce (DDP bucket) #50 (group world, 17.0 KiB)"
	if tick.Hang == nil || !strings.HasSuffix(tick.Hang.Reason, "; collectives: "+want) {
		t.Fatalf("hang %+v, want the location %q", tick.Hang, want)
	}
	if v := p.View(1); len(v.HangCollectives) != 3 || v.HangCollectives[2].Rank != 2 || !v.HangCollectives[2].Collective.Done {
		t.Fatalf("view's collectives: %+v", v.HangCollectives)
	}
	p.Follow(jobconfig.Hang{Timeout: 10 * time.Second}, 2)
	if v := p.View(2); len(v.HangCollectives) != 0 {
		t.Fatalf("a new round's view has the old hang's collectives: %+v", v.HangCollectives)
	}
}

// TestProgressDDPSteps: where stock DDP's gradient buckets are not timed,
// a hang is located from the DDP step each rank is in: the ranks that
// never began the others' step are named; a collective some ranks wait in
// is named first; and ranks all in one step are said to be in it, not
// outside collectives.
func TestProgressDDPSteps(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	loss := func(seq int64, done bool) *stall.Collective {
		return &stall.Collective{Op: "all_reduce", Bytes: 4, Group: "world", Seq: seq, Done: done}
	}
	step := func(forwards int64) *stall.DDPStep { return &stall.DDPStep{Group: "world", Forwards: forwards} }
	tests := []struct {
		name  string
		last  [3]WorkerReport // each rank's newest report
		want  string
		steps [3]int64 // the view's DDP steps by rank
	}{
		{"a rank never began the step", [3]WorkerReport{
			{Rank: 0, Step: 50, DDPStep: step(51)}, {Rank: 1, Step: 50, DDPStep: step(51)}, {Rank: 2, Step: 50}},
			"; DDP steps: ranks 0-1 are in DDP step #51 (group world), whose gradient buckets are not timed; rank 2 (c) never began it: it is in DDP step #50",
			[3]int64{51, 51, 50}},
		{"a timed collective some ranks wait in", [3]WorkerReport{
			{Rank: 0, Step: 50, Collective: loss(6, false)}, {Rank: 1, Step: 50, Collective: loss(6, false)}, {Rank: 2, Step: 50, DDPStep: step(51)}},
			"; collectives: ranks 0-1 wait in all_reduce #6 (group world, 4 B); rank 2 (c) never arrived: it last completed all_reduce #5 (group world, 4 B)",
			[3]int64{50, 50, 51}},
		{"every rank in the same step", [3]WorkerReport{
			{Rank: 0, Step: 50, DDPStep: step(51)}, {Rank: 1, Step: 50, DDPStep: step(51)}, {Rank: 2, Step: 50, DDPStep: step(51)}},
			"; collectives: no rank waits for another in a timed collective (newest all_reduce #5 (group world, 4 B), done true); " +
				"the ranks are in DDP step #51 (group world), whose gradient buckets are not timed: they may wait in its gradient all-reduce",
			[3]int64{51, 51, 51}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewProgress()
			p.Follow(jobconfig.Hang{Timeout: 10 * time.Second}, 1)
			now := t0
			for i := int64(1); i <= 50; i++ { // steps of 10 ms, every tenth with the loss's all-reduce
				now = t0.Add(time.Duration(i) * 10 * time.Millisecond)
				for r, node := range []string{"a", "b", "c"} {
					w := WorkerReport{Rank: int32(r), Step: i, Steps: 1, WallSeconds: 0.01, CPUSeconds: 0.01, DDPStep: step(i)}
					if i%10 == 0 {
						w.Collective, w.Collectives, w.CommSeconds = loss(i/10, true), 1, 0.001
					}
					p.Report(node, NodeReport{Round: 1, Workers: []WorkerReport{w}}, now)
				}
			}
			for r, node := range []string{"a", "b", "c"} {
				p.Report(node, NodeReport{Round: 1, Workers: []WorkerReport{tt.last[r]}}, now)
			}
			tick := p.Tick(now.Add(11*time.Second), true)
			if tick.Hang == nil || !strings.HasSuffix(tick.Hang.Reason, tt.want) {
				t.Fatalf("hang %+v, want the location %q", tick.Hang, tt.want)
			}
			var got [3]int64
			for _, rc := range p.View(1).HangCollectives {
				got[rc.Rank] = rc.Step.Forwards
			}
			if got != tt.steps {
				t.Errorf("the view's DDP steps %v, want %v", got, tt.steps)
			}
		})
	}
}

// TestProgressMatmulThroughput: a node's GPU matmul throughput is its
// workers' operations over their kernel seconds, in the view.
func TestProgressMatmulThroughput(t *testing.T) {
	p := NewProgress()
	p.Follow(jobconfig.Hang{}, 1)
	gpu := func(lr int32, flops int64) WorkerReport {
		return WorkerReport{LocalRank: lr, Rank: lr, Step: 60, Steps: 1, WallSeconds: 0.1, MatmulFlops: flops, MatmulSeconds: 0.05}
	}
	p.Report("g", NodeReport{Round: 1, Workers: []WorkerReport{gpu(0, 1e12), gpu(1, 2e12)}}, time.Unix(100, 0))
	p.Report("cpu", NodeReport{Round: 1, Workers: []WorkerReport{{Step: 60, Steps: 1, WallSeconds: 0.1}}}, time.Unix(100, 0))
	got := map[string]float64{}
	for _, n := range p.View(1).Nodes {
		got[n.Node] = n.MatmulTFLOPS
	}
	if want := map[string]float64{"g": 30, "cpu": 0}; !cmp.Equal(got, want, cmp.Comparer(approx)) {
		t.Errorf("matmul TFLOPS %v, want %v", got, want)
	}
}

func approx(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
