package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// dumpScript writes what a worker sees of its start (environment, argv,
// sys.path, __main__, modules, signals, streams, descriptors) and ends as
// told; internal/agent's standby tests run it too.
func dumpScript() string {
	return filepath.Join(repoRoot, "internal", "agent", "testdata", "standby", "dump.py")
}

// perRoundVars are the variables whose values change from one restart to
// the next by torchrun's contract (and Rover's per-round ones).
var perRoundVars = []string{"TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_ERROR_FILE", "ROVER_ROUND",
	"ROVER_WORKER_INCARNATION", "ROVER_STACKS_FILE", "MASTER_PORT"}

// standbyJob runs dump.py under `rover run --standalone` on 2 local ranks
// with one restart (rank 0 ends as end says, "first:END" or "every:END",
// once the test creates the go file; ready, if set, runs first) and returns
// the agent's output, the dumps by "restart-rank" and the job's log dir.
func standbyJob(t *testing.T, end string, wantExit int, ready func(out func() string), flags ...string) (string, map[string]map[string]any, string) {
	t.Helper()
	return standbyJobIn(t, t.TempDir(), end, wantExit, ready, flags...)
}

// standbyJobIn is standbyJob in dir (the job's working directory), which
// may hold an earlier run's files.
func standbyJobIn(t *testing.T, dir, end string, wantExit int, ready func(out func() string), flags ...string) (string, map[string]map[string]any, string) {
	t.Helper()
	dumps := filepath.Join(dir, "dumps")
	for _, d := range []string{dumps, filepath.Join(dir, "logs")} {
		if err := os.RemoveAll(d); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(dumps, 0o700); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: dir}
	args := append([]string{"run", "--standalone", "--nproc-per-node", "2", "--max-restarts", "1", "--node-id", "n0",
		"--log-dir", filepath.Join(dir, "logs")}, flags...)
	args = append(args, dumpScript(), filepath.Join(dumps, "{restart}-{rank}.json"), end)
	p := c.start("agent", args...)
	waitFor(t, jobTimeout, "restart 0's dumps", func() bool {
		_, e0 := os.Stat(filepath.Join(dumps, "0-0.json"))
		_, e1 := os.Stat(filepath.Join(dumps, "0-1.json"))
		return e0 == nil && e1 == nil
	})
	if ready != nil {
		ready(p.out.String)
	}
	if err := os.WriteFile(filepath.Join(dumps, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, jobTimeout); code != wantExit {
		t.Fatalf("the job exited %d, want %d:\n%s", code, wantExit, p.out)
	}
	out := map[string]map[string]any{}
	files, _ := filepath.Glob(filepath.Join(dumps, "*.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".json")] = m
	}
	return p.out.String(), out, filepath.Join(dir, "logs")
}

// withoutPerRound is a dump with the per-round variables' values blanked,
// and the paths of one run (the agent's private directory, the worker's
// stacks file) named instead.
func withoutPerRound(t *testing.T, d map[string]any) map[string]any {
	t.Helper()
	env := d["environ"].(map[string]any)
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), filepath.Dir(env["ROVER_AGENT_SOCKET"].(string)), "(agent dir)")
	text = strings.ReplaceAll(text, env["ROVER_STACKS_FILE"].(string), "(stacks file)")
	var out map[string]any
	if err := json.Unmarshal([]byte(text), &out); err != nil {
		t.Fatal(err)
	}
	env = map[string]any{}
	for k, v := range out["environ"].(map[string]any) {
		if slices.Contains(perRoundVars, k) {
			v = "(per round)"
		}
		env[k] = v
	}
	out["environ"] = env
	return out
}

// starts returns how the agent started round's local ranks: "standby" or
// the reason it started them cold.
func starts(out string, round int) map[string]string {
	re := regexp.MustCompile(fmt.Sprintf(`msg="worker started (in its standby interpreter|cold)".* round=%d .*local_rank=(\d+)(?:.* why=("[^"]*"|\S+))?`, round))
	got := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		if m[1] == "cold" {
			got[m[2]] = strings.Trim(m[3], `"`)
		} else {
			got[m[2]] = "standby"
		}
	}
	return got
}

// awaitStandbys waits until both local ranks' standbys are ready and
// returns their pids.
func awaitStandbys(t *testing.T, out func() string) map[string]int {
	t.Helper()
	re := regexp.MustCompile(`msg="standby worker interpreter ready".* local_rank=(\d+) pid=(\d+)`)
	pids := map[string]int{}
	waitFor(t, jobTimeout, "both standby interpreters to be ready", func() bool {
		for _, m := range re.FindAllStringSubmatch(out(), -1) {
			pids[m[1]], _ = strconv.Atoi(m[2])
		}
		return len(pids) == 2
	})
	return pids
}

