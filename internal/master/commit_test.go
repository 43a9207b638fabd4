package master

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/shard"
	"github.com/roverml/rover/internal/store"
)

// gatedStore is a Memory store whose Append can be held: the test sees it
// entered, does what it wants while the write is "in flight", then releases it.
type gatedStore struct {
	*store.Memory
	mu      sync.Mutex
	appends int
	gate    chan struct{} // when not nil, the next Append waits on it
	entered chan struct{}
	fail    error
}

func (g *gatedStore) Append(ctx context.Context, recs [][]byte) error {
	g.mu.Lock()
	g.appends++
	gate, entered, fail := g.gate, g.entered, g.fail
	g.gate = nil
	g.mu.Unlock()
	if gate != nil {
		close(entered)
		<-gate
	}
	if fail != nil {
		return fail
	}
	return g.Memory.Append(ctx, recs)
}

func (g *gatedStore) hold() (entered, release chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate, g.entered = make(chan struct{}), make(chan struct{})
	return g.entered, g.gate
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGroupCommit holds one write in flight while more transitions are
// proposed: they reach the store together in the next write, the core's lock
// is free meanwhile (reads answer), and nothing is visible before its write
// returned.
func TestGroupCommit(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	st := &gatedStore{Memory: store.NewMemory()}
	c := configuredCore(t, st, now)
	st.mu.Lock()
	st.appends = 0
	st.mu.Unlock()

	entered, release := st.hold()
	const n = 20
	var wg sync.WaitGroup
	errs := make([]error, n)
	set := func(i int) {
		defer wg.Done()
		errs[i] = c.apply(ctx, &jobstate.Event{Type: jobstate.EventSetKey, Time: now, Key: fmt.Sprint("k", i), Value: []byte("v")})
	}
	wg.Add(1)
	go set(0)
	<-entered
	for i := 1; i < n; i++ {
		wg.Add(1)
		go set(i)
	}
	waitFor(t, "the other proposals to queue", func() bool {
		c.commits.mu.Lock()
		defer c.commits.mu.Unlock()
		return len(c.commits.queue) == n-1
	})
	// The write is in flight: the lock is free, and nothing is applied yet.
	if _, ok, _ := c.key("k0"); ok {
		t.Error("a transition is visible before its write returned")
	}
	if got := c.job().GetRunId(); got != "job" {
		t.Errorf("GetJob during a write = %q", got)
	}
	close(release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("proposal %d: %v", i, err)
		}
		if _, ok, _ := c.key(fmt.Sprint("k", i)); !ok {
			t.Errorf("key k%d not applied", i)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.appends != 2 {
		t.Errorf("%d proposals took %d writes, want 2 (the held one, then the rest together)", n, st.appends)
	}
	if got := st.Len(); got != n+1 { // and the configure record
		t.Errorf("journal holds %d records, want %d", got, n+1)
	}
}

// TestStoreFailureStopsCommits: once the store refuses a write, the batch is
// not applied, every later proposal fails with the same error, and the
// master is told (storeFailed) so that it stops.
func TestStoreFailureStopsCommits(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	disk := errors.New("disk on fire")
	st := &gatedStore{Memory: store.NewMemory(), fail: disk}
	c := newCore("job", st)
	failed, cause := c.storeFailed()
	if err := c.apply(ctx, &jobstate.Event{Type: jobstate.EventSetKey, Time: now, Key: "k", Value: []byte("v")}); !errors.Is(err, disk) {
		t.Fatalf("apply = %v, want the store's error", err)
	}
	select {
	case <-failed:
	default:
		t.Fatal("storeFailed not closed")
	}
	if !errors.Is(cause(), disk) {
		t.Errorf("cause = %v", cause())
	}
	st.mu.Lock()
	st.fail = nil
	st.mu.Unlock()
	if err := c.apply(ctx, &jobstate.Event{Type: jobstate.EventSetKey, Time: now, Key: "k2", Value: []byte("v")}); !errors.Is(err, disk) {
		t.Errorf("apply after a store failure = %v, want the first error again", err)
	}
	if _, ok, _ := c.key("k"); ok {
		t.Error("a transition that was not persisted was applied")
	}
}

// drive runs a seeded mix of every kind of transition against c: joins,
// failures and new rounds, keys, datasets, leases, completions, node losses
// and timeouts.
func drive(t *testing.T, c *core, seed uint64, steps int) (leased int) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 1))
	now := time.Unix(1000, 0)
	nodes := []string{"a", "b", "c"}
	join := func(id string) {
		req, _, err := validateJoin(joinReq(id, rdzvConfig(2, 2)).Msg)
		if err != nil {
			t.Fatal(err)
		}
		held := []jobstate.MemorySnapshot{{LocalRank: 0, Step: int64(rng.IntN(5)), Rank: 0, WorldSize: 2, Mode: jobstate.ModeReplicated}}
		_, _, _ = c.join(ctx, req, memoryReport{snaps: held}, 0, now)
	}
	ds := shard.Dataset{Name: "d", Size: 1000, BatchSize: 10, ShardSize: 50, Epochs: 3, Shuffle: true, Seed: 3, Mode: shard.Leased, LeaseTimeout: time.Minute}
	_, _ = c.shardCall(ctx, &jobstate.Event{Type: jobstate.EventRegisterDataset, Time: now, Shard: &jobstate.ShardEvent{Dataset: "d", Spec: &ds}})
	var held []uint64
	for i := 0; i < steps; i++ {
		now = now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
		id := nodes[rng.IntN(len(nodes))]
		worker := id + "/0"
		switch rng.IntN(8) {
		case 0, 1:
			join(id)
		case 2:
			round := int(c.job().GetRound())
			_ = c.apply(ctx, &jobstate.Event{Type: jobstate.EventWorkerFailed, Time: now, Node: id, Round: round})
		case 3:
			_ = c.apply(ctx, &jobstate.Event{Type: jobstate.EventSetKey, Time: now, Key: fmt.Sprint("k", rng.IntN(4)), Value: []byte{byte(i)}})
		case 4:
			out, err := c.shardCall(ctx, &jobstate.Event{Type: jobstate.EventLease, Time: now, Shard: &jobstate.ShardEvent{Dataset: "d", Worker: worker, Max: 1 + rng.IntN(3)}})
			if err == nil {
				for _, l := range out.Lease.Shards {
					held = append(held, l.ID)
					leased++
				}
			}
		case 5:
			if len(held) > 0 {
				k := rng.IntN(len(held))
				_, _ = c.shardCall(ctx, &jobstate.Event{Type: jobstate.EventCompleteShards, Time: now, Shard: &jobstate.ShardEvent{Dataset: "d", Worker: worker, Results: []jobstate.ShardResult{{ID: held[k], OK: rng.IntN(4) > 0}}}})
				held = append(held[:k], held[k+1:]...)
			}
		case 6:
			_ = c.tick(ctx, now)
		case 7:
			if rng.IntN(4) == 0 {
				_ = c.apply(ctx, &jobstate.Event{Type: jobstate.EventNodeLost, Time: now, Node: id, Reason: "test"})
			}
		}
	}
	return leased
}

