package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestSubmitGivesUpPendingNode runs a job of --nnodes 2:3 on a machine
// that runs at most 2 nodes (--max-nodes-here 2), with a 3 s pending
// timeout and a 10-minute last call: one of the three nodes pends (its
// agent never starts), is given up after the timeout, and the rendezvous
// closes with the 2 nodes it has at once, not after its last call (the job
// ends well within jobTimeout, shorter than the last call). Every worker sees a
// world of 2 nodes, the job succeeds, and the summary says why the third
// node is gone; no relaunch is spent.
func TestSubmitGivesUpPendingNode(t *testing.T) {
	dir := t.TempDir()
	job := uniqueJob("sub-pend")
	out := filepath.Join(dir, "worlds.txt")
	s := submit(t, job, "--max-nodes-here", "2", "--pending-timeout", "3s",
		"--rdzv-id", job, "--nnodes", "2:3", "--nproc-per-node", "1", "--rdzv-conf", "last_call_timeout=600,join_timeout=600",
		"--no-python", "sh", "-c", `echo "rank $GROUP_RANK of $GROUP_WORLD_SIZE nodes, world $WORLD_SIZE" >> "$0"`, out)
	// Well within the last call of 10 minutes: the round must not wait it out.
	if code := s.wait(t, jobTimeout); code != 0 {
		t.Fatalf("rover submit exited %d, want 0\n%s", code, s.stderr.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("the workers wrote nothing: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	slices.Sort(lines)
	if want := []string{"rank 0 of 2 nodes, world 2", "rank 1 of 2 nodes, world 2"}; !slices.Equal(lines, want) {
		t.Errorf("workers saw %q, want %q", lines, want)
	}
	// The platform starts two of the three nodes it is given at once, in
	// whatever order the master's creates arrive: the third pends.
	errOut := s.stderr.String()
	m := regexp.MustCompile(`node (` + regexp.QuoteMeta(s.job) + `-worker-(\d)-0) pended 3s past its 3s pending timeout: given up; the job runs with 2 nodes`).FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("stderr does not say a node pended 3s past its 3s pending timeout and was given up:\n%s", errOut)
	}
	pended, pendedRank := m[1], int(m[2][0]-'0')
	for rank := range 3 {
		if rank == pendedRank {
			continue
		}
		if re := s.summaryRow(rank, 0, "Succeeded", "0/3"); !re.MatchString(errOut) {
			t.Errorf("the summary has no row %s", re)
		}
	}
	if re := s.summaryRow(pendedRank, 0, "Removed", "0/3"); !re.MatchString(errOut) || !strings.Contains(errOut, "pended 3s past its 3s pending timeout: given up\n") {
		t.Errorf("the summary has no row %s saying why:\n%s", re, errOut)
	}
	if want := "node relaunches 0"; !strings.Contains(errOut, want) {
		t.Errorf("the summary does not say %q", want)
	}
	// The job's event log has the decision, as a warning.
	events, err := os.ReadFile(filepath.Join(s.dir, "master", "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if re := regexp.MustCompile(`"kind":"scale_decision","severity":"Warning","node":"` + regexp.QuoteMeta(pended) + `".*"nodes":2`); !re.Match(events) {
		t.Errorf("events.jsonl has no line %s:\n%s", re, events)
	}
	// The pending node's agent never ran: nothing of it on the console.
	if strings.Contains(s.stdout.String(), "["+pended+"]") {
		t.Errorf("the pending node %s ran:\n%s", pended, s.stdout.String())
	}
}
