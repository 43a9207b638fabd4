package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roverml/rover/internal/testbuf"
)

// restartPhases are BenchmarkWorkerRestart's phases, in order, and the total:
//
//	detect      the SIGKILL, to the agent reaping the killed worker
//	stop        that, to the other workers stopped (the group's end)
//	persist     that, to the memory snapshots made durable (the failure report starts)
//	rendezvous  that, to the new round's world (the agent starts workers)
//	spawn       that, to the last worker running train.py (fork, exec, interpreter start)
//	import      that, to torch imported on every rank
//	pg          that, to the process group formed on every rank (gloo)
//	restore     that, to the checkpoint loaded on every rank (from memory)
//	first-step  that, to the first step after it done on every rank
//	total       the SIGKILL, to that first step on every rank
var restartPhases = []string{"detect", "stop", "persist", "rendezvous", "spawn", "import", "pg", "restore", "first-step", "total"}

// BenchmarkWorkerRestart measures a worker restart's downtime on `rover run`:
// a 2-worker DDP job on this node (gloo, CPU, a ~100 ms step, a flash
// checkpoint to memory every 2 steps, persisted every 20), one of whose
// workers, chosen at random, is SIGKILLed b.N times, once per round; each
// restart's phases are logged and the medians reported (make bench-restart;
// docs/benchmarks.md). Every time is a log line's, all on this machine: the
// agent's (slog) and the workers' own --log-times events.
func BenchmarkWorkerRestart(b *testing.B) {
	dir := b.TempDir()
	times := filepath.Join(dir, "times.log")
	saves := filepath.Join(dir, "saves.log")
	stderr := &testbuf.Buffer{}
	cmd := exec.Command(roverBin, "run", "--standalone", "--nproc-per-node", "2",
		"--max-restarts", strconv.Itoa(b.N+1), "--checkpoint-dir", filepath.Join(dir, "ckpt"),
		filepath.Join(repoRoot, "examples", "ddp", "train.py"), "--steps", "1000000",
		"--flash", "--flash-every", "2", "--ckpt-every", "20", "--step-sleep", "0.1",
		"--log-times", times, "--log-saves", saves)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHON_EXEC="+pythonExec, "PYTHONUNBUFFERED=1")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		_ = cmd.Wait()
		if b.Failed() {
			b.Logf("rover run's output:\n%s", stderr.String())
		}
	}()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	all := make([][]time.Duration, len(restartPhases))
	for restart := range b.N {
		ph := restartOnce(b, restart, rng.IntN(2), times, saves, stderr)
		for j := range ph {
			all[j] = append(all[j], ph[j])
		}
		// Printed, not logged: a benchmark's log is cut to 10 lines.
		fmt.Printf("restart %d of %d: %s; %s\n", restart+1, b.N, formatPhases(restartPhases, ph), workerStarts(stderr.String(), restart+2))
	}
	med := make([]time.Duration, len(restartPhases))
	for j, n := range restartPhases {
		med[j] = median(all[j])
		b.ReportMetric(float64(med[j].Microseconds())/1000, n+"-ms")
	}
	fmt.Printf("median of %d: %s\n", b.N, formatPhases(restartPhases, med))
}

