package goodput

import (
	"testing"
	"time"
)

// BenchmarkProgress is the cost of one progress report in a long job with
// a durable checkpoint every 1000 steps.
func BenchmarkProgress(b *testing.B) {
	m, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	m.Launched(t0)
	m.RoundFormed(1, []string{"a"}, t0)
	b.ReportAllocs()
	for i := range b.N {
		st := int64(i + 1)
		now := t0.Add(time.Duration(st) * 100 * time.Millisecond)
		m.Progress(Progress{Round: 1, Node: "a", Step: st, At: now})
		if st%1000 == 0 {
			m.CheckpointSaved(Save{Round: 1, Node: "a", Step: st, Blocking: time.Millisecond, Durable: true, At: now})
		}
	}
}

// BenchmarkMarshalState is the cost of journaling a full state.
func BenchmarkMarshalState(b *testing.B) {
	m, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	m.Launched(t0)
	m.RoundFormed(1, []string{"a", "b"}, t0)
	for st := int64(1); st <= DefaultMaxSamples*2; st++ {
		m.Progress(Progress{Round: 1, Node: "a", Step: st, At: t0.Add(time.Duration(st) * time.Second)})
	}
	data, _ := m.MarshalState()
	b.ReportMetric(float64(len(data)), "bytes/state")
	b.ReportAllocs()
	for range b.N {
		if _, err := m.MarshalState(); err != nil {
			b.Fatal(err)
		}
	}
}
