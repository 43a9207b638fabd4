package autoscale

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func mustRecord(t *testing.T, cfg Config) *Record {
	t.Helper()
	r, err := NewRecord(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestWarmupDiscarded: no sample is taken before WarmupSteps steps and
// WarmupTime have both passed since the round formed, and the slow first
// steps do not count in the size's throughput.
func TestWarmupDiscarded(t *testing.T) {
	r := mustRecord(t, Config{MinNodes: 1, MaxNodes: 4, WarmupSteps: 20, WarmupTime: 30 * time.Second})
	r.RoundFormed(1, 2, t0)
	// 10 steps per report; the first 40 s run at a tenth of the speed.
	at, step := t0, int64(0)
	for i := range 30 {
		step += 10
		if i < 4 {
			at = at.Add(10 * time.Second)
		} else {
			at = at.Add(time.Second)
		}
		sampled := r.Progress(Progress{Round: 1, Step: step, Samples: 4, At: at})
		if warm := step < 20 || at.Sub(t0) < 30*time.Second; warm && sampled {
			t.Fatalf("report %d (step %d, %v in) sampled during the warm-up", i, step, at.Sub(t0))
		}
	}
	m, ok := r.At(2)
	if !ok || !m.Trusted || m.Throughput != 40 {
		t.Fatalf("size 2: %+v, want a trusted 40 samples/s", m)
	}
}

// TestRecordIgnoresHostileReports: reports of another round, going back in
// step or time, with negative steps or absurd sample counts add nothing.
func TestRecordIgnoresHostileReports(t *testing.T) {
	r := mustRecord(t, Config{MinNodes: 1, MaxNodes: 4, WarmupSteps: -1, WarmupTime: -1})
	if r.Progress(Progress{Round: 1, Step: 1, At: t0}) {
		t.Fatal("a report before any round was sampled")
	}
	r.RoundFormed(2, 3, t0)
	if r.RoundFormed(1, 1, t0) || r.Size() != 3 {
		t.Fatal("an older round replaced the current one")
	}
	r.Progress(Progress{Round: 2, Step: 100, Samples: 8, At: t0.Add(time.Second)}) // the anchor
	for _, p := range []Progress{
		{Round: 1, Step: 200, Samples: 8, At: t0.Add(2 * time.Second)},                     // old round
		{Round: 2, Step: 50, Samples: 8, At: t0.Add(2 * time.Second)},                      // backwards
		{Round: 2, Step: 100, Samples: 8, At: t0.Add(2 * time.Second)},                     // the same step
		{Round: 2, Step: 200, Samples: 8, At: t0},                                          // backwards in time
		{Round: 2, Step: -5, Samples: 8, At: t0.Add(3 * time.Second)},                      // negative step
		{Round: 2, Step: 300, Samples: -1, At: t0.Add(3 * time.Second)},                    // negative samples
		{Round: 2, Step: 300, Samples: MaxSamplesPerStep + 1, At: t0.Add(3 * time.Second)}, // absurd samples
		{Round: 2, Step: 300, Samples: 8, At: t0.Add(-time.Hour)},                          // before the round
	} {
		if r.Progress(p) {
			t.Errorf("report %+v was sampled", p)
		}
	}
	if len(r.Sizes()) != 0 {
		t.Fatalf("sizes %+v after hostile reports only", r.Sizes())
	}
	if !r.Progress(Progress{Round: 2, Step: 110, Samples: 8, At: t0.Add(2 * time.Second)}) {
		t.Fatal("a good report after the hostile ones was not sampled")
	}
	if m, _ := r.At(3); m.Throughput != 80 {
		t.Errorf("size 3: %+v, want 80 samples/s", m)
	}
	r.RoundFormed(3, 9, t0.Add(3*time.Second)) // beyond MaxNodes
	r.Progress(Progress{Round: 3, Step: 200, At: t0.Add(4 * time.Second)})
	r.Progress(Progress{Round: 3, Step: 300, At: t0.Add(5 * time.Second)})
	if _, ok := r.At(9); ok {
		t.Error("a size beyond MaxNodes was recorded")
	}
}

// TestMedianResistsOutliers: one absurd sample does not move a size's
// throughput, and the window keeps only the last Window samples.
func TestMedianResistsOutliers(t *testing.T) {
	r := mustRecord(t, Config{MinNodes: 1, MaxNodes: 2, WarmupSteps: -1, WarmupTime: -1, Window: 5, MinSamples: 3})
	r.RoundFormed(1, 1, t0)
	at, step := t0, int64(0)
	report := func(steps int64, d time.Duration) {
		step += steps
		at = at.Add(d)
		r.Progress(Progress{Round: 1, Step: step, At: at})
	}
	report(1, time.Second) // the anchor
	report(10, time.Second)
	report(10, time.Second)
	if m, _ := r.At(1); m.Trusted {
		t.Fatalf("%+v trusted after 2 samples (MinSamples 3)", m)
	}
	report(1_000_000, time.Second) // one absurd step count
	report(10, time.Second)
	if m, _ := r.At(1); !m.Trusted || m.Throughput != 10 {
		t.Fatalf("%+v: want a trusted 10 steps/s despite the outlier", m)
	}
	for range 10 {
		report(20, time.Second)
	}
	if m, _ := r.At(1); m.Samples != 5 || m.Throughput != 20 {
		t.Fatalf("%+v: want the last 5 samples only, at 20 steps/s", m)
	}
}

// TestConfigErrors: every bad field is reported at once, by name.
func TestConfigErrors(t *testing.T) {
	err := Config{MinNodes: 0, MaxNodes: -1, NodeUnit: -2, Window: 5000, MinSamples: -1, MinGain: math.NaN(),
		Hysteresis: 2, CoolDown: -time.Second, StragglerFor: -time.Second}.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err %v: want ErrInvalidConfig", err)
	}
	for _, field := range []string{"MinNodes", "MaxNodes", "NodeUnit", "Window", "MinSamples", "MinGain", "Hysteresis", "CoolDown", "StragglerFor"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %q does not name %s", err, field)
		}
	}
	if err := (Config{MinNodes: 1, MaxNodes: 2, MinGain: 0.8, AssumedEfficiency: 0.5}).Validate(); err == nil || !strings.Contains(err.Error(), "AssumedEfficiency") {
		t.Errorf("AssumedEfficiency below MinGain: err %v", err)
	}
	if err := (Config{MinNodes: 1, MaxNodes: 1}).Validate(); err != nil {
		t.Errorf("the smallest config: %v", err)
	}
	if _, err := New(Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("New of the zero config: %v, want ErrInvalidConfig", err)
	}
}
