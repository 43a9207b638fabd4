package master

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/api/rover/v1/roverv1connect"
	"github.com/roverml/rover/internal/client"
	"github.com/roverml/rover/internal/jobconfig"
)

// runMaster runs a master on cfg.StateDir until the returned stop.
func runMaster(t *testing.T, cfg Config) (roverv1connect.MasterServiceClient, func()) {
	t.Helper()
	cfg.Listen, cfg.Token = "127.0.0.1:0", testToken
	ctx, cancel := context.WithCancel(context.Background())
	m, err := New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	hc := client.NewHTTPClient()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		hc.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("master Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return client.New(hc, m.Addr(), testToken), stop
}

// TestDeclaredStorageIsTheJobs: a job's first declaration sets its
// checkpoint storage for every node, a different one is refused naming
// both, and a restarted master keeps the declaration (from its journal).
func TestDeclaredStorageIsTheJobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stateDir := t.TempDir()
	store, other := filepath.Join(t.TempDir(), "ckpts"), filepath.Join(t.TempDir(), "other")
	c, stop := runMaster(t, Config{Job: "j", StateDir: stateDir})
	var streams []session
	for i, id := range []string{"a", "b"} {
		streams = append(streams, openSessionRank(ctx, t, c, id, i, rdzvConfig(2, 2)))
	}
	for _, s := range streams {
		nextView(t, s, func(v *roverv1.NodeView) bool { return v.GetAssignment().GetRound() == 1 })
	}
	declare := func(c roverv1connect.MasterServiceClient, node, url string, keep *int32) (*roverv1.CheckpointStorage, error) {
		r, err := c.DeclareCheckpoint(ctx, connect.NewRequest(&roverv1.DeclareCheckpointRequest{NodeId: node, Url: url, Keep: keep}))
		if err != nil {
			return nil, err
		}
		return r.Msg.GetCheckpoint(), nil
	}
	three := int32(3)
	want := &roverv1.CheckpointStorage{Url: store, Keep: 3}
	if got, err := declare(c, "a", store, &three); err != nil || got.GetUrl() != store || got.GetKeep() != 3 || got.GetKeepDefault() {
		t.Fatalf("first declaration: %v, %v; want %v", got, err, want)
	}
	if got, err := declare(c, "b", store, nil); err != nil || got.GetUrl() != store || got.GetKeep() != 3 {
		t.Fatalf("the same location from the other node: %v, %v; want %v", got, err, want)
	}
	refused := func(c roverv1connect.MasterServiceClient, what string) {
		t.Helper()
		_, err := declare(c, "b", other, nil)
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), other) ||
			!strings.Contains(err.Error(), "checkpoints go to "+store) {
			t.Errorf("%s: another location: %v, want FailedPrecondition naming %s and the job's %s", what, err, other, store)
		}
		two := int32(2)
		if _, err := declare(c, "a", store, &two); connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "the job keeps 3") {
			t.Errorf("%s: another keep: %v, want FailedPrecondition naming the job's keep 3", what, err)
		}
	}
	refused(c, "before the restart")
	for _, bad := range []struct{ node, url string }{
		{"a", "relative/dir"},
		{"a", "s3://bucket/run?endpoint=http://evil"},
		{"", store},
	} {
		if _, err := declare(c, bad.node, bad.url, nil); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("declare %q from node %q: %v, want InvalidArgument", bad.url, bad.node, err)
		}
	}
	if _, err := declare(c, "stranger", store, nil); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("declaration from a node that never joined: %v, want NotFound", err)
	}

	stop()
	c, _ = runMaster(t, Config{Job: "j", StateDir: stateDir})
	r, err := c.Join(ctx, joinReq("a", rdzvConfig(2, 2)))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Msg.GetCheckpoint(); got.GetUrl() != store || got.GetKeep() != 3 {
		t.Errorf("after the restart a join answers storage %v, want %v", got, want)
	}
	refused(c, "after the restart")
	if got, err := declare(c, "a", store, &three); err != nil || got.GetUrl() != store {
		t.Errorf("the job's own declaration after the restart: %v, %v", got, err)
	}
}

// TestAgentKeepAgrees: an agent that gave no --checkpoint-keep takes the
// job's keep, whatever set it; one that gave another is refused.
func TestAgentKeepAgrees(t *testing.T) {
	job := jobconfig.CheckpointStorage{URL: "/ckpt/run1", Keep: 3, Declared: true}
	if errs := checkpointAgrees(job, jobconfig.CheckpointStorage{URL: "/ckpt/run1", Keep: 1, KeepDefault: true}); len(errs) > 0 {
		t.Errorf("an agent with the default keep: %v, want it to take the job's", errs)
	}
	errs := checkpointAgrees(job, jobconfig.CheckpointStorage{URL: "/ckpt/run1", Keep: 1})
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "--checkpoint-keep=1, but the job keeps 3") {
		t.Errorf("an agent with another keep: %v, want a refusal naming both", errs)
	}
}
