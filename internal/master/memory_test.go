package master

import (
	"context"
	"strings"
	"testing"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/store"
)

func TestValidateSnapshots(t *testing.T) {
	snap := func(local int32, step int64, rank, world int32, mode string) *roverv1.MemorySnapshot {
		return &roverv1.MemorySnapshot{LocalRank: local, Step: step, Rank: rank, WorldSize: world, Mode: mode}
	}
	for _, tc := range []struct {
		snap *roverv1.MemorySnapshot
		want string // in the error; "" for valid
	}{
		{snap(1, 5, 3, 4, "sharded"), ""},
		{snap(0, 0, 0, 1, "replicated"), ""},
		{snap(2, 5, 0, 4, "sharded"), "local_rank 2"},
		{snap(-1, 5, 0, 4, "sharded"), "local_rank -1"},
		{snap(0, -5, 0, 4, "sharded"), "step -5"},
		{snap(0, 5, 4, 4, "sharded"), "rank 4"},
		{snap(0, 5, 0, 0, "sharded"), "world of size 0"},
		{snap(0, 5, 0, 4, "mirrored"), `mode "mirrored"`},
		{backupSnap(7, 5, 3, 16, "sharded"), ""}, // another node's local rank 7
		{backupSnap(maxBackupLocal, 5, 3, 16, "sharded"), "backup snapshot 0: local_rank 1024"},
		{backupSnap(0, 5, 0, 4, "replicated"), `only "sharded" snapshots`},
		{backupSnap(0, 5, 4, 4, "sharded"), "rank 4"},
	} {
		req := &roverv1.JoinRequest{LocalWorldSize: 2, Snapshots: []*roverv1.MemorySnapshot{tc.snap}}
		_, err := validateSnapshots(req)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.snap, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want one naming %q", tc.snap, err, tc.want)
		}
	}
	many := &roverv1.JoinRequest{LocalWorldSize: 1}
	for range maxSnapshotsPerRank + 1 {
		many.Snapshots = append(many.Snapshots, snap(0, 1, 0, 1, "sharded"))
	}
	if _, err := validateSnapshots(many); err == nil {
		t.Error("an oversized snapshot list was accepted")
	}
	backups := &roverv1.JoinRequest{LocalWorldSize: 1}
	for range maxBackupSnapshots + 1 {
		backups.Snapshots = append(backups.Snapshots, backupSnap(0, 1, 0, 1, "sharded"))
	}
	if _, err := validateSnapshots(backups); err == nil {
		t.Error("an oversized backup list was accepted")
	}
}

func backupSnap(local int32, step int64, rank, world int32, mode string) *roverv1.MemorySnapshot {
	return &roverv1.MemorySnapshot{LocalRank: local, Step: step, Rank: rank, WorldSize: world, Mode: mode, Backup: true}
}

// TestBackupRestoreAssignment: in sharded mode, the survivor a keeps
// backups of b's shards; b's replacement joins holding nothing and is
// assigned the step with a as its backup peer to fetch its shards from;
// each node's assignment names its backup peer and the node it keeps; a
// restarted master (from its journal, and from a snapshot) assigns the
// same.
func TestBackupRestoreAssignment(t *testing.T) {
	st := store.NewMemory()
	ctx := context.Background()
	now := time.Unix(1000, 0)
	c1 := configuredCore(t, st, now)
	held := []jobstate.MemorySnapshot{
		{LocalRank: 0, Step: 7, Rank: 0, WorldSize: 4, Mode: jobstate.ModeSharded},
		{LocalRank: 1, Step: 7, Rank: 1, WorldSize: 4, Mode: jobstate.ModeSharded},
		{LocalRank: 0, Step: 7, Rank: 2, WorldSize: 4, Mode: jobstate.ModeSharded, Backup: true},
		{LocalRank: 1, Step: 7, Rank: 3, WorldSize: 4, Mode: jobstate.ModeSharded, Backup: true},
	}
	for _, j := range []struct {
		id  string
		mem memoryReport
	}{{"a", memoryReport{snaps: held, peerAddr: "10.0.0.1:4000"}}, {"b", memoryReport{peerAddr: "10.0.0.2:4000"}}} {
		req, _, err := validateJoin(joinReq(j.id, rdzvConfig(2, 2)).Msg)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c1.join(ctx, req, j.mem, 0, now); err != nil {
			t.Fatal(err)
		}
	}
	check := func(c *core, how string) {
		t.Helper()
		a, _ := c.view("a")
		b, _ := c.view("b")
		aa, ba := a.GetAssignment(), b.GetAssignment()
		if aa.GetMemoryStep() != 7 || len(aa.GetMemoryPeers()) != 0 || aa.GetMemoryFromBackup() {
			t.Errorf("%s: the survivor's assignment %v, want step 7 from its own memory", how, aa)
		}
		peers := ba.GetMemoryPeers()
		if ba.MemoryStep == nil || ba.GetMemoryStep() != 7 || !ba.GetMemoryFromBackup() || len(peers) != 1 ||
			peers[0].GetNodeId() != "a" || peers[0].GetAddr() != "10.0.0.1:4000" {
			t.Errorf("%s: the newcomer's assignment %v, want step 7 from its backup peer a at 10.0.0.1:4000", how, ba)
		}
		if aa.GetBackupPeer().GetNodeId() != "b" || aa.GetBackupOf() != "b" || ba.GetBackupPeer().GetAddr() != "10.0.0.1:4000" || ba.GetBackupOf() != "a" {
			t.Errorf("%s: backup peers a -> %v (keeps %q), b -> %v (keeps %q); want each the other's", how,
				aa.GetBackupPeer(), aa.GetBackupOf(), ba.GetBackupPeer(), ba.GetBackupOf())
		}
		if got := c.peerRestores(int(ba.GetRound())); !strings.Contains(got, "b from its backup peer (a)") {
			t.Errorf("%s: peerRestores = %q", how, got)
		}
	}
	checkLiveAndRestored(t, c1, st, now, check)
}

