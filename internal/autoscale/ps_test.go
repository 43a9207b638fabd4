package autoscale

import (
	"strings"
	"testing"
	"time"
)

var psT0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// psScript feeds one sample per node per second from second from to
// second to (exclusive) and returns the decision of each second.
type psUse struct {
	node, group string
	rank        int
	used, req   int64
}

func feed(p *PSPolicy, from, to int, uses ...psUse) []Decision {
	var out []Decision
	for s := from; s < to; s++ {
		at := psT0.Add(time.Duration(s) * time.Second)
		for _, u := range uses {
			p.Sample(CPUSample{Node: u.node, Group: u.group, Rank: u.rank, UsedMilliCPU: u.used, RequestMilliCPU: u.req, At: at})
		}
		out = append(out, p.Decide(at))
	}
	return out
}

func mustPS(t *testing.T, c PSConfig) *PSPolicy {
	t.Helper()
	p, err := NewPS(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPSHotIsMigrated: a PS at 95% of its request for the window is
// migrated to used/target (at least twice the request); not before the
// window; its new node, reporting, ends the change; after the cool-down
// the new node, at the same use, is not hot.
func TestPSHotIsMigrated(t *testing.T) {
	p := mustPS(t, PSConfig{Window: 10 * time.Second})
	ps0 := psUse{"j-ps-0-0", PSGroup, 0, 200, 1000}
	hot := psUse{"j-ps-1-0", PSGroup, 1, 1900, 2000}
	w := psUse{"j-worker-0-0", "worker", 0, 900, 1000}
	ds := feed(p, 0, 10, ps0, hot, w)
	for i, d := range ds {
		if d.Action != Hold || d.Reason != ReasonPSCool {
			t.Fatalf("second %d: %+v, want a ps_cool hold inside the window", i, d)
		}
	}
	d := feed(p, 10, 11, ps0, hot, w)[0]
	if d.Action != Migrate || d.Node != "j-ps-1-0" || d.Rank != 1 || d.MilliCPU != 4000 || d.Reason != ReasonPSHot || d.Group != PSGroup {
		t.Fatalf("after the window: %+v, want ps 1 migrated to 4000m (twice its request)", d)
	}
	if !strings.Contains(d.Message, "PS 1 used 95% of its CPU request (1900m of 2000m)") {
		t.Errorf("message %q", d.Message)
	}
	// Waiting for the change: the old node still reports.
	if d := feed(p, 11, 12, ps0, hot, w)[0]; d.Reason != ReasonWaitingForChange {
		t.Errorf("before the new node reports: %+v", d)
	}
	p.NodeGone("j-ps-1-0")
	moved := psUse{"j-ps-1-1", PSGroup, 1, 1900, 4000}
	ds = feed(p, 12, 40, ps0, moved, w)
	if ds[0].Reason != ReasonCoolDown {
		t.Errorf("right after the new node reported: %+v, want the cool-down", ds[0])
	}
	for _, d := range ds {
		if d.Changes() {
			t.Fatalf("the migrated PS, at 48%% of its new request, changed again: %+v", d)
		}
	}
	if last := ds[len(ds)-1]; last.Reason != ReasonPSCool {
		t.Errorf("after the cool-down: %+v, want ps_cool", last)
	}
	if p.Changes() != 1 {
		t.Errorf("changes %d, want 1", p.Changes())
	}
}

// TestPSHotWindowRestarts: one sample under the threshold starts the
// window over; a request used at a tiny share but far above the others
// is never hot; the new request follows the use when it is more than
// twice the request.
func TestPSHotWindowRestarts(t *testing.T) {
	p := mustPS(t, PSConfig{Window: 5 * time.Second, Target: 0.5})
	feed(p, 0, 4, psUse{"a", PSGroup, 0, 1000, 1000})
	feed(p, 4, 5, psUse{"a", PSGroup, 0, 800, 1000}) // 80%: cool
	ds := feed(p, 5, 10, psUse{"a", PSGroup, 0, 3000, 1000})
	for _, d := range ds {
		if d.Changes() {
			t.Fatalf("migrated %v after the window restarted at second 5: %+v", d.At.Sub(psT0), d)
		}
	}
	d := feed(p, 10, 11, psUse{"a", PSGroup, 0, 3000, 1000})[0]
	// 3000m used at a target of 50%: 6000m, more than twice 1000m.
	if d.Action != Migrate || d.MilliCPU != 6000 {
		t.Errorf("%+v, want a migration to 6000m", d)
	}
}

// TestPSGrow: every PS hot while every worker waits, below MaxPS: one PS
// is added, and the change is done when the new rank reports; workers
// that compute (not waiting) make it a migration of the hottest instead;
// at MaxPS too.
func TestPSGrow(t *testing.T) {
	hot0, hot1 := psUse{"p0", PSGroup, 0, 950, 1000}, psUse{"p1", PSGroup, 1, 990, 1000}
	idle := []psUse{{"w0", "worker", 0, 100, 1000}, {"w1", "worker", 1, 300, 1000}}
	cfg := PSConfig{Window: 3 * time.Second, MaxPS: 3}
	p := mustPS(t, cfg)
	d := feed(p, 0, 4, append([]psUse{hot0, hot1}, idle...)...)[3]
	if d.Action != Grow || d.Group != PSGroup || d.From != 2 || d.To != 3 || d.Reason != ReasonAllPSHot {
		t.Fatalf("%+v, want a PS added (2 to 3)", d)
	}
	if d := feed(p, 4, 5, hot0, hot1)[0]; d.Reason != ReasonWaitingForChange {
		t.Errorf("%+v, want waiting for PS 2", d)
	}
	feed(p, 5, 6, psUse{"p2", PSGroup, 2, 10, 1000})
	if d := p.Decide(psT0.Add(6 * time.Second)); d.Reason != ReasonCoolDown {
		t.Errorf("%+v, want the cool-down once PS 2 reported", d)
	}

	// Workers that start waiting later than the PS got hot: a hold until
	// their window is full, then a PS added, not a migration.
	p = mustPS(t, cfg)
	feed(p, 0, 2, hot0, hot1, psUse{"w0", "worker", 0, 900, 1000})
	ds := feed(p, 2, 6, hot0, hot1, idle[0])
	if ds[1].Action != Hold || ds[1].Reason != ReasonMeasuring {
		t.Errorf("every PS hot, the workers waiting for 1s: %+v, want a hold", ds[1])
	}
	if ds[3].Action != Grow {
		t.Errorf("every PS hot, the workers waiting for a window: %+v, want a PS added", ds[3])
	}

	busy := []psUse{{"w0", "worker", 0, 900, 1000}, {"w1", "worker", 1, 300, 1000}}
	p = mustPS(t, cfg)
	if d := feed(p, 0, 4, append([]psUse{hot0, hot1}, busy...)...)[3]; d.Action != Migrate || d.Node != "p1" {
		t.Errorf("a worker computing: %+v, want the hottest PS (p1) migrated", d)
	}
	cfg.MaxPS = 2
	p = mustPS(t, cfg)
	if d := feed(p, 0, 4, append([]psUse{hot0, hot1}, idle...)...)[3]; d.Action != Migrate {
		t.Errorf("at MaxPS: %+v, want a migration", d)
	}
}

// TestPSBounds: MaxMilliCPU caps the new request, and a PS at the cap is
// held; a PS of unknown request is never judged; a change never seen
// done is given up after ChangeTimeout.
func TestPSBounds(t *testing.T) {
	p := mustPS(t, PSConfig{Window: time.Second, MaxMilliCPU: 1500})
	if d := feed(p, 0, 2, psUse{"a", PSGroup, 0, 1000, 1000})[1]; d.Action != Migrate || d.MilliCPU != 1500 {
		t.Errorf("%+v, want a migration capped at 1500m", d)
	}
	p = mustPS(t, PSConfig{Window: time.Second, MaxMilliCPU: 1000})
	if d := feed(p, 0, 3, psUse{"a", PSGroup, 0, 1000, 1000})[2]; d.Action != Hold || d.Reason != ReasonAtMax {
		t.Errorf("%+v, want at_max", d)
	}
	p = mustPS(t, PSConfig{Window: time.Second})
	if d := feed(p, 0, 5, psUse{"a", PSGroup, 0, 5000, 0})[4]; d.Changes() {
		t.Errorf("a PS of unknown request: %+v", d)
	}
	p = mustPS(t, PSConfig{Window: time.Second, ChangeTimeout: 30 * time.Second, CoolDown: time.Second})
	hot := psUse{"a", PSGroup, 0, 1000, 1000}
	if d := feed(p, 0, 2, hot)[1]; d.Action != Migrate {
		t.Fatalf("%+v", d)
	}
	ds := feed(p, 2, 40, hot)
	if ds[0].Reason != ReasonWaitingForChange {
		t.Errorf("%+v, want waiting", ds[0])
	}
	var again bool
	for _, d := range ds {
		again = again || d.Action == Migrate
	}
	if !again {
		t.Errorf("the change was never given up: last %+v", ds[len(ds)-1])
	}
}

func TestPSConfigValidate(t *testing.T) {
	err := PSConfig{Hot: 2, Window: -1, MaxPS: -1, MaxMilliCPU: -5}.Validate()
	for _, want := range []string{"ps-hot", "ps-window", "MaxPS", "MaxMilliCPU"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want it to name %s", err, want)
		}
	}
	if err := (PSConfig{}).Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}

// TestPSGrowWaitsForEveryWindow: a PS that got hot a second after the
// other does not make the first one's window a migration while the
// workers wait: the rule holds until both windows are full, then adds a
// PS.
func TestPSGrowWaitsForEveryWindow(t *testing.T) {
	p := mustPS(t, PSConfig{Window: 3 * time.Second, MaxPS: 3})
	hot0, hot1 := psUse{"p0", PSGroup, 0, 950, 1000}, psUse{"p1", PSGroup, 1, 990, 1000}
	idle := psUse{"w0", "worker", 0, 10, 1000}
	feed(p, 0, 1, hot0, psUse{"p1", PSGroup, 1, 100, 1000}, idle)
	ds := feed(p, 1, 5, hot0, hot1, idle)
	if ds[2].Action != Hold || ds[2].Reason != ReasonMeasuring {
		t.Errorf("PS 0 hot for its window, PS 1 not yet: %+v, want a hold", ds[2])
	}
	if ds[3].Action != Grow {
		t.Errorf("both hot for a window: %+v, want a PS added", ds[3])
	}
}
