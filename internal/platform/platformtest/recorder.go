package platformtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/roverml/rover/internal/platform"
)

// RecordTimeout bounds a Recorder's waits: a deadline that only turns a
// hang into a failure.
const RecordTimeout = 30 * time.Second

// Recorder collects the events a platform's Watch delivers, for tests of
// platforms.
type Recorder struct {
	mu     sync.Mutex
	events []platform.Event
	ch     chan struct{}
}

// Record watches p until the test ends, when it checks that Watch returned
// context.Canceled.
func Record(t *testing.T, p platform.Platform) *Recorder {
	t.Helper()
	r := &Recorder{ch: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- p.Watch(ctx, func(e platform.Event) {
			r.mu.Lock()
			r.events = append(r.events, e)
			r.mu.Unlock()
			select {
			case r.ch <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch returned %v, want context.Canceled", err)
		}
	})
	return r
}

// WaitFor waits until an event matching ok has arrived and returns the
// first such.
func (r *Recorder) WaitFor(t *testing.T, what string, ok func(platform.Event) bool) platform.Event {
	t.Helper()
	deadline := time.After(RecordTimeout)
	for {
		r.mu.Lock()
		i := slices.IndexFunc(r.events, ok)
		var e platform.Event
		if i >= 0 {
			e = r.events[i]
		}
		r.mu.Unlock()
		if i >= 0 {
			return e
		}
		select {
		case <-r.ch:
		case <-deadline:
			t.Fatalf("no event %s within %v; got %v", what, RecordTimeout, r.All())
		}
	}
}

// WaitKind waits for an event of id and kind.
func (r *Recorder) WaitKind(t *testing.T, id string, kind platform.EventKind) platform.Event {
	t.Helper()
	return r.WaitFor(t, fmt.Sprintf("%v of %s", kind, id), func(e platform.Event) bool { return e.NodeID == id && e.Kind == kind })
}

// All returns the events so far without their times.
func (r *Recorder) All() []platform.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.events)
	for i := range out {
		out[i].Time = time.Time{}
	}
	return out
}

// Of returns the events of id so far, without their times.
func (r *Recorder) Of(id string) []platform.Event {
	return slices.DeleteFunc(r.All(), func(e platform.Event) bool { return e.NodeID != id })
}
