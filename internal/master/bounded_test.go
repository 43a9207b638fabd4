package master

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/store"
)

// boundedStore is a store whose journal holds at most limit bytes between
// snapshots, as kubestore's does: an Append that does not fit fails with
// store.ErrFull and writes nothing.
type boundedStore struct {
	Store
	limit int

	mu    sync.Mutex
	bytes int
	full  int // Appends refused
}

func (b *boundedStore) Append(ctx context.Context, recs [][]byte) error {
	n := 0
	for _, r := range recs {
		n += len(r)
	}
	b.mu.Lock()
	if b.bytes+n > b.limit {
		b.full++
		b.mu.Unlock()
		return fmt.Errorf("%d bytes: %w", n, store.ErrFull)
	}
	b.mu.Unlock()
	if err := b.Store.Append(ctx, recs); err != nil {
		return err
	}
	b.mu.Lock()
	b.bytes += n
	b.mu.Unlock()
	return nil
}

func (b *boundedStore) Snapshot(ctx context.Context, state []byte) error {
	if err := b.Store.Snapshot(ctx, state); err != nil {
		return err
	}
	b.mu.Lock()
	b.bytes = 0
	b.mu.Unlock()
	return nil
}

// TestFullJournalSnapshots: a store that refuses an Append with ErrFull
// gets a snapshot and the Append again; a batch that does not fit even then
// is committed in halves; a restart rebuilds the same state.
func TestFullJournalSnapshots(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	mem := store.NewMemory()
	gated := &gatedStore{Memory: mem}
	bounded := &boundedStore{Store: gated, limit: 3000}
	c := configuredCore(t, bounded, now)
	drive(t, c, 5, 300)

	// Twenty transitions of 400 bytes queue behind a held write: their
	// batch (8000 bytes) does not fit in an empty journal.
	entered, release := gated.hold()
	var wg sync.WaitGroup
	errs := make([]error, 21)
	wg.Go(func() {
		errs[20] = c.apply(ctx, &jobstate.Event{Type: jobstate.EventSetKey, Time: now, Key: "first", Value: []byte("v")})
	})
	<-entered
	for i := range 20 {
		wg.Go(func() {
			errs[i] = c.apply(ctx, &jobstate.Event{Type: jobstate.EventSetKey, Time: now, Key: fmt.Sprint("big", i), Value: make([]byte, 400)})
		})
	}
	waitFor(t, "20 proposals queued", func() bool {
		c.commits.mu.Lock()
		defer c.commits.mu.Unlock()
		return len(c.commits.queue) == 20
	})
	close(release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("transition %d: %v", i, err)
		}
	}
	if bounded.full == 0 {
		t.Fatal("the store never said its journal was full")
	}
	restored := newCore("job", mem)
	if _, err := restored.restore(ctx, now); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(stateOf(t, c), stateOf(t, restored)); diff != "" {
		t.Errorf("restored state differs (-live +restored):\n%s", diff)
	}
	// A single transition larger than the journal stops the master.
	err := c.apply(ctx, &jobstate.Event{Type: jobstate.EventSetKey, Time: now, Key: "huge", Value: make([]byte, 4000)})
	if err == nil || !errors.Is(err, store.ErrFull) {
		t.Errorf("a transition larger than the journal: %v, want ErrFull", err)
	}
}
