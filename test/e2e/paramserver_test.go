package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestParameterServerJob submits a DLRover-style ParameterServerStrategy
// job (2 PS, 3 workers, 1 chief; testdata/ps_roles.py) and kills a worker
// and a PS while the workers are paused: the worker is relaunched with the
// same TF_CONFIG and resumes where the PS say it left off (no step lost or
// counted twice); the PS comes back at the same address with cluster
// version 1, restores its total from its checkpoint, and the workers
// reconnect to it and carry on; the chief's success ends the job, and the
// PS still serving are stopped.
func TestParameterServerJob(t *testing.T) {
	const steps, pause = 20, 5
	job := uniqueJob("ps")
	out := t.TempDir()
	script := filepath.Join(repoRoot, "test", "e2e", "testdata", "ps_roles.py")
	cmd := fmt.Sprintf("[%q, %q, %q, %q, %q]", pythonExec, script, out, strconv.Itoa(steps), strconv.Itoa(pause))
	yaml := fmt.Sprintf(`apiVersion: elastic.iml.github.io/v1alpha1
kind: ElasticJob
metadata: {name: %s}
spec:
  distributionStrategy: ParameterServerStrategy
  replicaSpecs:
    ps: {replicas: 2, restartCount: 2, template: {spec: {containers: [{name: main, command: %s}]}}}
    chief: {replicas: 1, restartCount: 1, template: {spec: {containers: [{name: main, command: %s}]}}}
    worker: {replicas: 3, restartCount: 2, template: {spec: {containers: [{name: main, command: %s}]}}}
`, job, cmd, cmd, cmd)
	file := filepath.Join(t.TempDir(), "ps.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	s := submit(t, job, file)
	events := func() string {
		b, _ := os.ReadFile(filepath.Join(out, "events"))
		return string(b)
	}
	const deadline = 2 * time.Minute
	waitFor(t, deadline, "all three workers to pause", func() bool { return strings.Count(events(), " paused\n") == 3 })
	pid := func(role string, i int) int {
		b, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("pid-%s-%d", role, i)))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(string(b))
		return n
	}
	worker1, ps0 := pid("worker", 1), pid("ps", 0)
	for _, p := range []int{worker1, ps0} {
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %d: %v", p, err)
		}
	}
	// Steps 0..4 alternate over the two PS: PS 0 had 3 adds from each worker.
	waitFor(t, deadline, "PS 0 to come back at version 1 with its total", func() bool {
		return regexp.MustCompile(`(?m)^ps 0 start version 1 total 9 addr `).MatchString(events())
	})
	waitFor(t, deadline, "worker 1 to come back", func() bool { return pid("worker", 1) != worker1 })
	if err := os.WriteFile(filepath.Join(out, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := s.wait(t, deadline); code != 0 {
		t.Fatalf("rover submit exited with %d, want 0 (the chief succeeded)", code)
	}
	ev := events()

	// The PS came back at its address.
	addrs := regexp.MustCompile(`(?m)^ps 0 start version \d+ total \d+ addr (\S+) cpu \S+$`).FindAllStringSubmatch(ev, -1)
	if len(addrs) != 2 || addrs[0][1] != addrs[1][1] {
		t.Errorf("PS 0 started at %v, want twice at the same address", addrs)
	}
	// The workers that were not killed reconnected to it, reading version 1.
	for _, w := range []int{0, 2} {
		if !strings.Contains(ev, fmt.Sprintf("worker %d reconnected ps 0 version 1\n", w)) {
			t.Errorf("worker %d did not reconnect to PS 0 at cluster version 1:\n%s", w, ev)
		}
	}
	// The relaunched worker got the same TF_CONFIG, and the cluster version.
	envs, _ := filepath.Glob(filepath.Join(out, "env-worker-1-*"))
	if len(envs) != 2 {
		t.Fatalf("worker 1 started %d times, want 2", len(envs))
	}
	var tf []string
	versions := map[string]bool{}
	for _, e := range envs {
		var env map[string]string
		b, _ := os.ReadFile(e)
		if err := json.Unmarshal(b, &env); err != nil {
			t.Fatal(err)
		}
		tf = append(tf, env["TF_CONFIG"])
		versions[env["ROVER_CLUSTER_VERSION"]] = true
		if env["NODE_TYPE"] != "worker" || env["NODE_RANK"] != "1" || env["WORKER_ID"] != "1" || env["WORKER_NUM"] != "3" {
			t.Errorf("worker 1's environment: %v", env)
		}
	}
	if tf[0] != tf[1] {
		t.Errorf("worker 1's TF_CONFIG changed across its relaunch:\n%s\n%s", tf[0], tf[1])
	}
	// The relaunched worker resumed where the PS say it left off: every
	// step of every worker was counted exactly once.
	if !strings.Contains(ev, fmt.Sprintf("worker 1 start version 0 resume at %d\n", pause)) && !strings.Contains(ev, fmt.Sprintf("worker 1 start version 1 resume at %d\n", pause)) {
		t.Errorf("the relaunched worker 1 did not resume at step %d:\n%s", pause, ev)
	}
	res := readPSResult(t, out)
	checkNoDups(t, out)
	if sum := res.Totals[0] + res.Totals[1]; sum != 3*steps {
		t.Errorf("the PS counted %v = %d steps, want %d: each of 3 workers' %d steps once", res.Totals, sum, 3*steps, steps)
	}
	// The summary shows the relaunches and the chief's success.
	for _, row := range []string{
		fmt.Sprintf(`(?m)^chief\s+0\s+%s-chief-0-0\s+Succeeded\s`, job),
		fmt.Sprintf(`(?m)^ps\s+0\s+%s-ps-0-1\s+\S+\s+1/2`, job),
		fmt.Sprintf(`(?m)^worker\s+1\s+%s-worker-1-1\s+Succeeded\s+1/2`, job),
	} {
		if !regexp.MustCompile(row).MatchString(s.stderr.String()) {
			t.Errorf("the summary has no row %s", row)
		}
	}
	if !strings.Contains(s.stderr.String(), "all 1 chief nodes succeeded") {
		t.Errorf("the job's log does not say the chief decided it")
	}
}