// TestStandbyRestartSeesAColdStart restarts a 2-worker job once, with the
// standbys on and off: the restart runs both workers in their standbys
// (off: cold), and every worker, of either start and either run, sees the
// same start as restart 0's cold worker of its rank, but for the values of
// the per-round variables (torchrun's env contract on both paths).
func TestStandbyRestartSeesAColdStart(t *testing.T) {
	waitReady := func(out func() string) { awaitStandbys(t, out) }
	dir := t.TempDir() // both runs in one working directory
	outOn, on, _ := standbyJobIn(t, dir, "first:exit:3", 0, waitReady)
	if got := starts(outOn, 2); !cmp.Equal(got, map[string]string{"0": "standby", "1": "standby"}) {
		t.Errorf("restart 1's workers started %v, want both in their standbys:\n%s", got, outOn)
	}
	if got := starts(outOn, 1); !cmp.Equal(got, map[string]string{"0": "no standby", "1": "no standby"}) {
		t.Errorf("restart 0's workers started %v, want both cold (no standby yet)", got)
	}
	outOff, off, _ := standbyJobIn(t, dir, "first:exit:3", 0, nil, "--warm-standby=false")
	if strings.Contains(outOff, "standby") {
		t.Errorf("with --warm-standby=false the agent still used standbys:\n%s", outOff)
	}
	for _, rank := range []string{"0", "1"} {
		cold := withoutPerRound(t, on["0-"+rank])
		for name, d := range map[string]map[string]any{"standby restart": on["1-"+rank], "cold restart": off["1-"+rank], "cold first start": off["0-"+rank]} {
			if d == nil {
				t.Fatalf("rank %s: no dump of the %s", rank, name)
			}
			if diff := cmp.Diff(cold, withoutPerRound(t, d)); diff != "" {
				t.Errorf("rank %s: the %s differs from the first cold start (-cold +%s):\n%s", rank, name, name, diff)
			}
		}
		if on["1-"+rank]["environ"].(map[string]any)["TORCHELASTIC_RESTART_COUNT"] != "1" {
			t.Errorf("rank %s: the standby restart's TORCHELASTIC_RESTART_COUNT is not 1", rank)
		}
	}
}

// TestStandbyKilledStartsCold kills local rank 0's standby before the
// restart: that rank restarts cold, the other in its standby, and the job
// finishes.
func TestStandbyKilledStartsCold(t *testing.T) {
	killStandby := func(out func() string) {
		pids := awaitStandbys(t, out)
		if err := syscall.Kill(pids["0"], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	out, dumps, _ := standbyJob(t, "first:exit:3", 0, killStandby)
	got := starts(out, 2)
	if got["1"] != "standby" || !strings.HasPrefix(got["0"], "standby exited") {
		t.Errorf("restart 1's workers started %v, want local rank 0 cold (standby exited), 1 in its standby:\n%s", got, out)
	}
	if len(dumps) != 4 {
		t.Errorf("%d dumps, want 4 (2 ranks, 2 starts)", len(dumps))
	}
}

// TestStandbyWorkerFailsLikeACold one: rank 0 fails the same way on both
// starts, cold (restart 0) and in its standby (restart 1), and the agent
// reports the same failure both times: the exit (status under torch's
// @record, or death by SIGKILL) and the error file @record wrote.
func TestStandbyWorkerFailsLikeACold(t *testing.T) {
	failed := regexp.MustCompile(`msg="worker failed" .*round=(\d) rank=0 local_rank=0 exit="([^"]*)"`)
	for _, tt := range []struct{ end, exit string }{{"record", "exit status 1"}, {"kill", "killed by signal 9 (SIGKILL)"}} {
		t.Run(tt.end, func(t *testing.T) {
			waitReady := func(out func() string) { awaitStandbys(t, out) }
			out, _, logs := standbyJob(t, "every:"+tt.end, 1, waitReady)
			if got := starts(out, 2); got["0"] != "standby" {
				t.Fatalf("restart 1's rank 0 started %q, want in its standby:\n%s", got["0"], out)
			}
			exits := map[string]string{}
			for _, m := range failed.FindAllStringSubmatch(out, -1) {
				exits[m[1]] = m[2]
			}
			if want := map[string]string{"1": tt.exit, "2": tt.exit}; !cmp.Equal(exits, want) {
				t.Errorf("rank 0's failures by round: %v, want %v:\n%s", exits, want, out)
			}
			files, _ := filepath.Glob(filepath.Join(logs, "*", "attempt_*", "0", "error.json"))
			if tt.end == "kill" {
				if len(files) != 0 {
					t.Errorf("error files %v of a worker killed by a signal", files)
				}
				return
			}
			if len(files) != 2 {
				t.Fatalf("error files %v, want one per start", files)
			}
			var msgs []string
			for _, f := range files {
				var rec struct {
					Message struct {
						Message   string `json:"message"`
						ExtraInfo struct {
							PyCallstack string `json:"py_callstack"`
						} `json:"extraInfo"`
					} `json:"message"`
				}
				b, err := os.ReadFile(f)
				if err == nil {
					err = json.Unmarshal(b, &rec)
				}
				if err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				msgs = append(msgs, rec.Message.Message+"\n"+rec.Message.ExtraInfo.PyCallstack)
			}
			if msgs[0] != msgs[1] || !strings.Contains(msgs[0], "ValueError: boom under record") {
				t.Errorf("the error files differ or lack the exception:\ncold:\n%s\nstandby:\n%s", msgs[0], msgs[1])
			}
		})
	}
}
