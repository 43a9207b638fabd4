// Package retrytest has a fake clock for tests of code that retries through
// package retry: it never sleeps, so a test of a minute of retries takes
// microseconds and cannot flake on a loaded machine.
package retrytest

import (
	"sync"
	"time"
)

// Clock advances only when waited on: After moves the time forward at once
// and returns a channel that already holds it. It records every wait.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	waited []time.Duration
}

// NewClock returns a clock that reads start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After advances the clock by d and returns a channel holding the new time.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.waited = append(c.waited, d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// Waited returns every wait so far, in order.
func (c *Clock) Waited() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waited...)
}
