package master

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roverml/rover/internal/master/jobstate"
	"github.com/roverml/rover/internal/store"
)

// TestApplyAllCommitsAGroupInOrder: events proposed together reach the
// journal together and in their order, in one write, even while another
// write is in flight and other proposals queue around them; each event's
// error comes back in its place (a rejected event is not journaled).
func TestApplyAllCommitsAGroupInOrder(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	st := &gatedStore{Memory: store.NewMemory()}
	c := configuredCore(t, st, now)
	setKey := func(k string) *jobstate.Event {
		return &jobstate.Event{Type: jobstate.EventSetKey, Time: now, Key: k, Value: []byte("v")}
	}

	entered, release := st.hold()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := c.apply(ctx, setKey("held")); err != nil {
			t.Errorf("held proposal: %v", err)
		}
	})
	<-entered
	const n = 8
	group := make([]*jobstate.Event, n)
	for i := range group {
		group[i] = setKey(fmt.Sprint("group-", i))
	}
	group[3].Value = make([]byte, maxKeyBytes+1) // over the key-value store's limits
	var errs []error
	wg.Go(func() { errs = c.applyAll(ctx, group) })
	wg.Go(func() {
		if err := c.apply(ctx, setKey("other")); err != nil {
			t.Errorf("other proposal: %v", err)
		}
	})
	waitFor(t, "the group and the other proposal to queue", func() bool {
		c.commits.mu.Lock()
		defer c.commits.mu.Unlock()
		return len(c.commits.queue) == (n-1)+1
	})
	st.mu.Lock()
	st.appends = 0
	st.mu.Unlock()
	close(release)
	wg.Wait()

	for i, err := range errs {
		if (err != nil) != (i == 3) {
			t.Errorf("event %d: error %v", i, err)
		}
	}
	got, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string // of the group, and "|" where another record comes between
	for _, rec := range got.Records {
		e, err := jobstate.UnmarshalEvent(rec)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case e.Type == jobstate.EventSetKey && strings.HasPrefix(e.Key, "group-"):
			keys = append(keys, e.Key)
		case len(keys) > 0:
			keys = append(keys, "|")
		}
	}
	for len(keys) > 0 && keys[len(keys)-1] == "|" {
		keys = keys[:len(keys)-1] // records after the group
	}
	want := []string{"group-0", "group-1", "group-2", "group-4", "group-5", "group-6", "group-7"}
	if got := strings.Join(keys, " "); got != strings.Join(want, " ") {
		t.Errorf("journaled %s, want %s together and in order", got, strings.Join(want, " "))
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.appends != 1 {
		t.Errorf("the group and the other proposal took %d writes after the held one, want 1", st.appends)
	}
}
