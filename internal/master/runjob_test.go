package master_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/roverml/rover/internal/master"
	"github.com/roverml/rover/internal/runconfig"
)

// TestRunJob: RunJob returns how the job ended once it ended (here
// cancelled by its user), and ctx's error when ctx ends first; either way
// the master has stopped serving (Run returned) by then.
func TestRunJob(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	newMaster := func(t *testing.T) *master.Master {
		// A job of one node, configured before any agent joins, as `rover
		// master --nnodes 1` configures it.
		preset := runconfig.Policy{MinNodes: 1, MaxNodes: 1, NodeUnit: 1,
			LastCallTimeout: time.Second, JoinTimeout: time.Hour, HeartbeatTimeout: time.Hour}.JobConfig()
		m, err := master.New(context.Background(), master.Config{Listen: "127.0.0.1:0", Token: "run-job-token-0123456789",
			Preset: &preset, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	type result struct {
		out master.Outcome
		err error
	}
	runJob := func(ctx context.Context, m *master.Master) <-chan result {
		done := make(chan result, 1)
		go func() { out, err := m.RunJob(ctx, 0); done <- result{out, err} }()
		return done
	}
	wait := func(t *testing.T, done <-chan result) result {
		select {
		case r := <-done:
			return r
		case <-time.After(time.Minute): // only turns a hang into a failure
			t.Fatal("RunJob did not return")
			return result{}
		}
	}

	t.Run("the job ends", func(t *testing.T) {
		m := newMaster(t)
		done := runJob(context.Background(), m)
		if err := m.Cancel(context.Background(), "stopped by a test"); err != nil {
			t.Fatal(err)
		}
		r := wait(t, done)
		if r.err != nil || r.out.Succeeded || r.out.Reason == "" {
			t.Errorf("RunJob = %+v, %v; want a failed outcome with its reason", r.out, r.err)
		}
		if _, err := m.WaitFinished(context.Background()); err != nil {
			t.Errorf("WaitFinished after RunJob = %v, want the outcome (Run returned cleanly)", err)
		}
	})
	t.Run("ctx ends first", func(t *testing.T) {
		m := newMaster(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := runJob(ctx, m)
		cancel()
		if r := wait(t, done); !errors.Is(r.err, context.Canceled) {
			t.Errorf("RunJob = %+v, %v; want context.Canceled", r.out, r.err)
		}
		<-m.NodesGone()
		if _, err := m.WaitFinished(context.Background()); !errors.Is(err, master.ErrStopped) {
			t.Errorf("WaitFinished after RunJob = %v, want ErrStopped: Run has returned", err)
		}
	})
}