func stateOf(t *testing.T, c *core) string {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.marshalStateLocked()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSnapshotKeepsReplayIdentical: a master restored from a snapshot taken
// after any record plus the records after it has the same state as one that
// replays the whole journal, and as the master that wrote it.
func TestSnapshotKeepsReplayIdentical(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	for seed := uint64(1); seed <= 20; seed++ {
		full := store.NewMemory()
		live := configuredCore(t, full, now)
		leased := drive(t, live, seed, 300)
		want := stateOf(t, live)
		if leased == 0 || live.job().GetRound() < 2 {
			t.Fatalf("seed %d: the drive did too little to test anything: round %d, %d shards leased", seed, live.job().GetRound(), leased)
		}
		contents, err := full.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		recs := contents.Records
		for k := 0; k <= len(recs); k += 1 + len(recs)/25 {
			prefix := store.NewMemory()
			_ = prefix.Append(ctx, recs[:k])
			at := newCore("job", prefix)
			if _, err := at.restore(ctx, now); err != nil {
				t.Fatalf("seed %d: replay %d records: %v", seed, k, err)
			}
			compacted := store.NewMemory()
			_ = compacted.Snapshot(ctx, []byte(stateOf(t, at)))
			_ = compacted.Append(ctx, recs[k:])
			got := newCore("job", compacted)
			if _, err := got.restore(ctx, now); err != nil {
				t.Fatalf("seed %d: restore from a snapshot at record %d: %v", seed, k, err)
			}
			if diff := cmp.Diff(want, stateOf(t, got)); diff != "" {
				t.Fatalf("seed %d: snapshot at record %d of %d: state differs (-want +got):\n%s", seed, k, len(recs), diff)
			}
		}
	}
}

// TestSnapshotsBoundTheJournal: the committer snapshots every so many
// records, dropping the journal before the snapshot, and a restart from the
// compacted store rebuilds the same state.
func TestSnapshotsBoundTheJournal(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	st := store.NewMemory()
	c := configuredCore(t, st, now)
	c.commits.every = 2000
	drive(t, c, 9, 400)
	contents, _ := st.Load(ctx)
	size := 0
	for _, r := range contents.Records {
		size += len(r)
	}
	if limit := max(2000, len(contents.Snapshot)); size >= limit {
		t.Errorf("journal holds %d bytes after the snapshot, want less than %d", size, limit)
	}
	if contents.Snapshot == nil {
		t.Fatal("no snapshot was taken")
	}
	restored := newCore("job", st)
	if _, err := restored.restore(ctx, now); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(stateOf(t, c), stateOf(t, restored)); diff != "" {
		t.Errorf("restored state differs (-live +restored):\n%s", diff)
	}
}

// TestSnapshotOfAnotherJob is refused with the job's name.
func TestSnapshotOfAnotherJob(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	c := configuredCore(t, st, time.Unix(1000, 0))
	_ = st.Snapshot(ctx, []byte(stateOf(t, c)))
	_, err := newCore("other", st).restore(ctx, time.Unix(1000, 0))
	if err == nil || !strings.Contains(err.Error(), `belongs to job "job"`) {
		t.Fatalf("restore another job's state: %v", err)
	}
}
