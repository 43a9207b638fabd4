package jobstate

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/roverml/rover/internal/rendezvous"
)

// backup is what a node keeps of another node's sharded snapshots.
func backup(local, rank, world int, steps ...int64) []MemorySnapshot {
	out := sharded(local, rank, world, steps...)
	for i := range out {
		out[i].Backup = true
	}
	return out
}

func TestAgreeWithBackups(t *testing.T) {
	three := []rendezvous.Member{
		{NodeID: "a", GroupRank: 0, LocalWorldSize: 2, RankOffset: 0},
		{NodeID: "b", GroupRank: 1, LocalWorldSize: 2, RankOffset: 2},
		{NodeID: "c", GroupRank: 2, LocalWorldSize: 2, RankOffset: 4},
	}
	all := map[string]string{"a": "a:1", "b": "b:1", "c": "c:1"}
	own := func(node string, steps ...int64) []MemorySnapshot {
		off := map[string]int{"a": 0, "b": 2, "c": 4}[node]
		return concat(sharded(0, off, 6, steps...), sharded(1, off+1, 6, steps...))
	}
	keeps := func(node string, steps ...int64) []MemorySnapshot { // a backup of node's shards
		off := map[string]int{"a": 0, "b": 2, "c": 4}[node]
		return concat(backup(0, off, 6, steps...), backup(1, off+1, 6, steps...))
	}
	for _, tc := range []struct {
		name  string
		held  map[string][]MemorySnapshot
		peers map[string]string
		want  MemoryAgreement
	}{
		{"every node holds its own shards: no transfer", map[string][]MemorySnapshot{
			"a": concat(own("a", 9, 10), keeps("c", 9, 10)), "b": concat(own("b", 9, 10), keeps("a", 9, 10)),
			"c": concat(own("c", 9, 10), keeps("b", 9, 10)),
		}, all, MemoryAgreement{Step: 10, OK: true}},
		{"a replaced node fetches its shards from its backup peer", map[string][]MemorySnapshot{
			"a": concat(own("a", 9, 10), keeps("c", 9, 10)), "b": own("b", 9, 10),
		}, all, MemoryAgreement{Step: 10, OK: true, Backups: map[string][]MemoryPeer{"c": {{"a", "a:1"}}}}},
		{"the backup lags a step: the newest step every rank has", map[string][]MemorySnapshot{
			"a": concat(own("a", 9, 10), keeps("c", 8, 9)), "b": own("b", 9, 10),
		}, all, MemoryAgreement{Step: 9, OK: true, Backups: map[string][]MemoryPeer{"c": {{"a", "a:1"}}}}},
		{"a backup of one local rank only is not enough", map[string][]MemorySnapshot{
			"a": concat(own("a", 9, 10), backup(0, 4, 6, 10)), "b": own("b", 9, 10),
		}, all, MemoryAgreement{}},
		{"the backup peer is lost too: storage", map[string][]MemorySnapshot{
			"a": concat(own("a", 9, 10), keeps("c", 9, 10)),
		}, all, MemoryAgreement{}},
		{"a backup peer that serves nothing is no source", map[string][]MemorySnapshot{
			"a": concat(own("a", 9, 10), keeps("c", 9, 10)), "b": own("b", 9, 10),
		}, map[string]string{"b": "b:1", "c": "c:1"}, MemoryAgreement{}},
		{"no peer restore after a failed fetch", map[string][]MemorySnapshot{
			"a": concat(own("a", 9, 10), keeps("c", 9, 10)), "b": own("b", 9, 10),
		}, nil, MemoryAgreement{}},
		{"a backup of another world size is not restorable", map[string][]MemorySnapshot{
			"a": concat(own("a", 9, 10), backup(0, 4, 8, 10), backup(1, 5, 8, 10)), "b": own("b", 9, 10),
		}, all, MemoryAgreement{}},
		{"a node's own backup of itself does not count", map[string][]MemorySnapshot{
			"a": own("a", 10), "b": own("b", 10), "c": keeps("c", 10),
		}, all, MemoryAgreement{}},
		{"backups are never a node's own memory", map[string][]MemorySnapshot{
			"a": concat(own("a", 10), keeps("b", 11)), "b": concat(own("b", 10), keeps("b", 11)), "c": own("c", 10),
		}, nil, MemoryAgreement{Step: 10, OK: true}},
		{"two nodes lost, each backup kept by a survivor", map[string][]MemorySnapshot{
			"a": concat(own("a", 10), keeps("c", 10), keeps("b", 10)),
		}, all, MemoryAgreement{Step: 10, OK: true, Backups: map[string][]MemoryPeer{"b": {{"a", "a:1"}}, "c": {{"a", "a:1"}}}}},
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
			for node, keepers := range tc.want.Backups {
				if got := m.Agreement().Peers(node); !cmp.Equal(got, keepers) || !m.Agreement().FromBackup(node) {
					t.Errorf("Peers(%s) = %v (from backup %v), want %v from backup", node, got, m.Agreement().FromBackup(node), keepers)
				}
			}
		})
	}
}

