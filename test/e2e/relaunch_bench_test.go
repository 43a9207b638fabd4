package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roverml/rover/internal/testbuf"
)

// BenchmarkNodeRelaunch measures how long a `rover submit` job of two nodes
// of two DDP workers takes to train again after one node's agent is
// SIGKILLed, split into phases (make bench-relaunch; docs/benchmarks.md):
//
//	detect      the kill, to the master deciding to relaunch the node
//	launch      that decision, to the replacement agent's first log line
//	rendezvous  that, to the new round's world (the agent starts workers)
//	worker      that, to the last worker process running train.py
//	init        that, to the process group formed (import torch, gloo)
//	restore     that, to the checkpoint loaded on every rank
//	first-step  that, to the first step after it done on every rank
//	total       the kill, to that first step
//
// Every time is read from a log line's timestamp, all on this machine.
func BenchmarkNodeRelaunch(b *testing.B) {
	names := []string{"detect", "launch", "rendezvous", "worker", "init", "restore", "first-step", "total"}
	sums := make([]time.Duration, len(names))
	for i := range b.N {
		ph := relaunchOnce(b, i)
		for j := range sums {
			sums[j] += ph[j]
		}
		b.Logf("run %d: %s", i, formatPhases(names, ph))
	}
	for j, n := range names {
		b.ReportMetric(float64(sums[j].Microseconds())/1000/float64(b.N), n+"-ms")
	}
}

func formatPhases(names []string, ph []time.Duration) string {
	var s []string
	for j, n := range names {
		s = append(s, fmt.Sprintf("%s %v", n, ph[j].Round(time.Millisecond)))
	}
	return strings.Join(s, ", ")
}

// relaunchOnce runs the job, kills node 1's agent once a checkpoint is
// committed, waits for training to resume, stops the job and returns the
// phases.
func relaunchOnce(b *testing.B, run int) []time.Duration {
	dir := b.TempDir()
	job := fmt.Sprintf("relaunch%d", run)
	times := filepath.Join(dir, "times.log")
	stderr := &testbuf.Buffer{}
	cmd := exec.Command(roverBin, "submit", "--quiet", "--job-dir", filepath.Join(dir, "job"),
		"--rdzv-id", job, "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-conf", "last_call_timeout=1s",
		"--checkpoint-dir", filepath.Join(dir, "ckpt"),
		filepath.Join(repoRoot, "examples", "ddp", "train.py"), "--steps", "100000", "--flash", "--ckpt-every", "20",
		"--step-sleep", "0.02", "--log-times", times)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHON_EXEC="+pythonExec, "PYTHONUNBUFFERED=1")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGINT) // rover submit stops every node
		_ = cmd.Wait()
	}()
	waitFor(b, 3*time.Minute, "a committed checkpoint", func() bool {
		s, _ := os.ReadFile(filepath.Join(dir, "ckpt", "latest"))
		n, _ := strconv.Atoi(strings.TrimSpace(string(s)))
		return n >= 40
	})
	victim := job + "-worker-1-0"
	var pid int
	waitFor(b, time.Minute, "the agent of "+victim, func() bool {
		pid = agentPid(victim)
		return pid != 0
	})
	kill := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		b.Fatal(err)
	}
	var ev map[string]time.Time
	waitFor(b, 3*time.Minute, "every rank to train again", func() bool {
		ev = lastEvents(times, kill)
		return !ev["trained"].IsZero()
	})
	nodeLog := filepath.Join(dir, "job", "nodes", job+"-worker-1-1", "stderr.log")
	detect := logTime(b, stderr.String(), `msg="node manager: Delete".*node=`+victim)
	launch := logTime(b, readFile(b, nodeLog), `level=`)
	rdzv := logTime(b, readFile(b, nodeLog), `msg="starting workers"`)
	ph := []time.Time{kill, detect, launch, rdzv, ev["start"], ev["joined"], ev["resumed"], ev["trained"]}
	out := make([]time.Duration, 0, len(ph))
	for i := 1; i < len(ph); i++ {
		out = append(out, ph[i].Sub(ph[i-1]))
	}
	return append(out, ev["trained"].Sub(kill))
}

// lastEvents returns, per --log-times event, the latest time any of the 4
// ranks logged it after since, once every rank has logged it (else zero).
func lastEvents(path string, since time.Time) map[string]time.Time {
	return loggedByAll(path, 4, func(_ map[string]string, t time.Time) bool { return !t.Before(since) })
}

// loggedByAll returns, per --log-times event of the step log at path, the
// latest time it was logged on the lines keep accepts, once ranks distinct
// ranks have logged it (else zero).
func loggedByAll(path string, ranks int, keep func(kv map[string]string, t time.Time) bool) map[string]time.Time {
	s, _ := os.ReadFile(path)
	seen := map[string]map[string]bool{}
	last := map[string]time.Time{}
	for _, line := range strings.Split(string(s), "\n") {
		kv := map[string]string{}
		for _, w := range strings.Fields(line) {
			if k, v, ok := strings.Cut(w, "="); ok {
				kv[k] = v
			}
		}
		sec, err := strconv.ParseFloat(kv["t"], 64)
		if err != nil {
			continue
		}
		t := time.Unix(0, int64(sec*1e9))
		if !keep(kv, t) {
			continue
		}
		e := kv["event"]
		if seen[e] == nil {
			seen[e] = map[string]bool{}
		}
		seen[e][kv["rank"]] = true
		if t.After(last[e]) {
			last[e] = t
		}
	}
	out := map[string]time.Time{}
	for e, rs := range seen {
		if len(rs) == ranks {
			out[e] = last[e]
		}
	}
	return out
}

var slogTime = regexp.MustCompile(`time=(\S+)`)

// logTime returns the time of the first slog line of text matching pattern.
func logTime(b *testing.B, text, pattern string) time.Time {
	t := lineTime(text, pattern)
	if t.IsZero() {
		b.Fatalf("no log line matches %q in:\n%s", pattern, text)
	}
	return t
}

func readFile(b *testing.B, path string) string {
	s, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return string(s)
}
