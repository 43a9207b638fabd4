// Package retry is the one place that decides how long to wait between
// attempts: exponential backoff with full jitter, under an injected clock, and
// a loop that retries a call until it succeeds, fails for good, or runs out of
// time. It knows nothing about RPCs: callers say which errors are worth
// another try.
//
//	b := retry.Backoff{Initial: 100 * time.Millisecond, Max: 3 * time.Second}
//	err := retry.Do(ctx, retry.Policy{Backoff: b, Limit: time.Minute}, client.Retryable,
//		func(ctx context.Context) error { return call(ctx) })
package retry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Clock tells the time and waits. Tests inject a fake one.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

// WallClock is the real clock.
type WallClock struct{}

// Now returns the wall-clock time.
func (WallClock) Now() time.Time { return time.Now() }

// After waits for d of wall-clock time.
func (WallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Backoff is an exponential backoff: attempt n (from 0) waits a random time
// in [d/2, d], where d = Initial * 2^n capped at Max. Half of the delay is
// jittered so that agents that lost the master at the same moment do not all
// come back at the same moment, and none retries faster than half the curve.
type Backoff struct {
	Initial time.Duration // default 100ms
	Max     time.Duration // default 3s
	// Rand returns a float in [0, 1); default math/rand/v2.Float64.
	Rand func() float64
}

// Delay returns how long to wait before retry number attempt (from 0).
func (b Backoff) Delay(attempt int) time.Duration {
	initial, maxDelay := b.Initial, b.Max
	if initial <= 0 {
		initial = 100 * time.Millisecond
	}
	if maxDelay <= 0 {
		maxDelay = 3 * time.Second
	}
	maxDelay = max(maxDelay, initial)
	d := initial
	for i := 0; i < attempt && d < maxDelay; i++ {
		d *= 2
	}
	d = min(d, maxDelay)
	r := b.Rand
	if r == nil {
		r = rand.Float64
	}
	return d/2 + time.Duration(r()*float64(d/2))
}

// Policy says how Do retries.
type Policy struct {
	Backoff Backoff
	// Limit is how long Do keeps trying from its first attempt; zero means
	// until ctx ends. An attempt is never started past the limit; the last
	// one starts at the limit.
	Limit time.Duration
	// Clock defaults to WallClock.
	Clock Clock
}

// ErrLimit is wrapped with the last error when Do gives up at its limit.
var ErrLimit = errors.New("retry limit reached")

// Do calls f until it returns nil, an error that retryable rejects, or the
// policy's limit passes (then the last error, wrapped with ErrLimit), or ctx
// ends (then the last error, or ctx's error before any attempt). A nil
// retryable retries every error.
func Do(ctx context.Context, p Policy, retryable func(error) bool, f func(context.Context) error) error {
	clock := p.Clock
	if clock == nil {
		clock = WallClock{}
	}
	var deadline time.Time
	if p.Limit > 0 {
		deadline = clock.Now().Add(p.Limit)
	}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		err := f(ctx)
		if err == nil || (retryable != nil && !retryable(err)) {
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		wait := p.Backoff.Delay(attempt)
		if !deadline.IsZero() {
			left := deadline.Sub(clock.Now())
			if left <= 0 {
				return fmt.Errorf("%w: %w", ErrLimit, err)
			}
			// The last attempt is made at the limit itself, so that a call
			// that would succeed just before it is not given up on early.
			wait = min(wait, left)
		}
		select {
		case <-clock.After(wait):
		case <-ctx.Done():
			return err
		}
	}
}
