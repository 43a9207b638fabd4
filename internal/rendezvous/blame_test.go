package rendezvous

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// blame is the scenario config with a 15 s blame window and budget restarts.
func blame(budget int) Config {
	return cfg(minmax(2, 2), func(c *Config) { c.MaxRestarts, c.BlameWindow = budget, 15*sec })
}

// TestBlameScenarios covers the orders in which a lost node and its
// survivors' worker failures reach the machine.
func TestBlameScenarios(t *testing.T) {
	exhausted := view{Job: Failed, Round: 1, World: []string{"a", "b"},
		Reason: "workers on node a (node rank 0) failed in round 1 and the restart budget (0) is exhausted"}
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"loss first: the survivor's failure is stale", blame(0), []step{
			join("a"), join("b").then(closed(1, "a", "b")),
			lost("b").at(sec).then(open(2).prev("a", "b")),
			fail("a", 1).unchanged().then(open(2).prev("a", "b")),
			join("a"), join("b").then(closed(2, "a", "b")),
		}},
		{"failure first, then the loss within the window: no restart spent", blame(0), []step{
			join("a"), join("b").then(closed(1, "a", "b")),
			fail("a", 1).at(sec).then(closed(1, "a", "b")).next(16 * sec),
			fail("b", 1).unchanged(), // the world already failed
			lost("b").at(14 * sec).then(open(2).prev("a", "b")),
			tick(time.Minute).then(open(2).prev("a", "b")),
			join("a"), join("b").then(closed(2, "a", "b")),
		}},
		{"failure alone spends a restart at the end of the window", blame(0), []step{
			join("a"), join("b"),
			fail("a", 1).at(sec).then(closed(1, "a", "b")).next(16 * sec),
			tick(15*sec - 1).then(closed(1, "a", "b")),
			tick(1).then(exhausted),
		}},
		{"a world of one node fails at once: no other member can take the blame", cfg(minmax(1, 1), func(c *Config) { c.MaxRestarts, c.BlameWindow = 0, 15*sec }), []step{
			join("a").then(closed(1, "a")),
			fail("a", 1).at(sec).then(view{Job: Failed, Round: 1, World: []string{"a"},
				Reason: "workers on node a (node rank 0) failed in round 1 and the restart budget (0) is exhausted"}),
		}},
		{"a loss after the window is too late", blame(0), []step{
			join("a"), join("b"),
			fail("a", 1).at(sec),
			lost("b").at(15 * sec).then(exhausted),
		}},
		{"a member's agent restarting takes the blame", blame(0), []step{
			join("a"), join("b"),
			fail("a", 1).at(sec),
			join("b").at(2 * sec).then(open(2, "b").prev("a", "b")),
			join("a").then(closed(2, "a", "b")),
			tick(time.Minute).then(closed(2, "a", "b")),
		}},
		{"a newcomer does not grow a world that failed out of restarts", blame(0), []step{
			join("a"), join("b"),
			fail("a", 1).at(sec),
			join("c").at(sec).then(closed(1, "a", "b").waiting("c")),
			tick(15 * sec).then(view{Job: Failed, Round: 1, World: []string{"a", "b"}, Joined: []string{"c"}, Reason: exhausted.Reason}),
		}},
		{"with restarts left the restart is given back after a loss", blame(1), []step{
			join("a"), join("b"),
			fail("a", 1).at(sec).then(open(2).prev("a", "b").restarts(1)),
			lost("b").at(5 * sec).then(open(2).prev("a", "b")),
			join("a"), join("b").then(closed(2, "a", "b")),
			// the budget is whole again: a later failure alone spends it
			fail("b", 2).at(time.Minute).then(open(3).prev("a", "b").restarts(1)),
		}},
		{"with restarts left a late loss keeps the restart spent", blame(1), []step{
			join("a"), join("b"),
			fail("a", 1).at(sec).then(open(2).prev("a", "b").restarts(1)),
			lost("b").at(15 * sec).then(open(2).prev("a", "b").restarts(1)),
		}},
		{"a loss noticed after a new world formed still takes the blame", blame(1), []step{
			join("a"), join("b"),
			fail("a", 1).at(sec).then(open(2).prev("a", "b").restarts(1)),
			join("c"), join("a").then(closed(2, "a", "c").restarts(1)), // c replaced b before b was noticed
			lost("b").at(5 * sec).then(closed(2, "a", "c")),
		}},
		{"a member of both worlds lost: the restart is given back", blame(1), []step{
			join("a"), join("b"),
			fail("a", 1).at(sec).then(open(2).prev("a", "b").restarts(1)),
			join("a"), join("b").then(closed(2, "a", "b").restarts(1)),
			lost("b").at(sec).then(open(3).prev("a", "b")),
		}},
		{"no window: the failure is charged at once", cfg(minmax(2, 2), func(c *Config) { c.MaxRestarts = 0 }), []step{
			join("a"), join("b"),
			fail("a", 1).at(sec).then(exhausted),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runScenario(t, tt.cfg, tt.steps) })
	}
}

