package nodemanager

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/platform"
)

const gib = 1 << 30

func TestRightSizeRule(t *testing.T) {
	req := platform.Resources{MilliCPU: 2000, MemoryBytes: 8 * gib, GPUs: 1}
	for _, tc := range []struct {
		name      string
		peak      int64
		cores     float64
		sampled   int64
		slow      float64
		oom       int64
		bound     platform.Resources
		want      platform.Resources
		changed   bool
		whyHasSub string
	}{
		{name: "no usage keeps the request", want: req},
		{name: "memory near the request stays", peak: 5 * gib, want: req},
		{name: "far below lowers to peak with headroom", peak: 2 * gib, changed: true,
			want: platform.Resources{MilliCPU: 2000, MemoryBytes: 2 * gib * 5 / 4, GPUs: 1}, whyHasSub: "memory"},
		{name: "never below the floor", peak: 1 << 20, changed: true,
			want: platform.Resources{MilliCPU: 2000, MemoryBytes: MinRightSizedMemory, GPUs: 1}},
		{name: "peak above the request raises it", peak: 8 * gib, changed: true,
			want: platform.Resources{MilliCPU: 2000, MemoryBytes: 10 * gib, GPUs: 1}},
		{name: "raise within the bound", peak: 8 * gib, bound: platform.Resources{MemoryBytes: 9 * gib}, changed: true,
			want: platform.Resources{MilliCPU: 2000, MemoryBytes: 9 * gib, GPUs: 1}},
		{name: "CPU-bound while steps slow raises CPU", peak: 5 * gib, cores: 1.9, sampled: 2000, slow: 1.5, changed: true,
			want: platform.Resources{MilliCPU: 3000, MemoryBytes: 8 * gib, GPUs: 1}, whyHasSub: "steps slowed 1.5x"},
		{name: "CPU-bound with steady steps stays", peak: 5 * gib, cores: 1.9, sampled: 2000, slow: 1.0, want: req},
		{name: "CPU-bound with no step times stays", peak: 5 * gib, cores: 2, sampled: 2000, want: req},
		{name: "CPU-bound steps slowing a little stay", cores: 2, sampled: 2000, slow: 1.2, want: req},
		{name: "slowing steps without CPU-bound stay", cores: 1.2, sampled: 2000, slow: 3, want: req},
		{name: "CPU raise within the bound", cores: 2, sampled: 2000, slow: 2, bound: platform.Resources{MilliCPU: 2500}, changed: true,
			want: platform.Resources{MilliCPU: 2500, MemoryBytes: 8 * gib, GPUs: 1}},
		{name: "CPU at the bound stays", cores: 2, sampled: 2000, slow: 2, bound: platform.Resources{MilliCPU: 2000}, want: req},
		{name: "idle CPU is not lowered", cores: 0.1, sampled: 2000, slow: 2, want: req},
		{name: "OOM memory has precedence over a low peak", peak: 1 * gib, oom: 16 * gib,
			want: platform.Resources{MilliCPU: 2000, MemoryBytes: 16 * gib, GPUs: 1}},
		{name: "OOM memory within the bound", oom: 16 * gib, bound: platform.Resources{MemoryBytes: 12 * gib},
			want: platform.Resources{MilliCPU: 2000, MemoryBytes: 12 * gib, GPUs: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := RightSize(req, Observed{PeakBytes: tc.peak, CPUCores: tc.cores, SampledMilliCPU: tc.sampled, Slowdown: tc.slow}, tc.oom, tc.bound)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("resources (-want +got):\n%s", diff)
			}
			if (why != "") != tc.changed || !strings.Contains(why, tc.whyHasSub) {
				t.Errorf("why = %q; want changed %v mentioning %q", why, tc.changed, tc.whyHasSub)
			}
		})
	}
	// A group that asks for nothing is not given requests.
	if got, why := RightSize(platform.Resources{}, Observed{PeakBytes: 8 * gib, CPUCores: 4, SampledMilliCPU: 2000, Slowdown: 2}, 0, platform.Resources{}); !got.IsZero() || why != "" {
		t.Errorf("no request: got %+v, %q; want none", got, why)
	}
}

