package ckptsaver

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/roverml/rover/internal/ckpt"
)

// kill leaves d as a killed agent would: in place, unlocked.
func kill(d *arenaDir) { d.release() }

func TestArenaDirAdoptedAfterItsAgentDies(t *testing.T) {
	base, now := t.TempDir(), time.Now()
	key := JobKey("job", "secret")
	first, err := openArenaDir(base, key, Owner{NodeID: "n1"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if first.adopted {
		t.Fatal("a fresh directory is marked adopted")
	}
	if fi, err := os.Stat(first.path); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("arena dir %v, %v: want mode 0700", fi, err)
	}
	// While its agent lives (holds the lock), nobody adopts it.
	second, err := openArenaDir(base, key, Owner{NodeID: "n1"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if second.adopted || second.path == first.path {
		t.Fatalf("a live agent's directory %s was adopted", first.path)
	}
	second.remove()
	kill(first)
	third, err := openArenaDir(base, key, Owner{NodeID: "n1"}, now)
	if err != nil {
		t.Fatal(err)
	}
	defer third.remove()
	if !third.adopted || third.path != first.path {
		t.Fatalf("got %s (adopted %v), want the killed agent's %s adopted", third.path, third.adopted, first.path)
	}
	// Another run of the job (another token) does not adopt it.
	other, err := openArenaDir(base, JobKey("job", "other secret"), Owner{NodeID: "n1"}, now)
	if err != nil {
		t.Fatal(err)
	}
	defer other.remove()
	if other.adopted {
		t.Error("another run adopted the job's arenas")
	}
}

func TestArenaDirPrefersItsNode(t *testing.T) {
	base, now := t.TempDir(), time.Now()
	key := JobKey("job", "secret")
	paths := map[string]string{}
	for _, node := range []string{"n1", "n2", "n3"} {
		d, err := openArenaDir(base, key, Owner{NodeID: node}, now)
		if err != nil {
			t.Fatal(err)
		}
		paths[node] = d.path
		kill(d)
	}
	d, err := openArenaDir(base, key, Owner{NodeID: "n2"}, now)
	if err != nil {
		t.Fatal(err)
	}
	defer d.remove()
	if d.path != paths["n2"] {
		t.Errorf("node n2 adopted %s, want its own %s", d.path, paths["n2"])
	}
	for _, n := range []string{"n1", "n3"} {
		if _, err := os.Stat(paths[n]); err != nil {
			t.Errorf("node %s's orphan of the same job was removed: %v", n, err)
		}
	}
}

func TestArenaDirRemovesOldOrphansOfOtherJobs(t *testing.T) {
	base, now := t.TempDir(), time.Now()
	fresh, err := openArenaDir(base, JobKey("a", "t"), Owner{NodeID: "n"}, now)
	if err != nil {
		t.Fatal(err)
	}
	old, err := openArenaDir(base, JobKey("b", "t"), Owner{NodeID: "n"}, now)
	if err != nil {
		t.Fatal(err)
	}
	live, err := openArenaDir(base, JobKey("c", "t"), Owner{NodeID: "n"}, now)
	if err != nil {
		t.Fatal(err)
	}
	defer live.remove()
	old.refresh(now.Add(-2 * orphanGrace))
	live.refresh(now.Add(-2 * orphanGrace))
	kill(fresh)
	kill(old)
	d, err := openArenaDir(base, JobKey("d", "t"), Owner{NodeID: "n"}, now)
	if err != nil {
		t.Fatal(err)
	}
	defer d.remove()
	if _, err := os.Stat(old.path); !os.IsNotExist(err) {
		t.Errorf("an orphan older than %s is still there: %v", orphanGrace, err)
	}
	for _, p := range []string{fresh.path, live.path} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
}

// saveSnapshot commits a snapshot of step with the metadata the SDKs write.
func saveSnapshot(t *testing.T, s *arenas, local, rank, world int, step int64, mode string) {
	t.Helper()
	tensors := []ckpt.Tensor{{Name: "w", DType: "F32", Shape: []int64{4}, Data: make([]byte, 16)}}
	meta := map[string]string{ckpt.MetaStep: strconv.FormatInt(step, 10), ckpt.MetaRank: strconv.Itoa(rank),
		ckpt.MetaWorldSize: strconv.Itoa(world), ckpt.MetaMode: mode}
	l, err := ckpt.NewLayout(tensors, meta)
	if err != nil {
		t.Fatal(err)
	}
	_, _, slot, err := s.begin(local, step, l.Size)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Place(slot, tensors); err != nil {
		t.Fatal(err)
	}
	if err := s.commit(local, step, l.Size); err != nil {
		t.Fatal(err)
	}
}

func TestArenasSurviveAKilledAgent(t *testing.T) {
	key := JobKey("job", "secret")
	s, err := newArenas(key, Owner{NodeID: "n1"}, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { os.RemoveAll(s.dir.path) }()
	saveSnapshot(t, s, 0, 4, 8, 23, "sharded")
	saveSnapshot(t, s, 0, 4, 8, 24, "sharded")
	saveSnapshot(t, s, 3, 7, 8, 24, "replicated")
	// The agent dies: the mappings and the lock go, the files stay.
	for _, a := range s.byRank {
		_ = a.Close()
	}
	kill(s.dir)

	// Its successor runs two workers per node: rank 3's arena goes.
	again, err := newArenas(key, Owner{NodeID: "n1"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer again.close()
	if got := again.adopted(); len(got) != 1 || got[0] != 0 {
		t.Fatalf("adopted local ranks %v, want [0]", got)
	}
	if _, err := os.Stat(filepath.Join(again.dir.path, "rank-3")); !os.IsNotExist(err) {
		t.Errorf("the arena of a local rank the agent does not run is still there: %v", err)
	}
	inv := again.inventory()
	if len(inv) != 2 {
		t.Fatalf("inventory %v, want steps 23 and 24 of local rank 0", inv)
	}
	for i, step := range []int64{23, 24} {
		m := inv[i]
		if m.GetLocalRank() != 0 || m.GetStep() != step || m.GetRank() != 4 || m.GetWorldSize() != 8 || m.GetMode() != "sharded" {
			t.Errorf("inventory[%d] = %v, want local rank 0 step %d of rank 4/8, sharded", i, m, step)
		}
	}
}

// TestArenaDirAdoptsOnlyItsNode: an agent with an explicit node id adopts
// only that node's orphan (another node's agent may come back for its
// own); one with a generated id adopts an orphan whose id was generated.
func TestArenaDirAdoptsOnlyItsNode(t *testing.T) {
	base, now := t.TempDir(), time.Now()
	key := JobKey("job", "secret")
	named, err := openArenaDir(base, key, Owner{NodeID: "node1"}, now)
	if err != nil {
		t.Fatal(err)
	}
	kill(named)
	other, err := openArenaDir(base, key, Owner{NodeID: "node2"}, now)
	if err != nil {
		t.Fatal(err)
	}
	defer other.remove()
	if other.adopted {
		t.Fatalf("node2 adopted node1's arenas %s", other.path)
	}
	gen, err := openArenaDir(base, key, Owner{NodeID: "host-111", Generated: true}, now)
	if err != nil {
		t.Fatal(err)
	}
	if gen.adopted {
		t.Fatal("a generated id adopted an explicit node's arenas")
	}
	kill(gen)
	again, err := openArenaDir(base, key, Owner{NodeID: "host-222", Generated: true}, now)
	if err != nil {
		t.Fatal(err)
	}
	defer again.remove()
	if !again.adopted || again.path != gen.path {
		t.Errorf("a restarted agent with a generated id got %s (adopted %v), want %s", again.path, again.adopted, gen.path)
	}
	if _, err := os.Stat(named.path); err != nil {
		t.Errorf("node1's orphan is gone: %v", err)
	}
}

// TestArenaDirsOfNodes: a job's arena directories are found by their
// owner's node ID, held or not, and another job's are not.
func TestArenaDirsOfNodes(t *testing.T) {
	base := t.TempDir()
	now := time.Unix(1000, 0)
	held, err := openArenaDir(base, "k1", Owner{NodeID: "job-worker-0-0"}, now)
	if err != nil {
		t.Fatal(err)
	}
	left, err := openArenaDir(base, "k1", Owner{NodeID: "job-worker-1-0"}, now)
	if err != nil {
		t.Fatal(err)
	}
	left.release()
	other, err := openArenaDir(base, "k2", Owner{NodeID: "jobs-worker-0-0"}, now)
	if err != nil {
		t.Fatal(err)
	}
	defer other.remove()
	defer held.remove()
	got := arenaDirsOfNodes([]string{base}, "job-")
	slices.Sort(got)
	want := []string{held.path, left.path}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("arenaDirsOfNodes = %v, want %v", got, want)
	}
}