// TestBlameRandomOrder plays a two-node world in which one node is lost and
// the other's workers fail, in either order and at random distances, with
// random budgets and persistence in between: the survivor's failure spends
// a restart exactly when it came alone (the loss later than the window).
func TestBlameRandomOrder(t *testing.T) {
	const window = 15 * sec
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 7))
		budget := rng.IntN(3)
		m, err := New(blame(budget), t0)
		if err != nil {
			t.Fatal(err)
		}
		now := t0
		for _, id := range []string{"a", "b"} {
			if _, err := m.Join(JoinRequest{NodeID: id, RequestedRank: -1, LocalWorldSize: 1, Addr: id}, now); err != nil {
				t.Fatal(err)
			}
		}
		lossFirst := rng.IntN(2) == 0
		gap := time.Duration(rng.Int64N(int64(2 * window)))
		if lossFirst {
			m.NodeLost("b", now)
			now = now.Add(gap)
			m = roundTrip(t, m, rng)
			if err := m.WorkerFailed("a", 1, now); err != nil {
				t.Fatal(err)
			}
		} else {
			if err := m.WorkerFailed("a", 1, now); err != nil {
				t.Fatal(err)
			}
			now = now.Add(gap)
			m = roundTrip(t, m, rng)
			m.Tick(now)
			m.NodeLost("b", now)
		}
		m.Tick(now.Add(window))
		checkInvariants(t, m)
		s := m.Status()
		alone := !lossFirst && gap >= window
		desc := fmt.Sprintf("seed %d: budget %d, loss first %v, gap %v", seed, budget, lossFirst, gap)
		switch {
		case alone && budget == 0:
			if s.Job != Failed {
				t.Fatalf("%s: job %v, want Failed", desc, s.Job)
			}
		case alone:
			if s.Job != Running || s.Restarts != 1 {
				t.Fatalf("%s: job %v with %d restarts, want Running with 1", desc, s.Job, s.Restarts)
			}
		default:
			if s.Job != Running || s.Restarts != 0 || !s.Open || s.Round != 2 {
				t.Fatalf("%s: %+v, want Running in open round 2 with 0 restarts", desc, s)
			}
		}
	}
}

// roundTrip replaces m by its persisted copy half of the time.
func roundTrip(t *testing.T, m *Machine, rng *rand.Rand) *Machine {
	t.Helper()
	if rng.IntN(2) == 0 {
		return m
	}
	data, err := m.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Restore(data)
	if err != nil {
		t.Fatalf("Restore: %v\n%s", err, data)
	}
	return r
}

// TestLossSinceAfterFailure: a member of a failed world that rejoined and
// trained, and whose agent died well after the failure's report, did not
// cause it: the restart the failure spent stays spent. Its loss just before
// the report (within lossSlack after it, for clocks apart) still takes the
// blame.
func TestLossSinceAfterFailure(t *testing.T) {
	for _, tt := range []struct {
		name      string
		sinceAt   time.Duration // the loss's time, after the failure's report
		restarts  int
		wantBlame bool
	}{
		{"long after the report", 8 * sec, 1, false},
		{"just after the report", lossSlack, 0, true},
		{"before the report", -sec, 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := New(blame(3), t0)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"a", "b"} {
				if _, err := m.Join(JoinRequest{NodeID: id, RequestedRank: -1, LocalWorldSize: 1, Addr: id}, t0); err != nil {
					t.Fatal(err)
				}
			}
			m.Tick(t0.Add(time.Minute))
			failAt := t0.Add(time.Minute + sec)
			if err := m.WorkerFailed("a", 1, failAt); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"a", "b"} {
				if _, err := m.Join(JoinRequest{NodeID: id, RequestedRank: -1, LocalWorldSize: 1, Addr: id}, failAt); err != nil {
					t.Fatal(err)
				}
			}
			m.Tick(failAt.Add(time.Second))
			if st := m.Status(); st.Round != 2 || st.Open || st.Restarts != 1 {
				t.Fatalf("after the failure: round %d open %v restarts %d, want round 2 closed, 1 restart", st.Round, st.Open, st.Restarts)
			}
			since := failAt.Add(tt.sinceAt)
			m.NodeLostSince("b", since, failAt.Add(9*sec))
			if got := m.Status().Restarts; got != tt.restarts {
				t.Errorf("restarts after b's loss at +%v = %d, want %d (blame taken: %v)", tt.sinceAt, got, tt.restarts, tt.wantBlame)
			}
		})
	}
}