func TestSlowdown(t *testing.T) {
	for _, tc := range []struct {
		name            string
		earlier, recent []float64
		slowing         bool
	}{
		{name: "steady", earlier: []float64{1, 1.02, 0.98, 1, 1.01}, recent: []float64{1, 0.99, 1.03, 1, 1}},
		{name: "slowing", earlier: []float64{1, 1.02, 0.98, 1, 1.01}, recent: []float64{1.6, 1.5, 1.7, 1.6, 1.55}, slowing: true},
		{name: "noisy spikes", earlier: []float64{1, 1.1, 0.9, 1, 1}, recent: []float64{3, 1, 0.9, 4, 1.1}},
		{name: "a slow start", earlier: []float64{5, 1, 1, 1, 1}, recent: []float64{1, 1, 1, 1, 1}},
		{name: "faster", earlier: []float64{2, 2, 2, 2, 2}, recent: []float64{1, 1, 1, 1, 1}},
		{name: "too few recent", earlier: []float64{1, 1, 1, 1, 1}, recent: []float64{3, 3, 3, 3}},
		{name: "too few earlier", earlier: []float64{1, 1, 1, 1}, recent: []float64{3, 3, 3, 3, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Slowdown(tc.earlier, tc.recent) >= StepSlowdown; got != tc.slowing {
				t.Errorf("Slowdown = %.2f; want slowing %v (threshold %.2f)", Slowdown(tc.earlier, tc.recent), tc.slowing, StepSlowdown)
			}
		})
	}
}

// observe feeds m one report of node per step time, a second apart from
// at, each with u's memory and CPU, in round 1.
func observe(m *Manager, node string, u Usage, at time.Time, steps ...float64) {
	for i, st := range steps {
		u.StepSeconds, u.Round = st, 1
		m.ObserveUsage(node, u, at.Add(time.Duration(i)*time.Second))
	}
}

// steady and slowing are step times: the same all along, and twice as
// slow after the earlier window.
var (
	steady  = []float64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
	slowing = []float64{1, 1, 1, 1, 1, 2, 2, 2, 2, 2}
)

// sized is a right-sized spec of one group of max nodes asking for 2 CPUs
// and 8 GiB each.
func sized(maxNodes int, limits platform.Resources) Spec {
	g := workers(1, maxNodes)
	g.Resources = platform.Resources{MilliCPU: 2000, MemoryBytes: 8 * gib}
	return Spec{Job: "train", Groups: []GroupSpec{g}, RightSize: true, ResourceLimits: limits}
}

// createdSpec returns the NodeSpec of the only create among cmds.
func createdSpec(t *testing.T, cmds []Command) platform.NodeSpec {
	t.Helper()
	var out []platform.NodeSpec
	for _, c := range cmds {
		if c.Kind == CreateNode {
			out = append(out, c.Spec)
		}
	}
	if len(out) != 1 {
		t.Fatalf("want one create, got %v", summary(cmds))
	}
	return out[0]
}

