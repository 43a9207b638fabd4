package ckptsaver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/retry"
	"github.com/roverml/rover/internal/retry/retrytest"
)

// awayMaster answers CheckpointDurable with err until the clock reaches
// back, then succeeds.
type awayMaster struct {
	roverv1connect.MasterServiceClient
	clock *retrytest.Clock
	back  time.Time
	err   error
	calls int
}

func (m *awayMaster) CheckpointDurable(context.Context, *connect.Request[roverv1.CheckpointDurableRequest]) (*connect.Response[roverv1.CheckpointDurableResponse], error) {
	m.calls++
	if m.clock.Now().Before(m.back) {
		return nil, m.err
	}
	return connect.NewResponse(&roverv1.CheckpointDurableResponse{}), nil
}

// TestReportWaitsForTheMaster: a checkpoint's durable report waits for a
// master that is away for up to the heartbeat timeout, and fails at once
// when the master rejects it.
func TestReportWaitsForTheMaster(t *testing.T) {
	const timeout = time.Minute
	unavailable := connect.NewError(connect.CodeUnavailable, errors.New("connection refused"))
	invalid := connect.NewError(connect.CodeInvalidArgument, errors.New("bad path"))
	tests := []struct {
		name      string
		away      time.Duration // how long the master answers err
		err       error
		wantErr   error // nil, retry.ErrLimit, or the error itself
		manyCalls bool
	}{
		{"master there", 0, unavailable, nil, false},
		{"master back within the heartbeat timeout", 50 * time.Second, unavailable, nil, true},
		{"master back at the heartbeat timeout", timeout, unavailable, nil, true},
		{"master away past the heartbeat timeout", timeout + time.Second, unavailable, retry.ErrLimit, true},
		{"master rejects the report", time.Hour, invalid, invalid, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := retrytest.NewClock(time.Unix(1000, 0))
			start := clock.Now()
			m := &awayMaster{clock: clock, back: start.Add(tt.away), err: tt.err}
			// The agent's policy: retried while the master is
			// unreachable, up to the heartbeat timeout.
			policy := retry.Policy{Backoff: retry.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second}, Limit: timeout, Clock: clock}
			cfg := Config{Master: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Retry: func(ctx context.Context, f func(context.Context) error) error {
					return retry.Do(ctx, policy, client.Retryable, f)
				}}
			p := newPersister(nil, cfg, func() string { return "" })
			err := p.report(context.Background(), &roverv1.CheckpointDurableRequest{Step: 7, Rank: 1})
			if tt.wantErr == nil && err != nil || !errors.Is(err, tt.wantErr) {
				t.Fatalf("report = %v, want %v", err, tt.wantErr)
			}
			if waited := clock.Now().Sub(start); waited > timeout {
				t.Errorf("report waited %v, past the %v heartbeat timeout", waited, timeout)
			}
			if tt.manyCalls != (m.calls > 1) {
				t.Errorf("report called the master %d times", m.calls)
			}
		})
	}
}
