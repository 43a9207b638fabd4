package autoscale

import (
	"strings"
	"testing"
	"time"
)

// BenchmarkProgress is the cost of one progress report that gives a sample
// (the window full, its median recomputed).
func BenchmarkProgress(b *testing.B) {
	p, err := New(Config{MinNodes: 1, MaxNodes: 64, WarmupSteps: -1, WarmupTime: -1})
	if err != nil {
		b.Fatal(err)
	}
	p.RoundFormed(Round{Round: 1, Nodes: nodeNames(16), At: t0})
	b.ReportAllocs()
	for i := range b.N {
		st := int64(i + 1)
		p.Progress(Progress{Round: 1, Step: st * 10, Samples: 1024, At: t0.Add(time.Duration(st)*time.Second + time.Duration(i%7)*time.Millisecond)})
	}
}

// BenchmarkDecide is the cost of one decision with sizes measured: the
// fit of the model over them, at 8 and at 64 measured sizes.
func BenchmarkDecide(b *testing.B) {
	for _, sizes := range []int{8, 64} {
		b.Run(map[int]string{8: "8sizes", 64: "64sizes"}[sizes], func(b *testing.B) {
			p, err := New(Config{MinNodes: 1, MaxNodes: 1024})
			if err != nil {
				b.Fatal(err)
			}
			for n := 1; n <= sizes; n++ {
				for range DefaultWindow {
					p.rec.add(n*2, 100*float64(n)*(1-0.01*float64(n)))
				}
			}
			// The current size is just above the largest measured one;
			// the next is unmeasured: the model is fitted.
			cur := sizes*2 + 1
			p.RoundFormed(Round{Round: 1, Nodes: nodeNames(cur), At: t0})
			for range DefaultWindow {
				p.rec.add(cur, 1.05*100*float64(sizes)*(1-0.01*float64(sizes)))
			}
			at := t0.Add(time.Hour)
			if d := p.decide(at); !strings.Contains(d.Message, "model of") && !strings.Contains(d.Message, "capped at") {
				b.Fatalf("decision %+v: want one from the model", d)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				p.decide(at)
			}
		})
	}
}

// BenchmarkMarshalState is the cost of journaling a state with 64 measured
// sizes.
func BenchmarkMarshalState(b *testing.B) {
	p, err := New(Config{MinNodes: 1, MaxNodes: 64})
	if err != nil {
		b.Fatal(err)
	}
	p.RoundFormed(Round{Round: 1, Nodes: nodeNames(64), At: t0})
	for n := 1; n <= 64; n++ {
		for range DefaultWindow {
			p.rec.add(n, 100*float64(n))
		}
	}
	data, _ := p.MarshalState()
	b.ReportMetric(float64(len(data)), "bytes/state")
	b.ReportAllocs()
	for range b.N {
		if _, err := p.MarshalState(); err != nil {
			b.Fatal(err)
		}
	}
}
