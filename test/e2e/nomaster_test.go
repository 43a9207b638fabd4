package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Jobs without a `rover master` process: the agent on the endpoint's host
// (node rank 0) hosts the job's master in-process and the others join it.
// docs/user-guide.md, "Launching without a master", documents what these
// tests check.

// jobSecret is the ROVER_JOB_SECRET of the Kubeflow-style tests; the
// Slurm-style ones have none and use the private token file of an endpoint
// on loopback.
const jobSecret = "e2e-secret-0123456789abcdef"

// noMasterCluster is a cluster with no master process: its agents host one.
func noMasterCluster(t *testing.T, job string) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir(), job: job}
	// The private token file of a job on loopback lives under TMPDIR.
	c.env = []string{"TMPDIR=" + c.dir}
	return c
}

// freePortPair returns a port P such that P and P+1 are free on loopback
// now: --master-port P for the workers, P+1 for the master of a static job.
func freePortPair(t *testing.T) int {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		next, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		ln.Close()
		if err == nil {
			next.Close()
			return p
		}
	}
	t.Fatal("no two free neighbouring ports on 127.0.0.1")
	return 0
}

// staticAgent starts node rank's agent of a Slurm-style job: torchrun's
// static rendezvous, the node rank and the master address and port, as an
// sbatch script passes them ($SLURM_NODEID, the first node's address).
func (c *cluster) staticAgent(rank, port int, args ...string) *process {
	c.t.Helper()
	base := []string{"run", "--nnodes", "2", "--rdzv-backend", "static", "--node-rank", strconv.Itoa(rank),
		"--master-addr", "127.0.0.1", "--master-port", strconv.Itoa(port), "--rdzv-id", c.job,
		"--heartbeat-interval", "1s", "--stop-grace-period", "5s"}
	return c.start(fmt.Sprintf("node%d", rank), append(base, args...)...)
}

// kubeflowAgent starts node rank's agent of a Kubeflow-style job: no
// endpoint flag, but MASTER_ADDR, MASTER_PORT and NODE_RANK in the
// environment, as Kubeflow's PyTorchJob sets them, and the job's secret.
func (c *cluster) kubeflowAgent(rank, port int, args ...string) *process {
	c.t.Helper()
	env := c.env
	c.env = append(append([]string{}, env...), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
		"NODE_RANK="+strconv.Itoa(rank), "ROVER_JOB_SECRET="+jobSecret)
	defer func() { c.env = env }()
	base := []string{"run", "--rdzv-id", c.job, "--heartbeat-interval", "1s", "--stop-grace-period", "5s"}
	return c.start(fmt.Sprintf("node%d", rank), append(base, args...)...)
}

// waitAll waits for every agent to exit 0.
func waitAll(t *testing.T, agents ...*process) {
	t.Helper()
	for _, a := range agents {
		if code := a.wait(t, jobTimeout); code != 0 {
			t.Fatalf("%s exited %d:\n%s", a.name, code, a.out)
		}
	}
}

func checkResult(t *testing.T, dir string, restarts int) {
	t.Helper()
	r := readResult(t, filepath.Join(dir, "out.json"))
	if r.Step != 60 || r.WorldSize != 4 || r.RestartCount != restarts {
		t.Errorf("result: step %d world %d restarts %d; want 60, 4, %d", r.Step, r.WorldSize, r.RestartCount, restarts)
	}
}

