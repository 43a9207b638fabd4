package jobstate

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/roverml/rover/internal/rendezvous"
)

func replicated(local int, steps ...int64) []MemorySnapshot {
	var out []MemorySnapshot
	for _, s := range steps {
		out = append(out, MemorySnapshot{LocalRank: local, Step: s, Rank: 0, WorldSize: 1, Mode: ModeReplicated})
	}
	return out
}

func sharded(local, rank, world int, steps ...int64) []MemorySnapshot {
	var out []MemorySnapshot
	for _, s := range steps {
		out = append(out, MemorySnapshot{LocalRank: local, Step: s, Rank: rank, WorldSize: world, Mode: ModeSharded})
	}
	return out
}

func concat(parts ...[]MemorySnapshot) []MemorySnapshot {
	var out []MemorySnapshot
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestAgreedMemoryStep(t *testing.T) {
	two := []rendezvous.Member{
		{NodeID: "a", LocalWorldSize: 2, RankOffset: 0},
		{NodeID: "b", LocalWorldSize: 2, RankOffset: 2},
	}
	one := []rendezvous.Member{{NodeID: "a", LocalWorldSize: 2, RankOffset: 0}}
	for _, tc := range []struct {
		name   string
		world  []rendezvous.Member
		size   int
		held   map[string][]MemorySnapshot
		want   int64
		wantOK bool
	}{
		{"nothing held", two, 4, nil, 0, false},
		{"every rank holds both", two, 4, map[string][]MemorySnapshot{
			"a": concat(replicated(0, 23, 24), replicated(1, 23, 24)),
			"b": concat(replicated(0, 24, 23), replicated(1, 23, 24)),
		}, 24, true},
		{"one rank is a step behind", two, 4, map[string][]MemorySnapshot{
			"a": concat(replicated(0, 23, 24), replicated(1, 23, 24)),
			"b": concat(replicated(0, 22, 23), replicated(1, 23, 24)),
		}, 23, true},
		{"local rank 0's copy serves the node", two, 4, map[string][]MemorySnapshot{
			"a": concat(replicated(0, 23, 24), replicated(1, 23, 24)),
			"b": concat(replicated(0, 23, 24), replicated(1, 21, 22)),
		}, 24, true},
		{"only local rank 0's copy serves the node", two, 4, map[string][]MemorySnapshot{
			"a": concat(replicated(0, 23, 24), replicated(1, 23, 24)),
			"b": replicated(1, 23, 24),
		}, 0, false},
		{"a new node holds nothing", two, 4, map[string][]MemorySnapshot{
			"a": concat(replicated(0, 23, 24), replicated(1, 23, 24)),
		}, 0, false},
		{"one replicated copy per node", two, 4, map[string][]MemorySnapshot{
			"a": replicated(0, 23, 24),
			"b": replicated(0, 22, 23),
		}, 23, true},
		{"a sharded local rank holds nothing", two, 4, map[string][]MemorySnapshot{
			"a": concat(sharded(0, 0, 4, 9, 10), sharded(1, 1, 4, 9, 10)),
			"b": sharded(0, 2, 4, 9, 10),
		}, 0, false},
		{"no common step", two, 4, map[string][]MemorySnapshot{
			"a": concat(replicated(0, 23, 24), replicated(1, 23, 24)),
			"b": concat(replicated(0, 21, 22), replicated(1, 21, 22)),
		}, 0, false},
		{"sharded, same world", two, 4, map[string][]MemorySnapshot{
			"a": concat(sharded(0, 0, 4, 9, 10), sharded(1, 1, 4, 9, 10)),
			"b": concat(sharded(0, 2, 4, 9, 10), sharded(1, 3, 4, 9, 10)),
		}, 10, true},
		{"sharded, ranks moved", two, 4, map[string][]MemorySnapshot{
			"a": concat(sharded(0, 2, 4, 10), sharded(1, 3, 4, 10)),
			"b": concat(sharded(0, 0, 4, 10), sharded(1, 1, 4, 10)),
		}, 0, false},
		{"sharded, world shrank", one, 2, map[string][]MemorySnapshot{
			"a": concat(sharded(0, 0, 4, 10), sharded(1, 1, 4, 10)),
		}, 0, false},
		{"replicated, world shrank", one, 2, map[string][]MemorySnapshot{
			"a": concat(replicated(0, 10), replicated(1, 10)),
			"b": concat(replicated(0, 11), replicated(1, 11)),
		}, 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := agreedStep(tc.world, tc.size, tc.held)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("agreed %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestAgreeWithPeers(t *testing.T) {
	three := []rendezvous.Member{
		{NodeID: "a", LocalWorldSize: 2, RankOffset: 0},
		{NodeID: "b", LocalWorldSize: 2, RankOffset: 2},
		{NodeID: "c", LocalWorldSize: 2, RankOffset: 4},
	}
	all := map[string]string{"a": "a:1", "b": "b:1", "c": "c:1"}
	for _, tc := range []struct {
		name  string
		held  map[string][]MemorySnapshot
		peers map[string]string
		want  MemoryAgreement
	}{
		{"every node holds it: no transfer", map[string][]MemorySnapshot{
			"a": replicated(0, 24, 25), "b": replicated(0, 24, 25), "c": replicated(0, 24, 25),
		}, all, MemoryAgreement{Step: 25, OK: true}},
		{"a replaced node fetches from both survivors", map[string][]MemorySnapshot{
			"a": replicated(0, 24, 25), "b": replicated(0, 24, 25),
		}, all, MemoryAgreement{Step: 25, OK: true, Holders: []MemoryPeer{{"a", "a:1"}, {"b", "b:1"}}, Fetching: []string{"c"}}},
		{"the newest step wins over an older common one", map[string][]MemorySnapshot{
			"a": replicated(0, 24, 25), "b": replicated(0, 23, 24), "c": replicated(0, 23, 24),
		}, all, MemoryAgreement{Step: 25, OK: true, Holders: []MemoryPeer{{"a", "a:1"}}, Fetching: []string{"b", "c"}}},
		{"a holder that serves nothing is no source", map[string][]MemorySnapshot{
			"a": replicated(0, 24, 25), "b": replicated(0, 24, 25),
		}, map[string]string{"b": "b:1"}, MemoryAgreement{Step: 25, OK: true, Holders: []MemoryPeer{{"b", "b:1"}}, Fetching: []string{"c"}}},
		{"no peer serves: storage", map[string][]MemorySnapshot{
			"a": replicated(0, 24, 25), "b": replicated(0, 24, 25),
		}, nil, MemoryAgreement{}},
		{"sharded snapshots are not served", map[string][]MemorySnapshot{
			"a": concat(sharded(0, 0, 6, 9), sharded(1, 1, 6, 9)), "b": concat(sharded(0, 2, 6, 9), sharded(1, 3, 6, 9)),
		}, all, MemoryAgreement{}},
		{"a node outside the world is no source", map[string][]MemorySnapshot{
			"gone": replicated(0, 30), "a": replicated(0, 25), "b": replicated(0, 25), "c": replicated(0, 25),
		}, map[string]string{"gone": "g:1", "a": "a:1", "b": "b:1", "c": "c:1"}, MemoryAgreement{Step: 25, OK: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMemory()
			for node, snaps := range tc.held {
				m.Joined(node, snaps, tc.peers[node], false)
			}
			m.Agree(three, 7, 6)
			tc.want.Round = 7
			if diff := cmp.Diff(tc.want, m.Agreement()); diff != "" {
				t.Errorf("agreement (-want +got):\n%s", diff)
			}
			for _, node := range tc.want.Fetching {
				if got := m.Agreement().Peers(node); !cmp.Equal(got, tc.want.Holders) {
					t.Errorf("Peers(%s) = %v, want %v", node, got, tc.want.Holders)
				}
			}
			m.Lost("a")
			if _, ok := m.PeerAddrs()["a"]; ok {
				t.Errorf("a lost node keeps its peer address")
			}
		})
	}
}

// TestMemoryAgreesWithoutPeersAfterAFailedFetch: a node whose fetch from
// its peers failed joins saying so; its world then agrees without peer
// restore (nothing common to every rank's memory: storage), so every rank
// loads the same step. Its next join without the flag brings peer restore
// back.
func TestMemoryAgreesWithoutPeersAfterAFailedFetch(t *testing.T) {
	three := []rendezvous.Member{
		{NodeID: "a", LocalWorldSize: 2, RankOffset: 0},
		{NodeID: "b", LocalWorldSize: 2, RankOffset: 2},
		{NodeID: "c", LocalWorldSize: 2, RankOffset: 4},
	}
	m := NewMemory()
	m.Joined("a", replicated(0, 24, 25), "a:1", false)
	m.Joined("b", replicated(0, 24, 25), "b:1", false)
	m.Joined("c", nil, "c:1", true)
	m.Agree(three, 7, 6)
	if got := m.Agreement(); got.OK || len(got.Fetching) != 0 {
		t.Errorf("agreement after c's failed fetch = %v, want none (storage for every rank)", got)
	}
	m.Joined("c", nil, "c:1", false)
	m.Agree(three, 8, 6)
	if got := m.Agreement(); !got.OK || got.Step != 25 || !slices.Equal(got.Fetching, []string{"c"}) {
		t.Errorf("agreement after c's next join = %v, want step 25 fetched by c", got)
	}
}

// TestRegroupAfterAFailedPeerRestore: a replacement node whose fetch from
// its peers failed reports it (restore_failed); the world forms again
// without spending a restart, even with none left, and agrees on a step
// without peers, so every rank loads the same one.
func TestRegroupAfterAFailedPeerRestore(t *testing.T) {
	cfg := twoNodeConfig()
	cfg.Rendezvous.MaxRestarts = 0
	s := NewState(sameString, jsonFailures{})
	join := func(id string, snaps []MemorySnapshot, peerFailed bool, at time.Duration) {
		t.Helper()
		e := joinEvent(id, t0.Add(at))
		e.Snapshots, e.PeerAddr, e.PeerRestoreFailed = snaps, id+":1", peerFailed
		if _, err := s.Apply(e); err != nil {
			t.Fatalf("join %s: %v", id, err)
		}
	}
	if _, err := s.Apply(&Event{Type: EventConfigure, Time: t0, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	// a survived with steps 24 and 25 in memory; b is its replacement.
	join("a", concat(replicated(0, 24, 25), replicated(1, 24, 25)), false, 0)
	join("b", nil, false, 0)
	if got := s.Memory.Agreement(); !got.OK || got.Step != 25 || !slices.Equal(got.Fetching, []string{"b"}) {
		t.Fatalf("round 1 agreement = %+v, want step 25 fetched by b", got)
	}
	_, err := s.Apply(&Event{Type: EventWorkerFailed, Time: t0.Add(time.Second), Node: "b", Round: 1,
		Failures: []json.RawMessage{json.RawMessage(`{"NodeID":"b","ExitCode":-1,"Round":1,"RestoreFailed":true,` +
			`"Message":"no peer gave the round's checkpoint: step 25: crc mismatch"}`)}})
	if err != nil {
		t.Fatalf("b's failed restore: %v", err)
	}
	st := s.Members.Status()
	if st.Job != rendezvous.Running || st.Round != 2 || !st.Open || st.Restarts != 0 {
		t.Fatalf("after b's failed restore: %+v, want round 2 open, still running, no restart spent", st)
	}
	if fs := s.Failures.Records(); len(fs) != 1 || fs[0].Cause != "restore-failure" || fs[0].Action != "regroup" {
		t.Errorf("failure records %+v, want one restore-failure -> regroup", fs)
	}
	join("a", concat(replicated(0, 24, 25), replicated(1, 24, 25)), false, 2*time.Second)
	join("b", nil, true, 2*time.Second)
	if st := s.Members.Status(); st.Round != 2 || st.Open {
		t.Fatalf("after the rejoins: %+v, want round 2 closed", st)
	}
	if got := s.Memory.Agreement(); got.OK || len(got.Fetching) != 0 {
		t.Errorf("round 2 agreement = %+v, want none: every rank from storage", got)
	}
}
