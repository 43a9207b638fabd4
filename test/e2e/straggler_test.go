package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/client"
)

// TestStragglerNamedAtRuntime runs the DDP example on two nodes, one of
// which burns 50 ms of CPU in every step (the example's test-only
// DDP_EXAMPLE_SLOW_GROUP_RANK). In synchronous DDP every rank's wall-clock
// step time is the same (the fast ones wait for the slow one in their
// collectives), so the master names the slow node from its busy time per
// step: GetJob, and so `rover status`, names it, and only it.
func TestStragglerNamedAtRuntime(t *testing.T) {
	dir := t.TempDir()
	c := newCluster(t, "ddp")
	c.env = []string{"DDP_EXAMPLE_SLOW_GROUP_RANK=1", "DDP_EXAMPLE_SLOW_SECONDS=0.05"}
	for _, name := range []string{"node0", "node1"} {
		args := append([]string{"--nnodes", "2", "--node-rank", name[len(name)-1:]},
			trainArgs(dir, "--flash", filepath.Join(dir, "store"), "--steps", "100000", "--ckpt-every", "0")...)
		c.agent(name, args...)
	}
	token, err := os.ReadFile(c.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	hc := client.NewHTTPClient()
	defer hc.CloseIdleConnections()
	mc := client.New(hc, c.addr, strings.TrimSpace(string(token)))
	job := func() *roverv1.GetJobResponse {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := mc.GetJob(ctx, connect.NewRequest(&roverv1.GetJobRequest{}))
		if err != nil {
			t.Fatalf("GetJob: %v", err)
		}
		return r.Msg
	}
	var first time.Time
	var p *roverv1.JobProgress
	waitFor(t, 3*time.Minute, "the master to name node1 a straggler", func() bool {
		p = job().GetProgress()
		if first.IsZero() && p.GetStep() >= 1 {
			first = time.Now()
		}
		return len(p.GetStragglers()) > 0
	})
	named := time.Since(first)
	if !slices.Equal(p.GetStragglers(), []string{"node1"}) {
		t.Fatalf("stragglers %v, want [node1]: %s", p.GetStragglers(), p.GetStragglerReason())
	}
	for _, n := range p.GetNodes() {
		t.Logf("node %s (rank %d): %.4f s/step wall, %.4f s/step busy, %d samples, straggler %v",
			n.GetNodeId(), n.GetNodeRank(), n.GetStepSeconds(), n.GetBusySeconds(), n.GetSamples(), n.GetStraggler())
	}
	out, err := exec.Command(roverBin, "status", "--master", c.addr, "--token-file", c.tokenFile).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "stragglers: node1") {
		t.Errorf("rover status (%v) does not name node1:\n%s", err, out)
	}
	waitFor(t, time.Minute, "the master's log to name node1", func() bool {
		out := c.master.out.String()
		return strings.Contains(out, `msg="straggler: a node's steps are much slower than the others'"`) && strings.Contains(out, " nodes=node1 ")
	})
	t.Logf("straggler named %s after the first step: %s", named.Round(10*time.Millisecond), p.GetStragglerReason())
}