// TestNoMasterStaticCrashRestarts: two agents launched Slurm-style, with
// no master process, node 1 before node 0 hosts the master; a worker on
// node 1 crashes; the workers of both nodes
// restart and the job finishes with the weights of an uninterrupted run.
func TestNoMasterStaticCrashRestarts(t *testing.T) {
	clean := cleanRun(t)
	c := noMasterCluster(t, "slurm")
	dir, port := t.TempDir(), freePortPair(t)
	marker := filepath.Join(dir, "crashed")
	args := trainArgs(dir, "--crash-at-step", "25", "--crash-rank", "3", "--crash-marker", marker)
	// Node 1 first: it retries while no agent hosts the master yet.
	c.env = append(c.env, "ROVER_LOG_LEVEL=debug")
	a1 := c.staticAgent(1, port, args...)
	waitFor(t, jobTimeout, "node 1 to retry joining", func() bool {
		return strings.Contains(a1.out.String(), "could not join the master; retrying")
	})
	a0 := c.staticAgent(0, port, args...)
	waitAll(t, a0, a1)
	waitExists(t, marker, 0)
	checkResult(t, dir, 1)
	if d := maxRelDiff(t, clean.Weights, readResult(t, filepath.Join(dir, "out.json")).Weights); d > 1e-6 {
		t.Errorf("weights differ by %g relative, want <= 1e-6", d)
	}
	want := fmt.Sprintf("endpoint=127.0.0.1:%d", port+1)
	if !strings.Contains(a0.out.String(), "hosting the job's master") || !strings.Contains(a0.out.String(), want) {
		t.Errorf("node 0 did not host the master at %s:\n%s", want, a0.out)
	}
	for _, a := range []*process{a0, a1} {
		if !strings.Contains(a.out.String(), "restart_count=1") {
			t.Errorf("%s did not restart its workers:\n%s", a.name, a.out)
		}
	}
}

// TestNoMasterKubeflowCrashRecovers: two agents launched Kubeflow-style
// (MASTER_ADDR, MASTER_PORT, NODE_RANK and a job secret; an elastic
// --nnodes 1:2), with no master process; a worker crashes; both nodes
// restart into a new round and the job finishes.
func TestNoMasterKubeflowCrashRecovers(t *testing.T) {
	c := noMasterCluster(t, "kubeflow")
	dir, port := t.TempDir(), freePortPair(t)
	marker := filepath.Join(dir, "crashed")
	args := append([]string{"--nnodes", "1:2"}, trainArgs(dir, "--crash-at-step", "25", "--crash-rank", "1", "--crash-marker", marker)...)
	a0, a1 := c.kubeflowAgent(0, port, args...), c.kubeflowAgent(1, port, args...)
	waitAll(t, a0, a1)
	waitExists(t, marker, 0)
	checkResult(t, dir, 1)
	if !strings.Contains(a0.out.String(), "hosting the job's master") {
		t.Errorf("node 0 did not host the master:\n%s", a0.out)
	}
	if strings.Contains(a1.out.String(), "hosting the job's master") {
		t.Errorf("node 1 hosted a master too:\n%s", a1.out)
	}
}

// withRdzvConf returns trainArgs' arguments with more --rdzv-conf settings.
func withRdzvConf(args []string, more string) []string {
	out := append([]string{}, args...)
	for i := range out {
		if out[i] == "--rdzv-conf" && i+1 < len(out) {
			out[i+1] += "," + more
			return out
		}
	}
	return append([]string{"--rdzv-conf", more}, out...)
}

// launchStyle starts a job's two agents in one of the two styles.
type launchStyle struct {
	name  string
	nodes string // --nnodes
	start func(c *cluster, rank, port int, args ...string) *process
}

var launchStyles = []launchStyle{
	{"slurm", "2", (*cluster).staticAgent},
	{"kubeflow", "1:2", (*cluster).kubeflowAgent},
}