func TestValidatePeerAddr(t *testing.T) {
	for _, tc := range []struct {
		addr, want string // want: in the error; "" for valid
	}{
		{"", ""},
		{"10.0.0.7:40123", ""},
		{"node-1.example:9", ""},
		{"[::1]:80", ""},
		{"10.0.0.7", "want host:port"},
		{":80", "want a host"},
		{"h:0", "a port from 1"},
		{"h:70000", "a port from 1"},
		{"h:http", "a port from 1"},
		{strings.Repeat("h", 400) + ":1", "at most 300"},
	} {
		_, err := validatePeerAddr(&roverv1.JoinRequest{PeerAddr: tc.addr})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.addr, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want one naming %q", tc.addr, err, tc.want)
		}
	}
}

// TestPeerRestoreAssignment: a node that joins holding nothing next to one
// that holds step 7 and serves peers is assigned step 7 and told to fetch
// it from that node; the survivor is not; a restarted master (from its
// journal, and from a snapshot of its state) assigns the same.
func TestPeerRestoreAssignment(t *testing.T) {
	st := store.NewMemory()
	ctx := context.Background()
	now := time.Unix(1000, 0)
	c1 := configuredCore(t, st, now)
	held := []jobstate.MemorySnapshot{{LocalRank: 0, Step: 7, Rank: 0, WorldSize: 4, Mode: jobstate.ModeReplicated}}
	for _, j := range []struct {
		id  string
		mem memoryReport
	}{{"a", memoryReport{snaps: held, peerAddr: "10.0.0.1:4000"}}, {"b", memoryReport{peerAddr: "10.0.0.2:4000"}}} {
		req, _, err := validateJoin(joinReq(j.id, rdzvConfig(2, 2)).Msg)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c1.join(ctx, req, j.mem, 0, now); err != nil {
			t.Fatal(err)
		}
	}
	check := func(c *core, how string) {
		t.Helper()
		a, _ := c.view("a")
		b, _ := c.view("b")
		if a.GetAssignment().GetMemoryStep() != 7 || len(a.GetAssignment().GetMemoryPeers()) != 0 {
			t.Errorf("%s: the survivor's assignment %v, want step 7 and no peers", how, a.GetAssignment())
		}
		peers := b.GetAssignment().GetMemoryPeers()
		if b.GetAssignment().MemoryStep == nil || b.GetAssignment().GetMemoryStep() != 7 || len(peers) != 1 ||
			peers[0].GetNodeId() != "a" || peers[0].GetAddr() != "10.0.0.1:4000" {
			t.Errorf("%s: the newcomer's assignment %v, want step 7 from a at 10.0.0.1:4000", how, b.GetAssignment())
		}
		if got := c.peerRestores(int(b.GetAssignment().GetRound())); !strings.Contains(got, "b from a peer's memory (a)") {
			t.Errorf("%s: peerRestores = %q", how, got)
		}
	}
	checkLiveAndRestored(t, c1, st, now, check)
}

// checkLiveAndRestored runs check on c, whose journal is st, then on a core
// restored from that journal and on one restored from c's snapshot.
func checkLiveAndRestored(t *testing.T, c *core, st *store.Memory, now time.Time, check func(*core, string)) {
	t.Helper()
	check(c, "live")
	fromJournal := newCore("job", st)
	if _, err := fromJournal.restore(context.Background(), now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	check(fromJournal, "restored from the journal")
	c.mu.Lock()
	snap, err := c.marshalStateLocked()
	c.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	fromSnapshot := newCore("job", store.NewMemory())
	fromSnapshot.mu.Lock()
	err = fromSnapshot.restoreStateLocked(snap)
	fromSnapshot.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	check(fromSnapshot, "restored from a snapshot")
}
