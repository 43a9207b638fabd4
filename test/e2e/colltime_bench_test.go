package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"
)

// BenchmarkCollectiveTimingOverhead measures what collective timing (the
// worker hook of docs/design/collective-timing.md) costs the DDP example:
// b.N pairs of `rover run --standalone --nproc-per-node 2` jobs of
// $COLLTIME_STEPS steps (default 400), one with the hook and one with
// ROVER_COLLECTIVE_TIMING=0, in alternating order so that the machine's
// load falls on both alike; the step time is the example's own ("done: N
// steps in S"), from its first step to its last. $COLLTIME_ALLREDUCE picks
// the example's gradient averaging: "ordered" (its own communication hook,
// which the hook wraps) or "ddp" (stock DDP, where the hook registers its
// Python equivalent of DDP's built-in all-reduce). It reports the medians
// and the median of the pairs' relative differences (make bench-colltime;
// docs/benchmarks.md).
func BenchmarkCollectiveTimingOverhead(b *testing.B) {
	steps := 400
	if s := os.Getenv("COLLTIME_STEPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 10 {
			b.Fatalf("COLLTIME_STEPS=%q: want a number of steps, at least 10", s)
		}
		steps = n
	}
	allreduce := os.Getenv("COLLTIME_ALLREDUCE")
	if allreduce == "" {
		allreduce = "ordered"
	}
	if allreduce != "ordered" && allreduce != "ddp" {
		b.Fatalf("COLLTIME_ALLREDUCE=%q: want ordered or ddp", allreduce)
	}
	var on, off []time.Duration
	var diffs []float64
	for i := range b.N {
		var with, without time.Duration
		for k := range 2 {
			timed := (i+k)%2 == 0
			d := exampleStepTime(b, timed, steps, allreduce)
			if timed {
				with = d
			} else {
				without = d
			}
		}
		on, off = append(on, with), append(off, without)
		diffs = append(diffs, float64(with-without)/float64(without))
		// Printed, not logged: a benchmark's log is cut to 10 lines.
		fmt.Printf("pair %d of %d: %s per step with the hook, %s without (%+.2f%%)\n", i+1, b.N, with, without, 100*diffs[i])
	}
	slices.Sort(diffs)
	mdiff := diffs[len(diffs)/2]
	if len(diffs)%2 == 0 {
		mdiff = (diffs[len(diffs)/2-1] + diffs[len(diffs)/2]) / 2
	}
	mon, moff := median(on), median(off)
	b.ReportMetric(float64(mon.Nanoseconds())/1e6, "on-ms/step")
	b.ReportMetric(float64(moff.Nanoseconds())/1e6, "off-ms/step")
	b.ReportMetric(100*mdiff, "overhead-%")
	fmt.Printf("median of %d pairs (%d steps, --allreduce %s): %s per step with the hook, %s without; median difference %+.2f%%\n",
		b.N, steps, allreduce, mon, moff, 100*mdiff)
}

var doneLine = regexp.MustCompile(`done: (\d+) steps in ([0-9.]+)s`)

// exampleStepTime runs the DDP example once and returns its seconds per step.
func exampleStepTime(b *testing.B, timed bool, steps int, allreduce string) time.Duration {
	b.Helper()
	dir := b.TempDir()
	cmd := exec.Command(roverBin, "run", "--standalone", "--nproc-per-node", "2",
		filepath.Join(repoRoot, "examples", "ddp", "train.py"), "--steps", strconv.Itoa(steps), "--ckpt-every", "0",
		"--ckpt", filepath.Join(dir, "ckpt.pt"), "--allreduce", allreduce)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHON_EXEC="+pythonExec, "PYTHONUNBUFFERED=1", "ROVER_COLLECTIVE_TIMING="+map[bool]string{true: "1", false: "0"}[timed])
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("rover run (collective timing %v): %v\n%s", timed, err, out)
	}
	m := doneLine.FindSubmatch(out)
	if m == nil {
		b.Fatalf("the example printed no %q line:\n%s", doneLine, out)
	}
	n, _ := strconv.Atoi(string(m[1]))
	s, _ := strconv.ParseFloat(string(m[2]), 64)
	return time.Duration(s / float64(n) * float64(time.Second))
}
