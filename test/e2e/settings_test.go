package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestDifferentSettingsRefusedAtJoin runs a real master and agents on
// loopback: the first agent fixes the job's settings; a second with other
// --hang-timeout, --hang-detection and --rdzv-conf join_timeout is refused
// (exit 3) with every difference named, both values given; a third with the
// first's settings joins and the job runs to the end.
func TestDifferentSettingsRefusedAtJoin(t *testing.T) {
	c := newCluster(t, "settings")
	job := []string{"--nnodes", "2", "--hang-timeout", "5m", "--rdzv-conf", "join_timeout=600"}
	first := c.agent("node0", append(job, "--no-python", "true")...)
	waitFor(t, time.Minute, "node0 to join", func() bool { return strings.Contains(first.out.String(), "joined rendezvous") })

	other := c.agent("node1", "--nnodes", "2", "--hang-timeout", "10m", "--hang-detection", "2",
		"--rdzv-conf", "join_timeout=300", "--no-python", "true")
	if code := other.wait(t, time.Minute); code != 3 {
		t.Fatalf("the agent with other settings exited %d, want 3 (refused at rendezvous):\n%s", code, other.out)
	}
	out := other.out.String()
	for _, want := range []string{
		"--rdzv-conf join_timeout=5m0s, but the job runs with 10m0s",
		"--hang-timeout=10m0s, but the job runs with 5m0s",
		"--hang-detection=2, but the job runs with 1",
		"start every agent of the job with the same settings",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the refused agent's output does not say %q:\n%s", want, out)
		}
	}

	same := c.agent("node2", append(job, "--no-python", "true")...)
	for _, p := range []*process{first, same} {
		if code := p.wait(t, jobTimeout); code != 0 {
			t.Errorf("%s exited %d, want 0: an agent with the job's settings joins", p.name, code)
		}
	}
}