// TestNoMasterHostKilled kills the agent of node rank 0, which hosts the
// job's master (SIGKILL: its workers die with it), in each launch style: the
// other node's agent gives up after master_timeout and exits 4, saying that
// the job's master, hosted by node rank 0, is gone and what to do.
func TestNoMasterHostKilled(t *testing.T) {
	for _, style := range launchStyles {
		t.Run(style.name, func(t *testing.T) {
			c := noMasterCluster(t, "hostkilled-"+style.name)
			dir, port := t.TempDir(), freePortPair(t)
			args := withRdzvConf(append([]string{"--nnodes", style.nodes}, trainArgs(dir, "--step-sleep", "0.1")...), "master_timeout=5s")
			a0, a1 := style.start(c, 0, port, args...), style.start(c, 1, port, args...)
			waitExists(t, filepath.Join(dir, "ckpt.pt"), jobTimeout) // step 10 is done
			a0.kill(t)
			if code := a1.wait(t, jobTimeout); code != 4 {
				t.Fatalf("node 1 exited %d after the host was killed, want 4 (master lost):\n%s", code, a1.out)
			}
			for _, want := range []string{"lost the job's master at", "this job runs without `rover master`",
				"the agent of node rank 0", "Restart every node's agent"} {
				if !strings.Contains(a1.out.String(), want) {
					t.Errorf("node 1's output does not say %q:\n%s", want, a1.out)
				}
			}
		})
	}
}

// TestNoMasterWorkerNodeKilled kills the agent of node rank 1, which does
// not host the master, in each launch style. Slurm-style (a fixed world of
// two) the job waits for node 1 (up to join_timeout): its agent started
// again with the same node rank rejoins and the job finishes on both
// nodes. Kubeflow-style (--nnodes 1:2) the job finishes on node 0 alone.
// Either way the workers resume from the last checkpoint in a new round.
func TestNoMasterWorkerNodeKilled(t *testing.T) {
	for _, style := range launchStyles {
		t.Run(style.name, func(t *testing.T) {
			c := noMasterCluster(t, "nodekilled-"+style.name)
			dir, port := t.TempDir(), freePortPair(t)
			args := append([]string{"--nnodes", style.nodes}, trainArgs(dir, "--step-sleep", "0.1")...)
			a0, a1 := style.start(c, 0, port, args...), style.start(c, 1, port, args...)
			waitExists(t, filepath.Join(dir, "ckpt.pt"), jobTimeout) // step 10 is done
			a1.kill(t)
			world := 2
			if style.name == "slurm" {
				a1 = style.start(c, 1, port, args...)
				waitAll(t, a1)
				world = 4
			}
			waitAll(t, a0)
			r := readResult(t, filepath.Join(dir, "out.json"))
			if r.Step != 60 || r.WorldSize != world {
				t.Errorf("result: step %d world %d; want 60 on a world of %d", r.Step, r.WorldSize, world)
			}
			// A lost node is a membership change, not a failure: the
			// workers resumed from the checkpoint in a new round.
			worlds, _ := os.ReadFile(filepath.Join(dir, "world.log"))
			if !regexp.MustCompile(`world=` + strconv.Itoa(world) + ` rank=0 start_step=[1-9]`).Match(worlds) {
				t.Errorf("world.log shows no resumed world of %d:\n%s", world, worlds)
			}
		})
	}
}

// TestNoMasterJobSetFirstBinds: two agents launched JobSet-style, the same
// command on every node (a c10d endpoint and the job's secret, no node
// ranks) and no master process: exactly one agent binds the endpoint and
// hosts the master, the other joins it, and the job finishes on both.
func TestNoMasterJobSetFirstBinds(t *testing.T) {
	c := noMasterCluster(t, "jobset")
	c.env = append(c.env, "ROVER_JOB_SECRET="+jobSecret)
	dir, port := t.TempDir(), freePortPair(t)
	args := append([]string{"run", "--rdzv-backend", "c10d", "--rdzv-endpoint", fmt.Sprintf("127.0.0.1:%d", port),
		"--rdzv-id", c.job, "--nnodes", "2", "--heartbeat-interval", "1s", "--stop-grace-period", "5s"}, trainArgs(dir)...)
	a, b := c.start("node-a", args...), c.start("node-b", args...)
	waitAll(t, a, b)
	checkResult(t, dir, 0)
	hosts := 0
	for _, p := range []*process{a, b} {
		if strings.Contains(p.out.String(), "hosting the job's master") {
			hosts++
		}
	}
	if hosts != 1 {
		t.Errorf("%d agents hosted the master, want exactly 1:\n%s\n%s", hosts, a.out, b.out)
	}
}
