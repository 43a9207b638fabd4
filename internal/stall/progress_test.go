package stall

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestStragglers(t *testing.T) {
	type add struct {
		node       string
		wall, busy float64
		n          int // times
	}
	tests := []struct {
		name string
		adds []add
		want []string
	}{
		{"one node is never a straggler", []add{{"a", 9, 9, 10}}, nil},
		{"equal nodes", []add{{"a", 0.1, 0.1, 5}, {"b", 0.1, 0.1, 5}, {"c", 0.11, 0.1, 5}}, nil},
		{"two nodes, one at 2x", []add{{"a", 0.1, 0.1, 5}, {"b", 0.2, 0.2, 5}}, []string{"b"}},
		{"below the factor", []add{{"a", 0.1, 0.1, 5}, {"b", 0.14, 0.14, 5}}, nil},
		{"above the factor but under the minimum excess", []add{{"a", 0.001, 0.001, 5}, {"b", 0.005, 0.005, 5}}, nil},
		{"too few samples to judge", []add{{"a", 0.1, 0.1, 5}, {"b", 0.5, 0.5, 2}}, nil},
		{"synchronous job: equal wall, busy straggler", []add{{"a", 0.3, 0.05, 5}, {"b", 0.3, 0.05, 5}, {"c", 0.3, 0.28, 5}}, []string{"c"}},
		{"three nodes, one slow", []add{{"a", 0.1, 0.1, 5}, {"b", 0.12, 0.1, 5}, {"c", 0.4, 0.1, 5}}, []string{"c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := NewWindow(StragglerConfig{})
			for _, a := range tt.adds {
				for i := 0; i < a.n; i++ {
					w.Add(a.node, a.wall, a.busy, int64(i))
				}
			}
			got, why := w.Stragglers()
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("stragglers (-want +got):\n%s\nwhy: %s", diff, why)
			}
			if (len(got) > 0) != (why != "") {
				t.Fatalf("reason %q for stragglers %v", why, got)
			}
		})
	}
}

// TestStragglerWindow checks that only the last Window samples count: a
// node that was slow and recovered stops being a straggler once its slow
// samples leave the window, and the median ignores a lone outlier.
func TestStragglerWindow(t *testing.T) {
	w := NewWindow(StragglerConfig{Window: 4, MinSamples: 3})
	for i := 0; i < 4; i++ {
		w.Add("a", 0.1, 0.1, int64(i))
		w.Add("b", 0.5, 0.5, int64(i))
	}
	if got, _ := w.Stragglers(); !cmp.Equal(got, []string{"b"}) {
		t.Fatalf("slow b: stragglers %v, want [b]", got)
	}
	for i := 0; i < 3; i++ {
		w.Add("a", 0.1, 0.1, 0)
		w.Add("b", 0.1, 0.1, 0)
	}
	if got, _ := w.Stragglers(); got != nil {
		t.Fatalf("b still slow in 1 of 4 samples: stragglers %v, want none (median)", got)
	}
	w.Add("b", 0.1, 0.1, 0)
	nodes := w.Nodes()
	if len(nodes) != 2 || nodes[1].Wall != 0.1 || nodes[1].Samples != 4 || nodes[1].Straggler {
		t.Fatalf("nodes after recovery: %+v", nodes)
	}
	w.Forget("b")
	w.Reset()
	if len(w.Nodes()) != 0 {
		t.Fatal("Reset left nodes")
	}
}

func TestHang(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	type ev struct {
		at        float64
		round     int64
		completed bool
		newRound  bool
	}
	tests := []struct {
		name   string
		events []ev
		check  float64
		want   bool
	}{
		{"progress before, then none for the timeout", []ev{{0, 1, false, false}, {1, 1, true, false}}, 11, true},
		{"not yet the timeout", []ev{{0, 1, false, false}, {1, 1, true, false}}, 10.9, false},
		{"no progress ever", nil, 1000, false},
		{"long first step: started, never completed", []ev{{0, 1, false, false}}, 1000, false},
		{"progress of an older round is ignored", []ev{{0, 2, true, false}, {50, 1, true, false}}, 10, true},
		{"a new round disarms", []ev{{0, 1, true, false}, {5, 2, false, true}}, 1000, false},
		{"the new round's progress rearms", []ev{{0, 1, true, false}, {5, 2, true, false}}, 15, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHang(10 * time.Second)
			for _, e := range tt.events {
				if e.newRound {
					h.NewRound(e.round)
					continue
				}
				h.Progress(e.round, e.completed, at(e.at))
			}
			if got := h.Check(at(tt.check)); got != tt.want {
				t.Fatalf("Check = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestHangOnce checks that a hang is declared once, that progress ends it,
// and that the next stall is a second hang.
func TestHangOnce(t *testing.T) {
	t0 := time.Unix(0, 0)
	h := NewHang(time.Minute)
	h.Progress(1, true, t0)
	if d, ok := h.Deadline(); !ok || !d.Equal(t0.Add(time.Minute)) {
		t.Fatalf("Deadline = %v %v", d, ok)
	}
	if !h.Check(t0.Add(time.Minute)) || h.Check(t0.Add(2*time.Minute)) || !h.Hung() || h.Seq() != 1 {
		t.Fatalf("first hang: hung %v seq %d", h.Hung(), h.Seq())
	}
	if _, ok := h.Deadline(); ok {
		t.Fatal("a hung timer has a deadline")
	}
	h.Progress(1, true, t0.Add(3*time.Minute))
	if h.Hung() {
		t.Fatal("progress did not end the hang")
	}
	if !h.Check(t0.Add(4*time.Minute)) || h.Seq() != 2 {
		t.Fatalf("second hang: seq %d", h.Seq())
	}
	if NewHang(0).Check(t0.Add(time.Hour)) {
		t.Fatal("a timer with no timeout declared a hang")
	}
}