func TestBackupRing(t *testing.T) {
	member := func(id string, group int, host string) rendezvous.Member {
		return rendezvous.Member{NodeID: id, GroupRank: group, LocalWorldSize: 1, RankOffset: group, Addr: host}
	}
	peers := map[string]string{"a": "a:1", "b": "b:1", "c": "c:1", "d": "d:1"}
	to := func(pairs ...string) map[string]MemoryPeer {
		out := map[string]MemoryPeer{}
		for i := 0; i < len(pairs); i += 2 {
			out[pairs[i]] = MemoryPeer{NodeID: pairs[i+1], Addr: pairs[i+1] + ":1"}
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		world []rendezvous.Member
		peers map[string]string
		want  map[string]MemoryPeer
	}{
		{"one node: no ring", []rendezvous.Member{member("a", 0, "h1")}, peers, nil},
		{"every node on its own host: the next", []rendezvous.Member{member("b", 1, "h2"), member("a", 0, "h1"), member("c", 2, "h3")}, peers,
			to("a", "b", "b", "c", "c", "a")},
		{"two nodes per host: the shift that crosses hosts", []rendezvous.Member{member("a", 0, "h1"), member("b", 1, "h1"),
			member("c", 2, "h2"), member("d", 3, "h2")}, peers, to("a", "c", "b", "d", "c", "a", "d", "b")},
		{"one host: the next", []rendezvous.Member{member("a", 0, "h"), member("b", 1, "h"), member("c", 2, "h")}, peers,
			to("a", "b", "b", "c", "c", "a")},
		{"three on one host, one on another: the most crossing", []rendezvous.Member{member("a", 0, "h1"), member("b", 1, "h1"),
			member("c", 2, "h1"), member("d", 3, "h2")}, peers, to("a", "b", "b", "c", "c", "d", "d", "a")},
		{"a node that serves nothing is left out", []rendezvous.Member{member("a", 0, "h1"), member("b", 1, "h2"), member("c", 2, "h3")},
			map[string]string{"a": "a:1", "c": "c:1"}, to("a", "c", "c", "a")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := backupRing(tc.world, tc.peers)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ring (-want +got):\n%s", diff)
			}
			// Balanced: every node keeps one other's backups.
			kept := map[string]int{}
			for from, p := range got {
				if p.NodeID == from {
					t.Errorf("%s backs up to itself", from)
				}
				kept[p.NodeID]++
			}
			for node, n := range kept {
				if n != 1 {
					t.Errorf("%s keeps %d nodes' backups, want 1", node, n)
				}
			}
		})
	}
}

// TestMemoryRingSurvivesASnapshot: the ring and the backup agreement are
// in the state's snapshot, and a node's backups in its held snapshots.
func TestMemoryRingSurvivesASnapshot(t *testing.T) {
	s := NewState(sameString, jsonFailures{})
	if _, err := s.Apply(&Event{Type: EventConfigure, Time: t0, Config: twoNodeConfig()}); err != nil {
		t.Fatal(err)
	}
	held := map[string][]MemorySnapshot{
		"a": concat(sharded(0, 0, 4, 10), sharded(1, 1, 4, 10), backup(0, 2, 4, 10), backup(1, 3, 4, 10)),
		"b": nil,
	}
	for _, id := range []string{"a", "b"} {
		e := joinEvent(id, t0)
		e.Snapshots, e.PeerAddr = held[id], id+":1"
		if _, err := s.Apply(e); err != nil {
			t.Fatalf("join %s: %v", id, err)
		}
	}
	want := s.Memory.Agreement()
	if !want.OK || want.Step != 10 || !want.FromBackup("b") {
		t.Fatalf("agreement %v, want step 10 with b from its backup peer", want)
	}
	if p, ok := s.Memory.BackupPeer("a"); !ok || p.NodeID != "b" || s.Memory.BackupOf("a") != "b" {
		t.Fatalf("a's backup peer %v (ok %v), keeps %q; want b both ways", p, ok, s.Memory.BackupOf("a"))
	}
	b, err := s.MarshalSnapshot("job")
	if err != nil {
		t.Fatal(err)
	}
	r := NewState(sameString, jsonFailures{})
	if err := r.RestoreSnapshot(b, "job"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, r.Memory.Agreement()); diff != "" {
		t.Errorf("restored agreement (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(s.Memory.Ring(), r.Memory.Ring()); diff != "" || r.Memory.BackupOf("b") != "a" {
		t.Errorf("restored ring (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(held["a"], r.Memory.Held()["a"]); diff != "" {
		t.Errorf("restored held snapshots (-want +got):\n%s", diff)
	}
	// An older snapshot (no ring, no backup field) restores with none.
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(b, &raw)
	var mem map[string]json.RawMessage
	_ = json.Unmarshal(raw["memory"], &mem)
	delete(mem, "ring")
	delete(mem, "backups")
	raw["memory"], _ = json.Marshal(mem)
	old, _ := json.Marshal(raw)
	o := NewState(sameString, jsonFailures{})
	if err := o.RestoreSnapshot(old, "job"); err != nil {
		t.Fatal(err)
	}
	if _, ok := o.Memory.BackupPeer("a"); ok {
		t.Errorf("a snapshot without a ring restored one")
	}
}
