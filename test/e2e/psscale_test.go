package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// psScaleJob writes a parameter-server job of testdata/ps_roles.py (2 PS
// growing to maxPS, 3 workers, 1 chief) whose ps group is auto-scaled
// with a short window, every role asking for cpu of CPU; env is the
// job's environment (PS_ROLES_HOT, PS_ROLES_STEP_SLEEP).
func psScaleJob(t testing.TB, job, out string, steps, pause, maxPS int, cpu string, env map[string]string) string {
	t.Helper()
	script := filepath.Join(repoRoot, "test", "e2e", "testdata", "ps_roles.py")
	cmd := fmt.Sprintf("[%q, %q, %q, %q, %q]", pythonExec, script, out, strconv.Itoa(steps), strconv.Itoa(pause))
	role := func(name string, replicas int, extra string) string {
		return fmt.Sprintf("    %s: {replicas: %d,%s restartCount: 2, template: {spec: {containers: [{name: main, command: %s, resources: {requests: {cpu: %s}}}]}}}\n",
			name, replicas, extra, cmd, cpu)
	}
	var envs []string
	for k, v := range env {
		envs = append(envs, fmt.Sprintf("%s: %q", k, v))
	}
	doc := fmt.Sprintf(`apiVersion: elastic.iml.github.io/v1alpha1
kind: ElasticJob
metadata:
  name: %s
  annotations: {elastic.rover.dev/auto-scale: "ps-window=3s,ps-cool-down=10m"}
spec:
  distributionStrategy: ParameterServerStrategy
  envs: {%s}
  replicaSpecs:
`, job, strings.Join(envs, ", ")) + role("ps", 2, fmt.Sprintf(" maxReplicas: %d, autoScale: true,", maxPS)) + role("chief", 1, "") + role("worker", 3, "")
	file := filepath.Join(t.TempDir(), "ps.yaml")
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestParameterServerMigration: PS 1 of a job whose ps group is
// auto-scaled burns half a core besides serving, four times its 200m
// request: once it stayed above 90% of its request for the 3 s window,
// the master migrates it (journaled, in the event log) to a PS asking
// for more CPU, at the same address and rank, with the cluster version
// raised. The workers are let go at the decision, so they send steps
// while the old PS stops and the new one starts: they reconnect, and
// every step of every worker is counted exactly once. The migration
// spends none of the PS's relaunch budget, and the migrated PS, at the
// same use, is not hot for its larger request.
func TestParameterServerMigration(t *testing.T) {
	const steps, pause = 60, 5
	job := uniqueJob("psmig")
	out := t.TempDir()
	file := psScaleJob(t, job, out, steps, pause, 2, "200m", map[string]string{"PS_ROLES_HOT": "1", "PS_ROLES_STEP_SLEEP": "0.05"})
	s := submit(t, job, file)
	events := func() string {
		b, _ := os.ReadFile(filepath.Join(out, "events"))
		return string(b)
	}
	const deadline = 3 * time.Minute
	waitFor(t, deadline, "all three workers to pause", func() bool { return strings.Count(events(), " paused\n") == 3 })
	waitFor(t, deadline, "the master to decide PS 1's migration", func() bool {
		return strings.Contains(s.stderr.String(), "PS scaling")
	})
	if err := os.WriteFile(filepath.Join(out, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := s.wait(t, deadline); code != 0 {
		t.Fatalf("rover submit exited with %d, want 0:\n%s", code, lastLines(s.stderr.String(), 40))
	}
	ev := events()
	starts := regexp.MustCompile(`(?m)^ps 1 start version (\d+) total \d+ addr (\S+) cpu (\S+)$`).FindAllStringSubmatch(ev, -1)
	if len(starts) != 2 {
		t.Fatalf("PS 1 started %d times, want twice (migrated once):\n%s", len(starts), ev)
	}
	if starts[0][2] != starts[1][2] || starts[1][1] != "1" || starts[0][3] != "-" {
		t.Errorf("PS 1 started at %v: want the same address, the second at version 1", starts)
	}
	if cpu, err := strconv.Atoi(starts[1][3]); err != nil || cpu < 400 {
		t.Errorf("the migrated PS 1 was told a CPU request of %q, want at least twice its 200m", starts[1][3])
	}
	if n := len(regexp.MustCompile(`(?m)^ps 0 start `).FindAllString(ev, -1)); n != 1 {
		t.Errorf("PS 0 started %d times, want once: only the hot PS is migrated", n)
	}
	checkNoDups(t, out)
	if totals := readPSResult(t, out).Totals; len(totals) != 2 || totals[0]+totals[1] != 3*steps {
		t.Errorf("the PS counted %v steps, want %d: each of 3 workers' %d steps once", totals, 3*steps, steps)
	}
	// The decision is in the job's event log, and the summary shows the
	// migrated rank with no relaunch spent.
	log, err := os.ReadFile(filepath.Join(s.dir, "master", "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if re := regexp.MustCompile(`"kind":"scale_decision".*"node":"` + regexp.QuoteMeta(job) + `-ps-1-0".*"reason":"auto-scale migrate: ps_hot"`); !re.Match(log) {
		t.Errorf("events.jsonl has no line %s:\n%s", re, log)
	}
	if re := regexp.MustCompile(fmt.Sprintf(`(?m)^ps\s+1\s+%s-ps-1-1\s+\S+\s+0/2`, job)); !re.MatchString(s.stderr.String()) {
		t.Errorf("the summary has no row %s:\n%s", re, lastLines(s.stderr.String(), 30))
	}
}

// TestParameterServerGrowth: both PS of a job whose ps group may grow to
// 3 burn half a core (far above 90% of their 100m, so that both stay hot
// on a busy machine) while the workers, paused,
// wait on them: the master adds PS 2 at the address it was given at
// submit, the cluster version goes up with the grown cluster, and the
// workers, let go, read it and spread their steps over the three PS;
// every step is counted exactly once, some on the new PS.
func TestParameterServerGrowth(t *testing.T) {
	const steps, pause = 30, 5
	job := uniqueJob("psgrow")
	out := t.TempDir()
	file := psScaleJob(t, job, out, steps, pause, 3, "100m", map[string]string{"PS_ROLES_HOT": "0,1"})
	s := submit(t, job, file)
	events := func() string {
		b, _ := os.ReadFile(filepath.Join(out, "events"))
		return string(b)
	}
	const deadline = 3 * time.Minute
	waitFor(t, deadline, "all three workers to pause", func() bool { return strings.Count(events(), " paused\n") == 3 })
	waitFor(t, deadline, "PS 2 to start", func() bool {
		return regexp.MustCompile(`(?m)^ps 2 start version 1 total 0 `).MatchString(events())
	})
	if err := os.WriteFile(filepath.Join(out, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := s.wait(t, deadline); code != 0 {
		t.Fatalf("rover submit exited with %d, want 0:\n%s", code, lastLines(s.stderr.String(), 40))
	}
	ev := events()
	for w := range 3 {
		if !strings.Contains(ev, fmt.Sprintf("worker %d cluster version 1 ps 3\n", w)) {
			t.Errorf("worker %d did not read the grown cluster:\n%s", w, ev)
		}
	}
	checkNoDups(t, out)
	totals := readPSResult(t, out).Totals
	if len(totals) != 3 || totals[0]+totals[1]+totals[2] != 3*steps || totals[2] == 0 {
		t.Errorf("the PS counted %v steps, want 3 PS, %d in all, some on PS 2", totals, 3*steps)
	}
	log, err := os.ReadFile(filepath.Join(s.dir, "master", "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if re := regexp.MustCompile(`"kind":"scale_decision".*"reason":"auto-scale grow: all_ps_hot"`); !re.Match(log) {
		t.Errorf("events.jsonl has no line %s:\n%s", re, log)
	}
}
