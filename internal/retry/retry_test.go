package retry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/roverml/rover/internal/retry/retrytest"
)

func TestDelayBounds(t *testing.T) {
	for _, r := range []float64{0, 0.5, 0.999999} {
		b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Rand: func() float64 { return r }}
		for attempt, full := range []time.Duration{100, 200, 400, 800, 1000, 1000, 1000} {
			full *= time.Millisecond
			if attempt > 4 {
				full = time.Second
			}
			d := b.Delay(attempt)
			if d < full/2 || d > full {
				t.Errorf("rand %v: Delay(%d) = %v, want within [%v, %v]", r, attempt, d, full/2, full)
			}
		}
	}
	if d := (Backoff{}).Delay(1000); d > 3*time.Second || d < 1500*time.Millisecond {
		t.Errorf("default Delay(1000) = %v, want within [1.5s, 3s]", d)
	}
}

func TestDoStopsOnSuccessAndPermanentErrors(t *testing.T) {
	transient, permanent := errors.New("transient"), errors.New("permanent")
	isTransient := func(err error) bool { return errors.Is(err, transient) }
	tests := []struct {
		name    string
		results []error
		want    error
		calls   int
	}{
		{"first try", []error{nil}, nil, 1},
		{"after transient errors", []error{transient, transient, nil}, nil, 3},
		{"permanent", []error{transient, permanent, nil}, permanent, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			p := Policy{Clock: retrytest.NewClock(time.Time{}), Limit: time.Hour}
			err := Do(context.Background(), p, isTransient, func(context.Context) error {
				err := tt.results[calls]
				calls++
				return err
			})
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Errorf("Do = %v, want %v", err, tt.want)
			}
			if calls != tt.calls {
				t.Errorf("calls = %d, want %d", calls, tt.calls)
			}
		})
	}
}

func TestDoGivesUpAtTheLimit(t *testing.T) {
	clock := retrytest.NewClock(time.Unix(1000, 0))
	start := clock.Now()
	down := errors.New("down")
	calls := 0
	p := Policy{Backoff: Backoff{Initial: time.Second, Max: 4 * time.Second}, Limit: 30 * time.Second, Clock: clock}
	err := Do(context.Background(), p, nil, func(context.Context) error { calls++; return down })
	if !errors.Is(err, ErrLimit) || !errors.Is(err, down) {
		t.Fatalf("Do = %v, want ErrLimit wrapping the last error", err)
	}
	if elapsed := clock.Now().Sub(start); elapsed != 30*time.Second {
		t.Errorf("waited %v in all, want the 30s limit: the last attempt is made at the limit", elapsed)
	}
	if calls < 8 {
		t.Errorf("only %d calls within the 30s limit, want at least 8 (waits of at most 4s)", calls)
	}
	for i, d := range clock.Waited() {
		if d > 4*time.Second {
			t.Errorf("wait %d was %v, past Max", i, d)
		}
	}
}

func TestDoEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := Do(ctx, Policy{Clock: retrytest.NewClock(time.Time{})}, nil, func(context.Context) error {
		calls++
		if calls == 3 {
			cancel()
		}
		return errors.New("down")
	})
	if err == nil || calls != 3 {
		t.Errorf("Do = %v after %d calls, want an error after 3", err, calls)
	}
	if err := Do(ctx, Policy{}, nil, func(context.Context) error { t.Error("called after ctx ended"); return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("Do on an ended ctx = %v, want context.Canceled", err)
	}
}

// TestDoCatchesARecoveryJustBeforeTheLimit: a call that starts working
// shortly before the limit, when the next backoff would pass it, succeeds.
func TestDoCatchesARecoveryJustBeforeTheLimit(t *testing.T) {
	tests := []struct {
		name    string
		upAfter time.Duration // the call fails until this much time has passed
		wantErr bool
	}{
		{"early", 2 * time.Second, false},
		{"just before the limit", 29*time.Second + 900*time.Millisecond, false},
		{"at the limit", 30 * time.Second, false},
		{"after the limit", 30*time.Second + time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := retrytest.NewClock(time.Unix(1000, 0))
			start := clock.Now()
			down := errors.New("down")
			p := Policy{Backoff: Backoff{Initial: time.Second, Max: 8 * time.Second, Rand: func() float64 { return 0.99 }},
				Limit: 30 * time.Second, Clock: clock}
			err := Do(context.Background(), p, nil, func(context.Context) error {
				if clock.Now().Sub(start) < tt.upAfter {
					return down
				}
				return nil
			})
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Errorf("Do = %v, want error: %v", err, tt.wantErr)
			}
		})
	}
}