// restartOnce waits until the workers of restart count restart have saved a
// snapshot to memory twice, SIGKILLs rank victim, waits for every rank of the
// next restart to complete a step, and returns the phases.
func restartOnce(b *testing.B, restart, victim int, times, saves string, stderr *testbuf.Buffer) []time.Duration {
	var pid, first int
	waitFor(b, 3*time.Minute, fmt.Sprintf("restart %d's rank %d to save to memory twice", restart, victim), func() bool {
		var steps []int
		pid, steps = savesOf(saves, restart, victim)
		if len(steps) > 0 && first == 0 {
			first = steps[0]
		}
		return len(steps) >= 2 && slices.Max(steps) > first
	})
	if standbyOn() {
		// One fault in a while, not one per second: the kill waits for the
		// standby interpreters that the restart is to use to be ready.
		want := 2 * (restart + 1)
		waitFor(b, 3*time.Minute, fmt.Sprintf("%d standby interpreters ready", want), func() bool {
			return strings.Count(stderr.String(), `msg="standby worker interpreter ready"`) >= want
		})
	}
	kill := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		b.Fatal(err)
	}
	next := restart + 1
	var ev map[string]time.Time
	waitFor(b, 3*time.Minute, fmt.Sprintf("every rank of restart %d to train", next), func() bool {
		ev = restartEvents(times, next)
		return !ev["trained"].IsZero()
	})
	round := next + 1 // rover run's rounds: one per restart, from 1
	var exited time.Time
	var stopped, reporting, starting time.Time
	waitFor(b, time.Minute, "the agent's log of the restart", func() bool {
		text := stderr.String()
		exited = attrTime(text, fmt.Sprintf(`msg="worker failed".* round=%d .*exited=(\S+)`, round-1))
		stopped = lineTime(text, fmt.Sprintf(`msg="worker failed".* round=%d `, round-1))
		reporting = lineTime(text, fmt.Sprintf(`msg="reporting the failure".* round=%d\b`, round-1))
		starting = lineTime(text, fmt.Sprintf(`msg="starting workers".* round=%d `, round))
		return !exited.IsZero() && !stopped.IsZero() && !reporting.IsZero() && !starting.IsZero()
	})
	ph := []time.Time{kill, exited, stopped, reporting, starting, ev["start"], ev["imported"], ev["joined"], ev["resumed"], ev["trained"]}
	out := make([]time.Duration, 0, len(ph))
	for i := 1; i < len(ph); i++ {
		out = append(out, ph[i].Sub(ph[i-1]))
	}
	return append(out, ev["trained"].Sub(kill))
}

// standbyOn reports whether rover run keeps standby interpreters
// (--warm-standby, on unless $ROVER_WARM_STANDBY says false).
func standbyOn() bool {
	on, err := strconv.ParseBool(os.Getenv("ROVER_WARM_STANDBY"))
	return err != nil || on
}

// workerStarts says how the agent started round's workers: in their
// standby interpreters (--warm-standby) or cold, and why.
func workerStarts(log string, round int) string {
	re := regexp.MustCompile(fmt.Sprintf(`msg="worker started (in its standby interpreter|cold)".* round=%d .*local_rank=(\d+)(?:.* why=("[^"]*"|\S+))?`, round))
	var parts []string
	for _, m := range re.FindAllStringSubmatch(log, -1) {
		how := "standby"
		if m[1] == "cold" {
			how = "cold (" + strings.Trim(m[3], `"`) + ")"
		}
		parts = append(parts, "local rank "+m[2]+" "+how)
	}
	if len(parts) == 0 {
		return "no worker start logged"
	}
	return strings.Join(parts, ", ")
}

var restartSaveLine = regexp.MustCompile(`restart=(\d+) rank=(\d+) pid=(\d+) step=(\d+)`)

// savesOf returns the pid of rank in restart and the steps it saved.
func savesOf(path string, restart, rank int) (pid int, steps []int) {
	s, _ := os.ReadFile(path)
	for _, m := range restartSaveLine.FindAllStringSubmatch(string(s), -1) {
		if m[1] != strconv.Itoa(restart) || m[2] != strconv.Itoa(rank) {
			continue
		}
		pid, _ = strconv.Atoi(m[3])
		step, _ := strconv.Atoi(m[4])
		steps = append(steps, step)
	}
	return pid, steps
}

// restartEvents returns, per --log-times event of restart, the latest time
// either rank logged it, once both have (else zero).
func restartEvents(path string, restart int) map[string]time.Time {
	return loggedByAll(path, 2, func(kv map[string]string, _ time.Time) bool { return kv["restart"] == strconv.Itoa(restart) })
}

// lineTime is the time of the first slog line of text matching pattern
// (zero: none).
func lineTime(text, pattern string) time.Time {
	re := regexp.MustCompile(pattern)
	for _, line := range strings.Split(text, "\n") {
		if !re.MatchString(line) {
			continue
		}
		if m := slogTime.FindStringSubmatch(line); m != nil {
			if t, err := time.Parse(time.RFC3339Nano, m[1]); err == nil {
				return t
			}
		}
	}
	return time.Time{}
}

// attrTime is the time pattern's first group holds on the first line of
// text matching it (zero: none).
func attrTime(text, pattern string) time.Time {
	m := regexp.MustCompile(pattern).FindStringSubmatch(text)
	if m == nil {
		return time.Time{}
	}
	t, _ := time.Parse(time.RFC3339Nano, m[1])
	return t
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