func TestManagerRightSizesRelaunches(t *testing.T) {
	t.Run("CPU-bound then far below memory", func(t *testing.T) {
		m := mustNew(t, sized(2, platform.Resources{}))
		run(t, m, []step{start(), running("train-worker-0-0", "h1")})
		observe(m, "train-worker-0-0", Usage{ResidentBytes: 2 * gib, PeakResidentBytes: 3 * gib, CPUCores: 1.95}, t0, slowing...)
		got := createdSpec(t, run(t, m, []step{exit("train-worker-0-0", 1).after(time.Minute)}))
		want := platform.Resources{MilliCPU: 3000, MemoryBytes: 3 * gib * 5 / 4}
		if diff := cmp.Diff(want, got.Resources); diff != "" {
			t.Fatalf("relaunch resources (-want +got):\n%s", diff)
		}
		if st := m.Status().Nodes[0].RightSize; st == nil || st.PeakBytes != st.Next.MemoryBytes*4/5 || st.Slowdown != 0 || st.Next != want || !strings.Contains(st.Why, "memory") {
			t.Fatalf("status of the relaunched rank: %+v; want its peak kept, its new node's steps unknown, next as this one", st)
		}
		// Still CPU-bound at 3 CPUs: raised again, from the new request.
		run(t, m, []step{running("train-worker-0-1", "h1").after(2 * time.Minute)})
		observe(m, "train-worker-0-1", Usage{PeakResidentBytes: 3 * gib, CPUCores: 2.9}, t0.Add(3*time.Minute), slowing...)
		got = createdSpec(t, run(t, m, []step{exit("train-worker-0-1", 1).after(4 * time.Minute)}))
		if got.Resources.MilliCPU != 4500 {
			t.Fatalf("second relaunch CPU = %dm; want 4500m", got.Resources.MilliCPU)
		}
		// The other rank reported nothing: it keeps the group's request.
		if s := m.slots[0][1]; s.usage == nil || s.usage.peak != 0 {
			t.Fatalf("rank 1's usage = %+v; want an empty record", s.usage)
		}
	})
	t.Run("CPU-bound with steady steps keeps its CPU", func(t *testing.T) {
		m := mustNew(t, sized(1, platform.Resources{}))
		run(t, m, []step{start(), running("train-worker-0-0", "h1")})
		observe(m, "train-worker-0-0", Usage{PeakResidentBytes: 6 * gib, CPUCores: 2}, t0, steady...)
		cmds := run(t, m, []step{exit("train-worker-0-0", 1)})
		if got := createdSpec(t, cmds); got.Resources.MilliCPU != 2000 || cmds[0].RightSized != nil {
			t.Fatalf("relaunch asks for %+v, right-sized %v; want 2000m as configured", got.Resources, cmds[0].RightSized)
		}
	})
	t.Run("a new round's steps compare only with each other", func(t *testing.T) {
		m := mustNew(t, sized(1, platform.Resources{}))
		run(t, m, []step{start(), running("train-worker-0-0", "h1")})
		u := Usage{PeakResidentBytes: 6 * gib, CPUCores: 2}
		observe(m, "train-worker-0-0", u, t0, steady[:5]...)
		for i := range 5 { // a smaller world after a scale down: slower, but steady
			u.StepSeconds, u.Round = 2, 2
			m.ObserveUsage("train-worker-0-0", u, t0.Add(time.Duration(10+i)*time.Second))
		}
		if r := m.slots[0][0].usage; r.slowdown() != 0 || len(r.earlier) != 5 || r.stepRound != 2 {
			t.Fatalf("after a new round: slowdown %.2f, %d earlier step times of round %d; want 0, 5 of round 2", r.slowdown(), len(r.earlier), r.stepRound)
		}
	})
	t.Run("OOM keeps precedence", func(t *testing.T) {
		m := mustNew(t, sized(1, platform.Resources{}))
		run(t, m, []step{start(), running("train-worker-0-0", "h1")})
		m.ObserveUsage("train-worker-0-0", Usage{PeakResidentBytes: 1 * gib}, t0)
		got := createdSpec(t, run(t, m, []step{oom("train-worker-0-0")}))
		if got.Resources.MemoryBytes != 16*gib {
			t.Fatalf("memory after OOM = %d; want 16 GiB (diagnosis.NextMemory), not the low peak's", got.Resources.MemoryBytes)
		}
	})
	t.Run("limits divided among the nodes", func(t *testing.T) {
		m := mustNew(t, sized(2, platform.Resources{MilliCPU: 5000, MemoryBytes: 18 * gib}))
		run(t, m, []step{start(), running("train-worker-0-0", "h1")})
		observe(m, "train-worker-0-0", Usage{PeakResidentBytes: 8 * gib, CPUCores: 2}, t0, slowing...)
		got := createdSpec(t, run(t, m, []step{exit("train-worker-0-0", 1)}))
		want := platform.Resources{MilliCPU: 2500, MemoryBytes: 9 * gib}
		if diff := cmp.Diff(want, got.Resources); diff != "" {
			t.Fatalf("relaunch resources within limits/2 (-want +got):\n%s", diff)
		}
	})
	t.Run("off without RightSize", func(t *testing.T) {
		sp := sized(1, platform.Resources{})
		sp.RightSize = false
		m := mustNew(t, sp)
		run(t, m, []step{start(), running("train-worker-0-0", "h1")})
		m.ObserveUsage("train-worker-0-0", Usage{PeakResidentBytes: 1 * gib, CPUCores: 2}, t0)
		got := createdSpec(t, run(t, m, []step{exit("train-worker-0-0", 1)}))
		if diff := cmp.Diff(sp.Groups[0].Resources, got.Resources); diff != "" {
			t.Fatalf("resources changed without RightSize:\n%s", diff)
		}
	})
	t.Run("a rank new to scaling is sized like its group", func(t *testing.T) {
		sp := sized(3, platform.Resources{})
		sp.Groups[0].Nodes = 1
		m := mustNew(t, sp)
		run(t, m, []step{start(), running("train-worker-0-0", "h1")})
		m.ObserveUsage("train-worker-0-0", Usage{PeakResidentBytes: 2 * gib, CPUCores: 1}, t0)
		got := createdSpec(t, run(t, m, []step{scale(DefaultGroup, 2)}))
		if got.Rank != 1 || got.Resources.MemoryBytes != 2*gib*5/4 || got.Resources.MilliCPU != 2000 {
			t.Fatalf("scaled-up rank %d asks for %+v; want rank 1 with 2.5 GiB, 2000m", got.Rank, got.Resources)
		}
	})
	t.Run("a template's requests are the base", func(t *testing.T) {
		sp := sized(1, platform.Resources{})
		sp.Groups[0].Resources, sp.Groups[0].MemoryLimit, sp.Groups[0].MilliCPU = platform.Resources{}, 8*gib, 2000
		m := mustNew(t, sp)
		run(t, m, []step{start(), running("train-worker-0-0", "h1")})
		observe(m, "train-worker-0-0", Usage{PeakResidentBytes: 6 * gib, CPUCores: 1.95}, t0, slowing...)
		got := createdSpec(t, run(t, m, []step{exit("train-worker-0-0", 1)}))
		if want := (platform.Resources{MilliCPU: 3000}); got.Resources != want {
			t.Fatalf("relaunch asks for %+v; want %+v (memory left to the template)", got.Resources, want)
		}
	})
	t.Run("bad reports change nothing", func(t *testing.T) {
		m := mustNew(t, sized(1, platform.Resources{}))
		run(t, m, []step{start(), running("train-worker-0-0", "h1")})
		m.ObserveUsage("train-worker-0-0", Usage{PeakResidentBytes: -1}, t0)
		m.ObserveUsage("train-worker-9-0", Usage{PeakResidentBytes: gib}, t0)
		if u := m.slots[0][0].usage; u.peak != 0 || len(u.cpu) != 0 {
			t.Fatalf("usage = %+v after bad reports; want none recorded", u)
		}
	})
}

