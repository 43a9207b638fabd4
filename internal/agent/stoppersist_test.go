package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roverml/rover/internal/agent"
	"github.com/roverml/rover/internal/ckpt"
	"github.com/roverml/rover/internal/master"
	"github.com/roverml/rover/internal/testbuf"
)

// TestStoppedAgentPersistsMemory stops a job whose workers only ever saved
// to memory, each way a job is stopped from outside: the agent's context
// ends (what SIGTERM and SIGINT do), or the master ends the job (a user's
// cancel). Either way the agent persists the step its workers hold before
// it exits, and the master commits it: storage's latest is step 3.
func TestStoppedAgentPersistsMemory(t *testing.T) {
	worker := ckptWorker(t)
	for _, how := range []string{"agent stopped", "master cancelled the job"} {
		t.Run(how, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			agentCtx, stopAgent := context.WithCancelCause(ctx)
			defer stopAgent(nil)
			dir, store := t.TempDir(), filepath.Join(t.TempDir(), "ckpts")
			masters := make(chan *master.Master, 1)
			start := func(ctx context.Context, spec agent.EmbeddedMaster) (agent.RunningMaster, error) {
				preset := spec.Rendezvous
				tok := master.NewToken()
				m, err := master.New(ctx, master.Config{Listen: "127.0.0.1:0", Job: spec.Job, Token: tok, Preset: &preset,
					Logger: spec.Logger, Checkpoint: spec.Rendezvous.Checkpoint})
				if err != nil {
					return agent.RunningMaster{}, err
				}
				mctx, stop := context.WithCancel(context.WithoutCancel(ctx))
				done := make(chan struct{})
				go func() { defer close(done); _ = m.Run(mctx) }()
				masters <- m
				return agent.RunningMaster{Addr: m.Addr(), Token: tok, Stop: func() { stop(); <-done }}, nil
			}
			stderr := &testbuf.Buffer{}
			done := make(chan agentRun, 1)
			go func() {
				done <- runAgentWith(agentCtx, t, stderr, start, "--standalone", "--checkpoint-dir", store, "--nproc-per-node", "2",
					"--stop-grace-period", "5s", "--no-python", worker, "--out", dir, "--url", store, "--hold")
			}()
			m := <-masters
			for _, rank := range []string{"0", "1"} {
				waitForFile(ctx, t, filepath.Join(dir, "held-"+rank), stderr)
			}
			if how == "agent stopped" {
				stopAgent(errors.New("received terminated"))
			} else if err := m.Cancel(ctx, "the user stopped the job"); err != nil {
				t.Fatal(err)
			}
			<-done
			b, err := os.ReadFile(filepath.Join(store, ckpt.LatestKey))
			if err != nil || strings.TrimSpace(string(b)) != "3" {
				t.Errorf("storage's latest marker is %q (%v), want step 3, held in memory when the job stopped\n%s", b, err, stderr)
			}
			if strings.Contains(stderr.String(), "could not persist") {
				t.Errorf("the agent could not persist what memory held:\n%s", stderr)
			}
		})
	}
}

// waitForFile waits until path exists, or fails the test when ctx ends.
func waitForFile(ctx context.Context, t *testing.T, path string, log *testbuf.Buffer) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s did not appear: %v\n%s", path, ctx.Err(), log)
		case <-tick.C:
		}
	}
}
