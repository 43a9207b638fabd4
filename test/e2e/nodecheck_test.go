package e2e

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The pre-flight node check (docs/design/node-check.md) on real links:
// four nodes, each agent in its own network namespace, real torch (gloo)
// in the check program and in training. Faults are a link slowed with tc
// and a check program that crashes (ROVER_NODECHECK_TEST_CRASH, test-only).

// checkRdzvConf gives every agent time to join before the first round
// closes (--nnodes 3:4 would close on three after the last call).
const checkRdzvConf = "last_call_timeout=5s,join_timeout=120s,heartbeat_timeout=15s,disconnect_grace=2s"

// checkTrainArgs are the arguments of a small DDP job with the node check.
func checkTrainArgs(dir string, flags ...string) []string {
	script := filepath.Join(repoRoot, "examples", "ddp", "train.py")
	args := append(flags, "--nproc-per-node", "1", "--rdzv-conf", checkRdzvConf, "--max-restarts", "3", script,
		"--steps", "30", "--ckpt-every", "10", "--ckpt", filepath.Join(dir, "ckpt.pt"), "--out", filepath.Join(dir, "out.json"))
	return args
}

var (
	verdictRe  = regexp.MustCompile(`msg="node check verdict".* node=(\S+) verdict=(\S+) excluded=(\S+)`)
	finishedRe = regexp.MustCompile(`msg="node check finished".* stages=(\d+) .*took=(\S+)`)
)

// checkVerdicts reads the master's log: each node's last verdict ("passed",
// "straggler excluded", ...), and the first check's stages and wall time.
func checkVerdicts(t *testing.T, log string) (verdicts map[string]string, stages string, took time.Duration) {
	t.Helper()
	verdicts = map[string]string{}
	for _, m := range verdictRe.FindAllStringSubmatch(log, -1) {
		v := m[2]
		if m[3] == "true" {
			v += " excluded"
		}
		verdicts[m[1]] = v
	}
	m := finishedRe.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("the master did not log a finished node check:\n%s", log)
	}
	took, err := time.ParseDuration(m[2])
	if err != nil {
		t.Fatalf("node check took=%q: %v", m[2], err)
	}
	return verdicts, m[1], took
}

// runCheckedJob runs four agents in namespaces of n and waits for them;
// want gives each node's expected exit code (0 when absent).
func runCheckedJob(t *testing.T, c *cluster, n *netnsNet, dir string, want map[string]int, flags ...string) {
	t.Helper()
	var agents []*process
	for i := range n.nodes {
		agents = append(agents, c.agentIn(n, i, nodeName(i), checkTrainArgs(dir, flags...)...))
	}
	for _, a := range agents {
		if code := a.wait(t, jobTimeout); code != want[a.name] {
			t.Fatalf("%s exited %d, want %d:\n%s", a.name, code, want[a.name], a.out)
		}
	}
	if code := c.master.wait(t, 30*time.Second); code != 0 {
		t.Errorf("master exited %d", code)
	}
}

func nodeName(i int) string { return "node" + string(rune('0'+i)) }

func newCheckCluster(t *testing.T, n *netnsNet, job string) *cluster {
	t.Helper()
	c := newClusterAt(t, job, n.hostIP+":0")
	c.env = []string{"GLOO_SOCKET_IFNAME=eth0"}
	return c
}

// TestNodeCheckClusterHealthy: every node of a healthy cluster passes in
// one stage, in seconds, and the job trains on all four.
func TestNodeCheckClusterHealthy(t *testing.T) {
	n := newNetns(t, 4)
	c := newCheckCluster(t, n, "nc-ok")
	dir := t.TempDir()
	runCheckedJob(t, c, n, dir, nil, "--nnodes", "4", "--network-check")
	verdicts, stages, took := checkVerdicts(t, c.master.out.String())
	t.Logf("node check of 4 nodes in network namespaces: %s wall time, %s stage(s), verdicts %v", took, stages, verdicts)
	for i := range 4 {
		if v := verdicts[nodeName(i)]; v != "passed" {
			t.Errorf("%s: verdict %q, want passed", nodeName(i), v)
		}
	}
	if stages != "1" {
		t.Errorf("a healthy cluster took %s stages, want 1", stages)
	}
	if res := readResult(t, filepath.Join(dir, "out.json")); res.Step != 30 || res.WorldSize != 4 {
		t.Errorf("result: step %d world %d, want 30, 4", res.Step, res.WorldSize)
	}
}