func TestRightSizePersisted(t *testing.T) {
	m := mustNew(t, sized(2, platform.Resources{MilliCPU: 8000}))
	run(t, m, []step{start(), running("train-worker-0-0", "h1")})
	// More than cpuSamples and 2*stepSamples: the record stays bounded.
	observe(m, "train-worker-0-0", Usage{PeakResidentBytes: 3 * gib, CPUCores: 1.9}, t0, slices.Concat(slowing, slowing[5:])...)
	if u := m.slots[0][0].usage; len(u.cpu) != cpuSamples || len(u.earlier) != stepSamples || len(u.recent) != stepSamples {
		t.Fatalf("%d CPU samples, %d+%d step times kept; want %d, %d+%d", len(u.cpu), len(u.earlier), len(u.recent), cpuSamples, stepSamples, stepSamples)
	}
	data, err := m.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Restore(data)
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, data)
	}
	want := createdSpec(t, m.Observe(platform.Event{NodeID: "train-worker-0-0", Kind: platform.Exited, ExitCode: 1}, t0.Add(time.Minute)))
	got := createdSpec(t, r.Observe(platform.Event{NodeID: "train-worker-0-0", Kind: platform.Exited, ExitCode: 1}, t0.Add(time.Minute)))
	if diff := cmp.Diff(want, got); diff != "" || got.Resources.MilliCPU != 3000 {
		t.Fatalf("restored manager's relaunch (-orig +restored):\n%s\nresources %+v", diff, got.Resources)
	}
	for _, bad := range []string{
		strings.Replace(string(data), `"peak_bytes":`, `"peak_bytes":-`, 1),
		strings.Replace(string(data), `"step_recent":[`, `"step_recent":[-1,`, 1),
		strings.Replace(string(data), `"step_earlier":[1,`, `"step_earlier":[`, 1),
	} {
		if _, err := Restore([]byte(bad)); err == nil || !strings.Contains(err.Error(), "usage") {
			t.Fatalf("restore of a bad usage record: %v; want an error about usage", err)
		}
	}
}
