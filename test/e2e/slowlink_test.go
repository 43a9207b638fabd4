package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// TestStragglerSlowLink runs the DDP example (unchanged; its flash
// checkpoint saves every step report progress) on three nodes of
// one worker each, every node in a network namespace of its own; once
// every node has reported steps with its link's round trip, one node's
// link is shaped with tc to 4 megabits a second and 2 ms each way. The
// slow node computes and waits in its collectives like the others (no rule
// of CPU or compute time can see it), but every connection of its workers
// has a long round trip, where the other two nodes have a short one
// between them: the master must name it a straggler (GetJob and `rover
// status`), and never a healthy node, checked at every poll. The node of
// rank 0 (whose TCPStore every worker connects to) and another take turns
// as the slow one.
func TestStragglerSlowLink(t *testing.T) {
	for _, slow := range []int{0, 2} {
		t.Run(nodeName(slow), func(t *testing.T) { stragglerSlowLink(t, slow) })
	}
}

func stragglerSlowLink(t *testing.T, slow int) {
	dir := t.TempDir()
	n := newNetns(t, 3)
	c := newCheckCluster(t, n, fmt.Sprintf("slowlink-%d", slow))
	script := filepath.Join(repoRoot, "examples", "ddp", "train.py")
	for i := range 3 {
		c.agentIn(n, i, nodeName(i), "--nnodes", "3", "--node-rank", fmt.Sprint(i), "--nproc-per-node", "1",
			"--rdzv-conf", rdzvConf, "--max-restarts", "0", "--checkpoint-dir", filepath.Join(dir, "store"), "--checkpoint-keep", "2",
			script, "--flash", "--steps", "100000", "--ckpt-every", "0", "--step-sleep", "0.02",
			"--ckpt", filepath.Join(dir, "ckpt.pt"), "--out", filepath.Join(dir, "out.json"))
	}
	want := nodeName(slow)
	var p *roverv1.JobProgress
	pollJob := stragglerPoll(t, c, want, logLinkTimes)
	poll := func() { p = pollJob() }
	start, logged := time.Now(), false
	waitFor(t, 3*time.Minute, "every node to report a few steps with its link's round trip", func() bool {
		poll()
		if !logged && time.Since(start) > time.Minute {
			logged = true
			logLinkTimes(t, p)
		}
		k := 0
		for _, nd := range p.GetNodes() {
			if nd.GetSamples() >= 3 && nd.GetLinkRttSeconds() > 0 {
				k++
			}
		}
		return k == 3
	})
	logLinkTimes(t, p)
	qdisc := n.slow(slow, "2ms", "4mbit")
	shaped := time.Now()
	waitFor(t, 3*time.Minute, "the master to name "+want+" a straggler", func() bool {
		poll()
		return slices.Equal(p.GetStragglers(), []string{want})
	})
	named := time.Since(shaped)
	logLinkTimes(t, p)
	out, err := exec.Command(roverBin, "status", "--master", c.addr, "--token-file", c.tokenFile).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "stragglers: "+want) || !strings.Contains(string(out), "LINK RTT MS") {
		t.Errorf("rover status (%v) does not name %s with the links' round trips:\n%s", err, want, out)
	}
	if !strings.Contains(p.GetStragglerReason(), "a slow link") {
		t.Errorf("straggler reason %q: want the slow link named", p.GetStragglerReason())
	}
	t.Logf("%s's link shaped with %s to 4mbit: named %s later: %s", want, qdisc, named.Round(100*time.Millisecond), p.GetStragglerReason())
}

func logLinkTimes(t *testing.T, p *roverv1.JobProgress) {
	t.Helper()
	for _, nd := range p.GetNodes() {
		t.Logf("node %s: %.4f s/step wall, %.4f busy, %.4f compute, %.4f wait, link %.2f ms, %d samples, straggler %v",
			nd.GetNodeId(), nd.GetStepSeconds(), nd.GetBusySeconds(), nd.GetComputeSeconds(), nd.GetWaitSeconds(),
			1e3*nd.GetLinkRttSeconds(), nd.GetSamples(), nd.GetStraggler())
	}
}
