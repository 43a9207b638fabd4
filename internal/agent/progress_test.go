package agent

import (
	"math"
	"strings"
	"testing"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// TestProgressBook checks the sums between takes, a new round's reset,
// validation, and device samples from a fake monitor.
func TestProgressBook(t *testing.T) {
	b := newProgressBook()
	if b.take() != nil {
		t.Fatal("an empty book has something to send")
	}
	b.add(1, &roverv1.WorkerProgress{LocalRank: 0, Step: 5, Steps: 2, WallSeconds: 1, CpuSeconds: 0.5})
	b.add(1, &roverv1.WorkerProgress{LocalRank: 0, Step: 7, Steps: 2, WallSeconds: 1, CpuSeconds: 0.5})
	b.add(2, &roverv1.WorkerProgress{LocalRank: 1, Step: 1, Steps: 1, WallSeconds: 3, CpuSeconds: 1})
	b.add(2, &roverv1.WorkerProgress{LocalRank: 0, Step: 2, Steps: 1, WallSeconds: 1, CpuSeconds: 1})
	np := b.take()
	if np.GetRound() != 2 || len(np.GetWorkers()) != 2 {
		t.Fatalf("take: %v, want round 2's two workers", np)
	}
	b.add(3, &roverv1.WorkerProgress{LocalRank: 0, Step: 5, Steps: 2, WallSeconds: 1})
	b.add(3, &roverv1.WorkerProgress{LocalRank: 0, Step: 7, Steps: 3, WallSeconds: 2})
	if w := b.take().GetWorkers(); len(w) != 1 || w[0].GetStep() != 7 || w[0].GetSteps() != 5 || w[0].GetWallSeconds() != 3 {
		t.Fatalf("sums: %v", w)
	}
	// The newest step's time: the worker's, else the report's receipt.
	b.now = func() int64 { return 42 }
	b.add(4, &roverv1.WorkerProgress{LocalRank: 0, Step: 8, StepUnixNanos: 7})
	b.add(4, &roverv1.WorkerProgress{LocalRank: 1, Step: 8})
	for _, w := range b.take().GetWorkers() {
		if want := map[int32]int64{0: 7, 1: 42}[w.GetLocalRank()]; w.GetStepUnixNanos() != want {
			t.Errorf("local rank %d: step_unix_nanos %d, want %d", w.GetLocalRank(), w.GetStepUnixNanos(), want)
		}
	}
	// Collective timing: sums, and the newest collective (a report without
	// one leaves the one before).
	c1 := &roverv1.Collective{Op: "all_reduce", Bytes: 64, Group: "world", Seq: 3}
	b.add(5, &roverv1.WorkerProgress{LocalRank: 0, Step: 9, Steps: 1, WallSeconds: 1, CommSeconds: 0.25, Collectives: 2, Collective: c1})
	b.add(5, &roverv1.WorkerProgress{LocalRank: 0, Step: 10, Steps: 1, WallSeconds: 1, CommSeconds: 0.5, Collectives: 3})
	if w := b.take().GetWorkers(); len(w) != 1 || w[0].GetCommSeconds() != 0.75 || w[0].GetCollectives() != 5 || w[0].GetCollective().GetSeq() != 3 {
		t.Fatalf("collective sums: %v", w)
	}
	// The newest DDP step likewise.
	d1 := &roverv1.DDPStep{Group: "world", Forwards: 14}
	b.add(5, &roverv1.WorkerProgress{LocalRank: 0, Step: 11, DdpStep: d1})
	b.add(5, &roverv1.WorkerProgress{LocalRank: 0, Step: 12})
	if w := b.take().GetWorkers(); len(w) != 1 || w[0].GetDdpStep().GetForwards() != 14 {
		t.Fatalf("DDP step: %v", w)
	}
	// GPU timing (CUDA events): sums.
	b.add(6, &roverv1.WorkerProgress{LocalRank: 1, Step: 11, GpuCollectiveSeconds: 0.5, MatmulSeconds: 0.25, MatmulFlops: 1000})
	b.add(6, &roverv1.WorkerProgress{LocalRank: 1, Step: 12, GpuCollectiveSeconds: 0.25, MatmulSeconds: 0.5, MatmulFlops: 2000})
	if w := b.take().GetWorkers(); len(w) != 1 || w[0].GetGpuCollectiveSeconds() != 0.75 || w[0].GetMatmulSeconds() != 0.75 || w[0].GetMatmulFlops() != 3000 {
		t.Fatalf("GPU timing sums: %v", w)
	}
	b.devices = fakeDevices{{Index: 0, Utilization: 0, Xids: []int{79}}}
	if d := b.take().GetDevices(); len(d) != 1 || d[0].GetXids()[0] != 79 {
		t.Fatalf("devices: %v", d)
	}
	for _, bad := range []*roverv1.WorkerProgress{nil, {LocalRank: 2}, {Step: -1}, {WallSeconds: -1}, {StepUnixNanos: -1},
		{CommSeconds: -1}, {Collectives: -1}, {GpuCollectiveSeconds: -1}, {MatmulSeconds: math.NaN()}, {MatmulFlops: -1}, {Collective: &roverv1.Collective{Op: "all_reduce"}}, {Collective: &roverv1.Collective{Seq: 1}},
		{DdpStep: &roverv1.DDPStep{Group: "world"}}, {DdpStep: &roverv1.DDPStep{Forwards: 1, Group: strings.Repeat("g", 257)}}} {
		if checkProgress(bad, 2) == nil {
			t.Errorf("%v passed the checks", bad)
		}
	}
}

type fakeDevices []DeviceSample

func (f fakeDevices) Sample() ([]DeviceSample, error) { return f, nil }

var _ DeviceMonitor = fakeDevices(nil)

// TestProgressBookSamples: the samples of a worker's reports are summed
// between takes like its steps; a report with negative samples or more
// than maxSamples is refused (the report is dropped with InvalidArgument:
// a worker that sends one has a bug), and the sum of many valid reports is
// capped at maxSamples, so a flood of huge reports cannot overflow it.
func TestProgressBookSamples(t *testing.T) {
	b := newProgressBook()
	b.add(1, &roverv1.WorkerProgress{LocalRank: 0, Step: 1, Steps: 1, Samples: 32})
	b.add(1, &roverv1.WorkerProgress{LocalRank: 0, Step: 3, Steps: 2, Samples: 64})
	b.add(1, &roverv1.WorkerProgress{LocalRank: 1, Step: 3, Steps: 3})
	got := map[int32]int64{}
	for _, w := range b.take().GetWorkers() {
		got[w.GetLocalRank()] = w.GetSamples()
	}
	if got[0] != 96 || got[1] != 0 || len(got) != 2 {
		t.Errorf("summed samples by local rank: %v, want 0: 96, 1: 0 (unknown)", got)
	}
	if w := b.take(); w != nil {
		t.Errorf("a second take has %v; the sums start afresh", w)
	}
	for range 3 {
		b.add(2, &roverv1.WorkerProgress{LocalRank: 0, Step: 4, Steps: 1, Samples: maxSamples})
	}
	if w := b.take().GetWorkers(); len(w) != 1 || w[0].GetSamples() != maxSamples {
		t.Errorf("three reports of %d samples sum to %v, want capped at %d", int64(maxSamples), w, int64(maxSamples))
	}
	for _, n := range []int64{-1, maxSamples + 1, math.MaxInt64, math.MinInt64} {
		if err := checkProgress(&roverv1.WorkerProgress{Samples: n}, 1); err == nil || !strings.Contains(err.Error(), "samples") {
			t.Errorf("samples %d: %v, want an error naming samples", n, err)
		}
	}
	if err := checkProgress(&roverv1.WorkerProgress{Samples: maxSamples}, 1); err != nil {
		t.Errorf("samples %d: %v", int64(maxSamples), err)
	}
}