// TestNodeCheckClusterStragglerExcluded slows node2's link: it is the only
// straggler, --exclude-straggler takes it out (its agent exits 5), and the
// job trains on the other three.
func TestNodeCheckClusterStragglerExcluded(t *testing.T) {
	n := newNetns(t, 4)
	qdisc := n.slow(2, "50ms", "10mbit")
	t.Logf("node2's link shaped with %s to 10mbit", qdisc)
	c := newCheckCluster(t, n, "nc-slow")
	dir := t.TempDir()
	runCheckedJob(t, c, n, dir, map[string]int{"node2": 5}, "--nnodes", "3:4", "--network-check", "--exclude-straggler")
	verdicts, stages, took := checkVerdicts(t, c.master.out.String())
	t.Logf("node check: %s wall time, %s stage(s), verdicts %v", took, stages, verdicts)
	for i := range 4 {
		want := "passed"
		if i == 2 {
			want = "straggler excluded"
		}
		if v := verdicts[nodeName(i)]; v != want {
			t.Errorf("%s: verdict %q, want %q", nodeName(i), v, want)
		}
	}
	if res := readResult(t, filepath.Join(dir, "out.json")); res.Step != 30 || res.WorldSize != 3 {
		t.Errorf("result: step %d world %d, want 30 steps on the 3 other nodes", res.Step, res.WorldSize)
	}
}

// TestNodeCheckClusterCrashIsolated makes node1's check program crash: the first
// stage fails node1 and its neighbour, the second pairs each with a node
// that passed, and only node1 is faulty; it is excluded and the job trains
// on the other three.
func TestNodeCheckClusterCrashIsolated(t *testing.T) {
	n := newNetns(t, 4)
	c := newCheckCluster(t, n, "nc-crash")
	c.env = append(c.env, "ROVER_NODECHECK_TEST_CRASH=node1")
	dir := t.TempDir()
	runCheckedJob(t, c, n, dir, map[string]int{"node1": 5}, "--nnodes", "3:4", "--network-check")
	verdicts, stages, took := checkVerdicts(t, c.master.out.String())
	t.Logf("node check: %s wall time, %s stage(s), verdicts %v", took, stages, verdicts)
	for i := range 4 {
		want := "passed"
		if i == 1 {
			want = "faulty excluded"
		}
		if v := verdicts[nodeName(i)]; v != want {
			t.Errorf("%s: verdict %q, want %q", nodeName(i), v, want)
		}
	}
	if stages != "2" {
		t.Errorf("the check took %s stages, want 2 (the faulty node isolated in the second)", stages)
	}
	if res := readResult(t, filepath.Join(dir, "out.json")); res.Step != 30 || res.WorldSize != 3 {
		t.Errorf("result: step %d world %d, want 30 steps on the 3 other nodes", res.Step, res.WorldSize)
	}
}

// TestSubmitNodeCheckRelaunchesFaultyNode: under rover submit the master
// owns the nodes, so the node the check finds faulty (its check program
// crashes) is relaunched; the replacement passes its check and the job
// trains on two nodes again.
func TestSubmitNodeCheckRelaunchesFaultyNode(t *testing.T) {
	job := uniqueJob("sub-nc")
	t.Setenv("ROVER_NODECHECK_TEST_CRASH", job+"-worker-1-0")
	dir := t.TempDir()
	s := submit(t, job, append([]string{"--rdzv-id", job, "--nnodes", "2", "--network-check"}, trainArgs(dir)...)...)
	if code := s.wait(t, jobTimeout); code != 0 {
		t.Fatalf("rover submit exited %d, want 0", code)
	}
	if ids, want := s.nodeIDs(t), []string{s.node(0, 0), s.node(1, 0), s.node(1, 1)}; !slices.Equal(ids, want) {
		t.Errorf("node logs %v, want %v: one relaunch of the faulty node", ids, want)
	}
	errOut := s.stderr.String()
	t.Logf("rover submit's summary:\n%s", lastLines(errOut, 25))
	if want := "relaunching it as " + s.node(1, 1); !strings.Contains(errOut, want) {
		t.Errorf("stderr does not say %q", want)
	}
	if !strings.Contains(errOut, "the node check found it faulty") {
		t.Errorf("stderr does not give the node check as the relaunch's reason")
	}
	if want := "node relaunches 1 (node_check 1)"; !strings.Contains(errOut, want) {
		t.Errorf("the summary does not say %q", want)
	}
	if !strings.Contains(errOut, "node check of round") {
		t.Errorf("the job summary lacks the node check")
	}
	if res := readResult(t, filepath.Join(dir, "out.json")); res.Step != 60 || res.WorldSize != 4 {
		t.Errorf("result: step %d world %d, want 60, 4", res.Step, res.WorldSize)
	}
}
