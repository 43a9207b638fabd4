package rendezvous

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// step is one event of a scenario, at the fake clock advanced by after.
type step struct {
	after    time.Duration // advance the clock first
	op       string        // join, lost, fail, regroup, ok (NodeSucceeded), tick
	id       string
	rank     int // join: requested rank
	lws      int // join: local world size (default 1)
	round    int // fail, ok
	wantRank int // join: expected node rank (-2: unchecked)
	wantErr  error
	want     *view // state after the step (nil: unchecked)
	sameVer  bool  // the step must not change Version
	deadline time.Duration
}

// view is the part of a Snapshot scenarios check.
type view struct {
	Job      JobState
	Round    int
	Open     bool
	World    []string // node IDs by group rank
	Joined   []string
	Restarts int
	Reason   string
}

func viewOf(s Snapshot) view {
	v := view{Job: s.Job, Round: s.Round, Open: s.Open, Joined: s.Joined, Restarts: s.Restarts, Reason: s.Reason}
	for _, mb := range s.World {
		v.World = append(v.World, mb.NodeID)
	}
	if len(v.Joined) == 0 {
		v.Joined = nil
	}
	return v
}

func join(id string) step { return step{op: "join", id: id, rank: -1, wantRank: -2} }

// gets sets the expected node rank of a join.
func (s step) gets(r int) step { s.wantRank = r; return s }

// asks sets the requested node rank of a join.
func (s step) asks(r int) step { s.rank = r; return s }

func (s step) at(d time.Duration) step      { s.after = d; return s }
func (s step) errs(err error) step          { s.wantErr = err; return s }
func (s step) then(v view) step             { s.want = &v; return s }
func (s step) unchanged() step              { s.sameVer = true; return s }
func (s step) next(d time.Duration) step    { s.deadline = d; return s }
func lost(id string) step                   { return step{op: "lost", id: id} }
func fail(id string, round int) step        { return step{op: "fail", id: id, round: round} }
func succeed(id string, round int) step     { return step{op: "ok", id: id, round: round} }
func regroup(id string, round int) step     { return step{op: "regroup", id: id, round: round} }
func tick(after time.Duration) step         { return step{op: "tick", after: after} }
func open(round int, joined ...string) view { return view{Round: round, Open: true, Joined: joined} }

func closed(round int, world ...string) view { return view{Round: round, World: world} }

// waiting adds waiting nodes to a view.
func (v view) waiting(ids ...string) view { v.Joined = ids; return v }

// prev sets the previous world of an open-round view.
func (v view) prev(ids ...string) view { v.World = ids; return v }

func (v view) restarts(n int) view { v.Restarts = n; return v }

// cfg is the default scenario config: 2..4 nodes, 3 restarts, 10s last call,
// 10m join timeout.
func cfg(mod ...func(*Config)) Config {
	c := Config{MinNodes: 2, MaxNodes: 4, MaxRestarts: 3, LastCall: 10 * time.Second, JoinTimeout: 10 * time.Minute}
	for _, f := range mod {
		f(&c)
	}
	return c
}

func minmax(lo, hi int) func(*Config) { return func(c *Config) { c.MinNodes, c.MaxNodes = lo, hi } }

const sec = time.Second

// runScenario plays steps on a fresh machine and checks each expectation.
func runScenario(t *testing.T, c Config, steps []step) *Machine {
	t.Helper()
	now := t0
	m, err := New(c, now)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	for i, s := range steps {
		now = now.Add(s.after)
		ver := m.Version()
		var err error
		switch s.op {
		case "join":
			lws := max(s.lws, 1)
			var r int
			r, err = m.Join(JoinRequest{NodeID: s.id, RequestedRank: s.rank, LocalWorldSize: lws, Addr: s.id + ".local"}, now)
			if s.wantRank != -2 && err == nil && r != s.wantRank {
				t.Fatalf("step %d: Join(%s) = rank %d, want %d", i, s.id, r, s.wantRank)
			}
		case "lost":
			m.NodeLost(s.id, now)
		case "fail":
			err = m.WorkerFailed(s.id, s.round, now)
		case "regroup":
			err = m.Regroup(s.id, s.round, now)
		case "ok":
			err = m.NodeSucceeded(s.id, s.round, now)
		case "tick":
			m.Tick(now)
		default:
			t.Fatalf("step %d: bad op %q", i, s.op)
		}
		if !errors.Is(err, s.wantErr) || (err != nil) != (s.wantErr != nil) {
			t.Fatalf("step %d (%s %s): err = %v, want %v", i, s.op, s.id, err, s.wantErr)
		}
		snap := m.Snapshot()
		if s.want != nil {
			if diff := cmp.Diff(*s.want, viewOf(snap)); diff != "" {
				t.Fatalf("step %d (%s %s at %v): state (-want +got):\n%s", i, s.op, s.id, now.Sub(t0), diff)
			}
		}
		if s.sameVer && m.Version() != ver {
			t.Fatalf("step %d (%s %s): Version moved %d -> %d for an ignored event", i, s.op, s.id, ver, m.Version())
		}
		if s.deadline != 0 {
			d, ok := m.NextDeadline()
			if want := t0.Add(s.deadline); s.deadline < 0 && ok || s.deadline > 0 && (!ok || !d.Equal(want)) {
				t.Fatalf("step %d: NextDeadline = %v, %v; want %v", i, d.Sub(t0), ok, s.deadline)
			}
		}
		checkInvariants(t, m)
	}
	return m
}

