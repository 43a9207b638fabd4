package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// envToken is the ROVER_TOKEN that users of `rover master` export, left in
// the environment of a job launched without one.
const envToken = "ROVER_TOKEN=left-over-token-0123456789"

// TestNoMasterStaticWithEnvToken: two agents launched Slurm-style with no
// master process but ROVER_TOKEN in their environment (node 1 first, so it
// waits for the master): node rank 0 finds nothing on the endpoint and
// hosts the job's master with that token, node 1 joins it, and the job
// trains. Before, both waited for a `rover master` no one started.
func TestNoMasterStaticWithEnvToken(t *testing.T) {
	c := noMasterCluster(t, "slurm-envtoken")
	c.env = append(c.env, envToken)
	dir, port := t.TempDir(), freePortPair(t)
	args := trainArgs(dir)
	a1 := c.staticAgent(1, port, args...)
	a0 := c.staticAgent(0, port, args...)
	waitAll(t, a0, a1)
	checkResult(t, dir, 0)
	if want := fmt.Sprintf("endpoint=127.0.0.1:%d", port+1); !strings.Contains(a0.out.String(), "hosting the job's master") ||
		!strings.Contains(a0.out.String(), want) {
		t.Errorf("node 0 did not host the master at %s:\n%s", want, a0.out)
	}
}

// TestEnvTokenNoMasterTimesOut: node rank 1 alone, ROVER_TOKEN set, and
// neither a `rover master` nor node rank 0: it says what it waits for while
// it waits, and after join_timeout exits 3 naming both masters it could
// have joined.
func TestEnvTokenNoMasterTimesOut(t *testing.T) {
	c := noMasterCluster(t, "envtoken-alone")
	c.env = append(c.env, envToken)
	port := freePortPair(t)
	a1 := c.staticAgent(1, port, "--rdzv-conf", "join_timeout=3s", "--nproc-per-node", "1", "--no-python", "true")
	if code := a1.wait(t, jobTimeout); code != 3 {
		t.Fatalf("node 1 exited %d, want 3 (rendezvous):\n%s", code, a1.out)
	}
	for _, want := range []string{"waiting for the job's master: a `rover master`, or the agent of node rank 0 hosting one",
		fmt.Sprintf("no master answered at 127.0.0.1:%d within the join timeout (3s)", port+1),
		"the token comes from $ROVER_TOKEN", "the agent of node rank 0 hosts the master"} {
		if !strings.Contains(a1.out.String(), want) {
			t.Errorf("node 1's output lacks %q:\n%s", want, a1.out)
		}
	}
}
