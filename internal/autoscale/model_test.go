package autoscale

import (
	"math"
	"testing"
)

func points(f func(n int) float64, sizes ...int) []Measured {
	var out []Measured
	for _, n := range sizes {
		out = append(out, Measured{Size: n, Throughput: f(n), Samples: 10, Trusted: true})
	}
	return out
}

// TestFitRecoversTheCurve: from exact measurements of t(n) = a + b/n + c·n
// the model recovers a, b, c and predicts unmeasured sizes within 0.1%.
func TestFitRecoversTheCurve(t *testing.T) {
	for _, tc := range []struct {
		name    string
		a, b, c float64
		sizes   []int
	}{
		{"linear", 0, 0.01, 0, []int{1, 2}},
		{"amdahl", 0.001, 0.01, 0, []int{1, 2, 4}},
		{"communication grows", 0.001, 0.02, 0.0005, []int{1, 2, 3, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			curve := func(n int) float64 { return 1 / (tc.a + tc.b/float64(n) + tc.c*float64(n)) }
			m, ok := Fit(points(curve, tc.sizes...), 0.7)
			if !ok {
				t.Fatal("no model")
			}
			a, b, c := m.Terms()
			if math.Abs(a-tc.a) > 1e-6 || math.Abs(b-tc.b) > 1e-6 || math.Abs(c-tc.c) > 1e-6 {
				t.Errorf("terms %g, %g, %g; want %g, %g, %g", a, b, c, tc.a, tc.b, tc.c)
			}
			for _, n := range []int{3, 4, 6} {
				want := curve(n)
				if n > tc.sizes[len(tc.sizes)-1] {
					want = min(want, curve(tc.sizes[len(tc.sizes)-1])*float64(n)/float64(tc.sizes[len(tc.sizes)-1]))
				}
				if got := m.Predict(n); math.Abs(got-want)/want > 1e-3 {
					t.Errorf("Predict(%d) = %g, want %g", n, got, want)
				}
			}
		})
	}
}

// TestFitOneSize: with one measured size each added node adds the assumed
// efficiency of a node's share; a removed node takes all of its share.
func TestFitOneSize(t *testing.T) {
	m, ok := Fit([]Measured{{Size: 2, Throughput: 200, Trusted: true}, {Size: 3, Throughput: 1, Trusted: false}}, 0.7)
	if !ok || m.Sizes() != 1 {
		t.Fatalf("model %+v: want one size (untrusted ones left out)", m)
	}
	for n, want := range map[int]float64{1: 100, 2: 200, 3: 270, 4: 340} {
		if got := m.Predict(n); math.Abs(got-want) > 1e-9 {
			t.Errorf("Predict(%d) = %g, want %g", n, got, want)
		}
	}
	if _, ok := Fit(nil, 0.7); ok {
		t.Error("a model from nothing")
	}
}

// TestFitNeverSuperlinear: measurements that look superlinear (noise) are
// not extrapolated beyond linear scaling from the largest measured size,
// and a fit never predicts a negative or infinite throughput.
func TestFitNeverSuperlinear(t *testing.T) {
	m, ok := Fit([]Measured{{Size: 1, Throughput: 100, Trusted: true}, {Size: 2, Throughput: 260, Trusted: true}}, 0.7)
	if !ok {
		t.Fatal("no model")
	}
	for n := 3; n <= 64; n++ {
		if got, most := m.Predict(n), 260*float64(n)/2; got > most+1e-9 || !(got > 0) {
			t.Errorf("Predict(%d) = %g; want 0 < it <= %g", n, got, most)
		}
	}
	if got := m.Predict(0); got != 0 {
		t.Errorf("Predict(0) = %g", got)
	}
}