func TestScenarios(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"closes on max", cfg(minmax(2, 3)), []step{
			join("a").gets(0).then(open(1, "a")),
			join("b").gets(1).at(sec).then(open(1, "a", "b")),
			join("c").gets(2).at(sec).then(closed(1, "a", "b", "c")).next(-1),
		}},
		{"closes on min plus last call, not before", cfg(), []step{
			join("a").then(open(1, "a")).next(10 * time.Minute),
			join("b").at(sec).then(open(1, "a", "b")).next(11 * sec),
			tick(9*sec + 999*time.Millisecond).then(open(1, "a", "b")),
			tick(time.Millisecond).then(closed(1, "a", "b")).next(-1),
		}},
		{"late join resets the last call", cfg(), []step{
			join("a"), join("b"),
			join("c").at(9 * sec).next(19 * sec),
			tick(9 * sec).then(open(1, "a", "b", "c")),
			tick(sec).then(closed(1, "a", "b", "c")),
		}},
		{"timer applies before a late event", cfg(), []step{
			join("a"), join("b"),
			// The last call ended before c came: c is not in round 1.
			join("c").at(time.Minute).gets(2).then(open(2, "c").prev("a", "b")),
		}},
		{"node unit truncates the world", cfg(minmax(2, 8), func(c *Config) { c.NodeUnit = 2 }), []step{
			join("a"), join("b"), join("c"), join("d"), join("e"),
			tick(10 * sec).then(closed(1, "a", "b", "c", "d").waiting("e")),
		}},
		{"node unit keeps a round open below min", cfg(minmax(3, 4), func(c *Config) { c.NodeUnit = 2 }), []step{
			join("a"), join("b"), join("c"),
			tick(time.Minute).then(open(1, "a", "b", "c")).next(10 * time.Minute),
			join("d").then(closed(1, "a", "b", "c", "d")),
		}},
		{"late joiner admitted at the next round when there is room", cfg(), []step{
			join("a"), join("b"),
			tick(10 * sec).then(closed(1, "a", "b")),
			join("c").at(time.Minute).gets(2).then(open(2, "c").prev("a", "b")),
			join("a").gets(0),
			join("b").gets(1).then(closed(2, "a", "b", "c")), // rule (c): everyone is back
		}},
		{"regroup re-forms the world without spending a restart", cfg(func(c *Config) { c.MaxRestarts = 0 }), []step{
			join("a"), join("b"), tick(10 * sec).then(closed(1, "a", "b")),
			regroup("b", 1).then(open(2).prev("a", "b")),
			regroup("b", 1).unchanged(), // stale: the round is open
			join("a"),
			join("b").then(closed(2, "a", "b")), // everyone is back: no last call
			fail("a", 2).then(view{Job: Failed, Round: 2, World: []string{"a", "b"},
				Reason: "workers on node a (node rank 0) failed in round 2 and the restart budget (0) is exhausted"}),
		}},
		{"a regroup after a failure of the same round changes nothing", cfg(func(c *Config) { c.MaxRestarts = 0; c.BlameWindow = 10 * sec }), []step{
			join("a"), join("b"), tick(10 * sec).then(closed(1, "a", "b")),
			fail("a", 1),
			regroup("b", 1).unchanged(),
			tick(10 * sec).then(view{Job: Failed, Round: 1, World: []string{"a", "b"},
				Reason: "workers on node a (node rank 0) failed in round 1 and the restart budget (0) is exhausted"}),
		}},
		{"a regroup of a node not in the world is refused", cfg(minmax(2, 2)), []step{
			join("a"), join("b"), join("c"), tick(10 * sec).then(closed(1, "a", "b").waiting("c")),
			regroup("c", 1).errs(ErrNotInWorld),
			regroup("d", 1).errs(ErrUnknownNode),
		}},
		{"no room: the late joiner keeps waiting", cfg(minmax(2, 2)), []step{
			join("a"), join("b").then(closed(1, "a", "b")),
			join("c").at(time.Minute).then(closed(1, "a", "b").waiting("c")),
			tick(time.Hour).then(closed(1, "a", "b").waiting("c")),
		}},
		{"no room after node unit truncation", cfg(func(c *Config) { c.NodeUnit = 2 }), []step{
			join("a"), join("b"), tick(10 * sec).then(closed(1, "a", "b")),
			join("c").then(closed(1, "a", "b").waiting("c")),
			join("d").then(open(2, "c", "d").prev("a", "b")),
		}},
		{"rank stability across rejoin and lost", cfg(minmax(2, 3)), []step{
			join("a").gets(0), join("b").gets(1), join("c").gets(2),
			join("b").gets(1).then(open(2, "b").prev("a", "b", "c")), // b's agent restarted
			lost("c").then(open(2, "b").prev("a", "b", "c")),
			join("c").gets(2),
			join("a").gets(0).then(closed(2, "a", "b", "c")),
		}},
		{"requested rank honoured or taken", cfg(), []step{
			join("a").asks(2).gets(2),
			join("b").gets(0),
			join("c").asks(2).errs(ErrRankTaken).unchanged(),
			join("c").gets(1),
			join("a").asks(3).gets(3).then(open(1, "b", "c", "a")),
			join("d").gets(2).then(closed(1, "b", "c", "d", "a")),
		}},
		{"a lost node's rank can be requested", cfg(), []step{
			join("a"), join("b"),
			lost("a"),
			join("c").asks(0).gets(0),
			join("a").gets(2).then(open(1, "c", "b", "a")),
		}},
		{"replacement inherits a lost node's rank", cfg(minmax(3, 4)), []step{
			join("a").gets(0), join("b").gets(1), join("c").gets(2),
			tick(10 * sec).then(closed(1, "a", "b", "c")),
			lost("b").then(open(2).prev("a", "b", "c")),
			join("d").gets(1),
			join("b").gets(3).then(open(2, "d", "b").prev("a", "b", "c")),
			join("a"),
			join("c").then(closed(2, "a", "d", "c", "b")),
		}},
		{"lost world member opens an uncounted round", cfg(minmax(2, 3)), []step{
			join("a"), join("b"), join("c").then(closed(1, "a", "b", "c")),
			lost("c").at(time.Hour).then(open(2).prev("a", "b", "c")),
			join("a"),
			join("b").then(closed(2, "a", "b")),
			lost("c").unchanged(),
		}},
		{"lost waiting node is dropped", cfg(minmax(2, 2)), []step{
			join("a"), join("b"), join("c").then(closed(1, "a", "b").waiting("c")),
			lost("c").then(closed(1, "a", "b")),
			lost("zzz").unchanged(),
		}},
		{"lost joiner of an open round is dropped", cfg(), []step{
			join("a"), join("b"), lost("a").then(open(1, "b")),
			tick(time.Minute).then(open(1, "b")),
		}},
		{"failure restarts count and exhaust the budget", cfg(func(c *Config) { c.MaxRestarts = 1 }), []step{
			join("a"), join("b"), tick(10 * sec).then(closed(1, "a", "b")),
			fail("b", 1).then(open(2).prev("a", "b").restarts(1)),
			join("a"), join("b").then(closed(2, "a", "b").restarts(1)),
			fail("b", 2).then(view{Job: Failed, Round: 2, World: []string{"a", "b"}, Restarts: 1,
				Reason: "workers on node b (node rank 1) failed in round 2 and the restart budget (1) is exhausted"}),
			join("a").errs(ErrJobFinished).unchanged(),
			fail("a", 2).unchanged(),
			lost("a").unchanged(),
			tick(time.Hour).unchanged(),
		}},
		{"zero restart budget", cfg(func(c *Config) { c.MaxRestarts = 0 }), []step{
			join("a"), join("b"), tick(10 * sec),
			fail("a", 1).then(view{Job: Failed, Round: 1, World: []string{"a", "b"},
				Reason: "workers on node a (node rank 0) failed in round 1 and the restart budget (0) is exhausted"}),
		}},
		{"stale failures are ignored", cfg(), []step{
			join("a"), join("b"), tick(10 * sec),
			fail("a", 1).then(open(2).prev("a", "b").restarts(1)),
			fail("b", 1).unchanged(), // same failure seen by the other node
			fail("b", 2).unchanged(), // round 2 not closed yet
			join("a"), join("b").then(closed(2, "a", "b").restarts(1)),
			fail("a", 1).unchanged(),
			fail("a", 3).unchanged(),
			succeed("a", 1).unchanged(),
		}},
		{"join timeout below min fails the job", cfg(), []step{
			join("a").next(10 * time.Minute),
			tick(10*time.Minute - 1).then(open(1, "a")),
			tick(1).then(view{Job: Failed, Round: 1, Open: true, Joined: []string{"a"},
				Reason: "only 1 of minimum 2 nodes joined round 1 within 10m0s"}).next(-1),
			join("b").errs(ErrJobFinished),
		}},
		{"join timeout in a restart round", cfg(), []step{
			join("a"), join("b"), tick(10 * sec),
			fail("a", 1).at(time.Hour), join("a"), join("b"),
			fail("a", 2).at(time.Hour).then(open(3).prev("a", "b").restarts(2)),
			join("a").at(time.Minute),
			tick(9*time.Minute - 1).then(open(3, "a").prev("a", "b").restarts(2)),
			tick(1).then(view{Job: Failed, Round: 3, Open: true, World: []string{"a", "b"}, Joined: []string{"a"},
				Restarts: 2, Reason: "only 1 of minimum 2 nodes joined round 3 within 10m0s"}),
		}},
		{"zero join timeout waits forever", cfg(func(c *Config) { c.JoinTimeout = 0 }), []step{
			join("a").next(-1), tick(1000 * time.Hour).then(open(1, "a")),
		}},
		{"restart round closes early when everyone is back", cfg(), []step{
			join("a"), join("b"), join("c"), tick(10 * sec).then(closed(1, "a", "b", "c")),
			fail("c", 1).then(open(2).prev("a", "b", "c").restarts(1)),
			join("c"), join("a").then(open(2, "a", "c").prev("a", "b", "c").restarts(1)).next(10*sec + 10*sec),
			join("b").then(closed(2, "a", "b", "c").restarts(1)),
		}},
		{"restart round waits for a member that has not rejoined", cfg(), []step{
			join("a"), join("b"), join("c"), tick(10 * sec),
			fail("c", 1).at(sec).then(open(2).prev("a", "b", "c").restarts(1)),
			join("a"), join("b"),
			tick(10*sec - 1).then(open(2, "a", "b").prev("a", "b", "c").restarts(1)),
			tick(1).then(closed(2, "a", "b").restarts(1)),
			join("c").then(open(3, "c").prev("a", "b").restarts(1)), // room: c grows the world
		}},
		{"a restart round waits for the last world, not for a live node left out of it", cfg(), []step{
			join("a"), join("b"), join("c"), tick(10 * sec).then(closed(1, "a", "b", "c")),
			fail("c", 1).at(sec).then(open(2).prev("a", "b", "c").restarts(1)),
			join("a"), join("b"), tick(10 * sec).then(closed(2, "a", "b").restarts(1)), // c is live, but did not rejoin
			fail("a", 2).at(sec).then(open(3).prev("a", "b").restarts(2)),
			join("b").then(open(3, "b").prev("a", "b").restarts(2)),
			join("a").then(closed(3, "a", "b").restarts(2)).next(-1), // rule (c): the world is back; no last call for c
			join("c").then(open(4, "c").prev("a", "b").restarts(2)),  // c comes back later: a growth, with its last call
			join("a"), join("b").then(closed(4, "a", "b", "c").restarts(2)),
		}},
		{"a restart round does not wait for a member lost meanwhile", cfg(), []step{
			join("a"), join("b"), join("c"), tick(10 * sec).then(closed(1, "a", "b", "c")),
			fail("a", 1).then(open(2).prev("a", "b", "c").restarts(1)),
			join("a"), lost("c").then(open(2, "a").prev("a", "b", "c").restarts(1)),
			join("b").then(closed(2, "a", "b").restarts(1)),
		}},
		{"a member that rejoined and was lost is not waited for", cfg(), []step{
			join("a"), join("b"), join("c"), tick(10 * sec).then(closed(1, "a", "b", "c")),
			fail("a", 1).then(open(2).prev("a", "b", "c").restarts(1)),
			join("c"), lost("c"), join("a"),
			join("b").then(closed(2, "a", "b").restarts(1)),
		}},
		{"a member lost and back is a joiner again", cfg(), []step{
			join("a"), join("b"), join("c"), tick(10 * sec).then(closed(1, "a", "b", "c")),
			fail("a", 1).then(open(2).prev("a", "b", "c").restarts(1)),
			join("c"), join("a"), lost("c").then(open(2, "a").prev("a", "b", "c").restarts(1)),
			join("c").then(open(2, "a", "c").prev("a", "b", "c").restarts(1)), // back, and joined: b still awaited
			join("b").then(closed(2, "a", "b", "c").restarts(1)),
		}},
		{"a growth round waits for the members of the world it grows", cfg(), []step{
			join("a"), join("b"), tick(10 * sec).then(closed(1, "a", "b")),
			join("c").then(open(2, "c").prev("a", "b")),
			join("a").then(open(2, "a", "c").prev("a", "b")).next(20 * sec),
			join("b").then(closed(2, "a", "b", "c")),
		}},
		{"round 1 never closes early", cfg(), []step{
			join("a"), join("b").then(open(1, "a", "b")),
		}},
		{"success when every member succeeds", cfg(), []step{
			join("a"), join("b"), tick(10 * sec),
			succeed("a", 1).then(closed(1, "a", "b")),
			succeed("a", 1).unchanged(),
			succeed("b", 1).then(view{Job: Succeeded, Round: 1, World: []string{"a", "b"}}),
			join("c").errs(ErrJobFinished),
			succeed("b", 1).unchanged(),
		}},
		{"a succeeded member may leave", cfg(), []step{
			join("a"), join("b"), tick(10 * sec),
			succeed("a", 1), lost("a").then(closed(1, "a", "b")),
			fail("a", 1).unchanged(),
			succeed("b", 1).then(view{Job: Succeeded, Round: 1, World: []string{"a", "b"}}),
		}},
		{"success needs the current round", cfg(), []step{
			join("a"), join("b"), tick(10 * sec),
			succeed("a", 1), fail("b", 1).then(open(2).prev("a", "b").restarts(1)),
			join("a"), join("b"),
			succeed("b", 2).then(closed(2, "a", "b").restarts(1)),
			succeed("a", 2).then(view{Job: Succeeded, Round: 2, World: []string{"a", "b"}, Restarts: 1}),
		}},
		{"reports from unknown or non-member nodes", cfg(minmax(2, 2)), []step{
			join("a"), join("b"), join("c"),
			fail("x", 1).errs(ErrUnknownNode).unchanged(),
			succeed("x", 1).errs(ErrUnknownNode).unchanged(),
			fail("c", 1).errs(ErrNotInWorld).unchanged(),
			succeed("c", 1).errs(ErrNotInWorld).unchanged(),
		}},
		{"repeated join is idempotent", cfg(), []step{
			join("a"), join("a").gets(0).unchanged(), join("a").asks(0).unchanged(),
			join("b"), tick(10 * sec), join("c").then(open(2, "c").prev("a", "b")),
			join("c").unchanged(),
		}},
		{"waiting node beyond max when a member restarts", cfg(minmax(1, 2)), []step{
			join("a"), join("b").then(closed(1, "a", "b")),
			join("c"), join("d").then(closed(1, "a", "b").waiting("c", "d")),
			fail("a", 1).then(closed(2, "c", "d").restarts(1)), // rule (a): the waiting nodes fill it
			join("a").then(closed(2, "c", "d").restarts(1).waiting("a")),
		}},
		{"zero last call closes at min", cfg(func(c *Config) { c.LastCall = 0 }), []step{
			join("a"), join("b").then(closed(1, "a", "b")),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runScenario(t, tt.cfg, tt.steps) })
	}
}
