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

// psResult is what ps_roles.py's chief wrote, per PS: Totals, the steps
// or samples each counted, and Dups, those it was sent twice (not as a
// retry: samples trained twice).
type psResult struct{ Totals, Dups []int }

// readPSResult reads the chief's result.
func readPSResult(t testing.TB, out string) psResult {
	t.Helper()
	var res psResult
	b, err := os.ReadFile(filepath.Join(out, "result"))
	if err != nil {
		t.Fatalf("the chief wrote no result: %v", err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// checkNoDups fails the test when a PS was sent a step or a shard twice.
func checkNoDups(t testing.TB, out string) {
	t.Helper()
	for j, d := range readPSResult(t, out).Dups {
		if d != 0 {
			t.Errorf("PS %d was sent %d steps or shards twice: samples trained twice", j, d)
		}
	}
}

// TestParameterServerLeasedData: the workers of a parameter-server job
// (testdata/ps_roles.py, 2 PS, 3 workers, 1 chief) lease their data, 600
// samples in shards of 10, through rover.data.ShardClient, with no agent:
// the master serves the roles' shard calls, naming each worker by its
// node. Worker 1, whose restartCount is 0, applies two shards, leases a
// third and holds it (PS_ROLES_HOLD), and is SIGKILLed: the platform
// reports its node gone, the master returns its lease to the queue, and
// one of the two others trains that shard: the PS hold all 600
// samples, every shard applied once (a PS counts a shard sent twice as a
// duplicate). (A shard a dead worker applied but had not completed would
// come back too: the worker that leases it asks the PS first, and skips
// it.)
func TestParameterServerLeasedData(t *testing.T) {
	const samples, shardSize = 600, 10
	job := uniqueJob("psdata")
	out := t.TempDir()
	script := filepath.Join(repoRoot, "test", "e2e", "testdata", "ps_roles.py")
	cmd := fmt.Sprintf("[%q, %q, %q, \"0\", \"0\"]", pythonExec, script, out)
	role := func(name string, replicas, restarts int) string {
		return fmt.Sprintf("    %s: {replicas: %d, restartCount: %d, template: {spec: {containers: [{name: main, command: %s}]}}}\n", name, replicas, restarts, cmd)
	}
	doc := fmt.Sprintf(`apiVersion: elastic.iml.github.io/v1alpha1
kind: ElasticJob
metadata: {name: %s}
spec:
  distributionStrategy: ParameterServerStrategy
  envs: {PS_ROLES_SHARDS: "%d,%d", PS_ROLES_STEP_SLEEP: "0.02", PS_ROLES_HOLD: "1", PYTHONPATH: %q}
  replicaSpecs:
`, job, samples, shardSize, filepath.Join(repoRoot, "python")) + role("ps", 2, 2) + role("chief", 1, 1) + role("worker", 3, 0)
	file := filepath.Join(t.TempDir(), "ps.yaml")
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	s := submit(t, job, file)
	events := func() string {
		b, _ := os.ReadFile(filepath.Join(out, "events"))
		return string(b)
	}
	const deadline = 3 * time.Minute
	var held string
	waitFor(t, deadline, "worker 1 to apply two shards and hold a third", func() bool {
		m := regexp.MustCompile(`(?m)^worker 1 holding shard (\d+)$`).FindStringSubmatch(events())
		if m != nil {
			held = m[1]
		}
		return m != nil
	})
	b, err := os.ReadFile(filepath.Join(out, "pid-worker-1"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(string(b))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := s.wait(t, deadline); code != 0 {
		t.Fatalf("rover submit exited with %d, want 0:\n%s", code, lastLines(s.stderr.String(), 40))
	}
	ev := events()
	totals := readPSResult(t, out).Totals
	if len(totals) != 2 || totals[0]+totals[1] != samples {
		t.Errorf("the PS hold %v samples, want %d in all:\n%s", totals, samples, ev)
	}
	checkNoDups(t, out)
	if strings.Contains(ev, "worker 1 done") {
		t.Errorf("worker 1 finished; it was to be killed mid-run")
	}
	// Every shard was applied once, by a worker that lived or by worker 1
	// before it died.
	applied := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^worker (\d) applied shard (\d+)$`).FindAllStringSubmatch(ev, -1) {
		if w, ok := applied[m[2]]; ok {
			t.Errorf("shard %s applied by worker %s and worker %s", m[2], w, m[1])
		}
		applied[m[2]] = m[1]
	}
	if len(applied) != samples/shardSize {
		t.Errorf("%d shards applied, want %d", len(applied), samples/shardSize)
	}
	if w := applied[held]; w == "" || w == "1" {
		t.Errorf("shard %s, leased by worker 1 when it was killed, was applied by worker %q; want one of the others", held, w)
	}
	if n := strings.Count(ev, "worker 1 applied shard "); n != 2 {
		t.Errorf("worker 1 applied %d shards, want 2 before it held the third", n)
	}
	// Worker 1 was not relaunched (restartCount 0): the others carried on.
	if re := regexp.MustCompile(fmt.Sprintf(`(?m)^worker\s+1\s+%s-worker-1-0\s+Failed\s`, job)); !re.MatchString(s.stderr.String()) {
		t.Errorf("the summary has no row %s:\n%s", re, lastLines(s.stderr.String(), 15))
	}
}
