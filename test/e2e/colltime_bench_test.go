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
	"testing"
	"time"
)

// BenchmarkCollectiveTimingOverhead measures what collective timing (the
// worker hook of docs/design/collective-timing.md) costs the DDP example:
// b.N pairs of `rover run --standalone --nproc-per-node 2` jobs of
// $COLLTIME_STEPS steps (default 400), one with the hook
// (ROVER_COLLECTIVE_TIMING=$COLLTIME_TIMING: 1, the default, or always) and
// one with ROVER_COLLECTIVE_TIMING=0, in alternating order so that the
// machine's load falls on both alike; the step time is the example's own
// ("done: N steps in S"), from its first step to its last.
// $COLLTIME_ALLREDUCE picks the example's gradient averaging: "ordered"
// (its own communication hook, which the hook wraps) or "ddp" (stock DDP,
// where the hook registers its Python equivalent of DDP's built-in
// all-reduce: with 1 only once the steps are long enough for it to cost
// under 1% of one, with always at the first step). $COLLTIME_STEP_SLEEP
// (seconds) is the example's --step-sleep, for longer steps. It reports
// the medians and the median of the pairs' relative differences (make
// bench-colltime; docs/benchmarks.md).
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
	timing := colltimeTiming(b)
	sleep := os.Getenv("COLLTIME_STEP_SLEEP")
	if sleep == "" {
		sleep = "0"
	}
	if f, err := strconv.ParseFloat(sleep, 64); err != nil || f < 0 || f > 10 {
		b.Fatalf("COLLTIME_STEP_SLEEP=%q: want seconds to sleep in every step, 0 to 10", sleep)
	}
	var on, off []time.Duration
	var diffs []float64
	for i := range b.N {
		var with, without time.Duration
		for k := range 2 {
			timed := (i+k)%2 == 0
			d := exampleStepTime(b, map[bool]string{true: timing, false: "0"}[timed], steps, allreduce, sleep)
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
	mdiff := medianFloat(diffs)
	mon, moff := median(on), median(off)
	b.ReportMetric(float64(mon.Nanoseconds())/1e6, "on-ms/step")
	b.ReportMetric(float64(moff.Nanoseconds())/1e6, "off-ms/step")
	b.ReportMetric(100*mdiff, "overhead-%")
	fmt.Printf("median of %d pairs (%d steps, --allreduce %s, --step-sleep %s, ROVER_COLLECTIVE_TIMING=%s): %s per step with the hook, %s without; median difference %+.2f%%\n",
		b.N, steps, allreduce, sleep, timing, mon, moff, 100*mdiff)
}

// colltimeTiming is $COLLTIME_TIMING, the ROVER_COLLECTIVE_TIMING of the
// runs with the hook: 1 (the default) or always.
func colltimeTiming(b *testing.B) string {
	switch v := os.Getenv("COLLTIME_TIMING"); v {
	case "", "1":
		return "1"
	case "always":
		return v
	default:
		b.Fatalf("COLLTIME_TIMING=%q: want 1 (the adaptive default) or always", v)
		return ""
	}
}

// medianFloat is the median of xs (not empty).
func medianFloat(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

var doneLine = regexp.MustCompile(`done: (\d+) steps in ([0-9.]+)s`)

// exampleStepTime runs the DDP example once, with ROVER_COLLECTIVE_TIMING
// timing, and returns its seconds per step.
func exampleStepTime(b *testing.B, timing string, steps int, allreduce, sleep string) time.Duration {
	b.Helper()
	dir := b.TempDir()
	cmd := exec.Command(roverBin, "run", "--standalone", "--nproc-per-node", "2",
		filepath.Join(repoRoot, "examples", "ddp", "train.py"), "--steps", strconv.Itoa(steps), "--ckpt-every", "0",
		"--ckpt", filepath.Join(dir, "ckpt.pt"), "--allreduce", allreduce, "--step-sleep", sleep)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHON_EXEC="+pythonExec, "PYTHONUNBUFFERED=1", "ROVER_COLLECTIVE_TIMING="+timing)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("rover run (ROVER_COLLECTIVE_TIMING=%s): %v\n%s", timing, err, out)
	}
	m := doneLine.FindSubmatch(out)
	if m == nil {
		b.Fatalf("the example printed no %q line:\n%s", doneLine, out)
	}
	n, _ := strconv.Atoi(string(m[1]))
	s, _ := strconv.ParseFloat(string(m[2]), 64)
	return time.Duration(s / float64(n) * float64(time.Second))
}

var (
	inProcessLine    = regexp.MustCompile(`in-process: \d+ steps, --allreduce \w+: ([0-9.]+) us per step with the hook, ([0-9.]+) us without`)
	inProcessCPU     = regexp.MustCompile(`in-process CPU: ([0-9.]+) us per step with the hook, ([0-9.]+) us without`)
	inProcessBuckets = regexp.MustCompile(`in-process: \d+ gradient buckets, [^\n]*`)
)

// BenchmarkCollectiveTimingInProcess measures the same cost with less
// noise: two ranks (gloo, no rover run) each train two copies of the
// example's model, with and without the hook, alternating steps in one
// process (testdata/colltime_ab.py; forward and backward only); b.N such
// jobs, the medians of their medians reported, of wall-clock time and of
// the process's CPU time per step (which other load on the machine
// disturbs less). $COLLTIME_STEPS (default
// 2000), $COLLTIME_ALLREDUCE and $COLLTIME_TIMING as for
// BenchmarkCollectiveTimingOverhead; $COLLTIME_HIDDEN and $COLLTIME_BATCH
// set the model's hidden width and the samples per step (default 64 and
// 16, the example's), for longer steps with more gradient buckets.
func BenchmarkCollectiveTimingInProcess(b *testing.B) {
	steps := os.Getenv("COLLTIME_STEPS")
	if steps == "" {
		steps = "2000"
	}
	allreduce := os.Getenv("COLLTIME_ALLREDUCE")
	if allreduce == "" {
		allreduce = "ordered"
	}
	timing := colltimeTiming(b)
	var size []string // the model's, where set
	for _, k := range []string{"HIDDEN", "BATCH"} {
		v := os.Getenv("COLLTIME_" + k)
		if v == "" {
			continue
		}
		if n, err := strconv.Atoi(v); err != nil || n < 1 || n > 1<<14 {
			b.Fatalf("COLLTIME_%s=%q: want a whole number, 1 to 16384", k, v)
		}
		size = append(size, k+"="+v)
	}
	script := filepath.Join(repoRoot, "test", "e2e", "testdata", "colltime_ab.py")
	var on, off []time.Duration
	var diffs, cpuDiffs []float64
	for i := range b.N {
		port := strconv.Itoa(20000 + rand.IntN(20000))
		env := append(os.Environ(), "ROVER_PYTHON="+filepath.Join(repoRoot, "python"), "PORT="+port, "STEPS="+steps, "ALLREDUCE="+allreduce,
			"ROVER_COLLECTIVE_TIMING="+timing)
		env = append(env, size...)
		peer := exec.Command(pythonExec, script)
		peer.Env = append(env, "RANK=1")
		if err := peer.Start(); err != nil {
			b.Fatal(err)
		}
		main := exec.Command(pythonExec, script)
		main.Env = append(env, "RANK=0")
		out, err := main.CombinedOutput()
		peerErr := peer.Wait()
		if err != nil || peerErr != nil {
			b.Fatalf("colltime_ab.py: rank 0: %v, rank 1: %v\n%s", err, peerErr, out)
		}
		m := inProcessLine.FindSubmatch(out)
		if m == nil {
			b.Fatalf("colltime_ab.py printed no %q line:\n%s", inProcessLine, out)
		}
		with, _ := strconv.ParseFloat(string(m[1]), 64)
		without, _ := strconv.ParseFloat(string(m[2]), 64)
		on, off = append(on, time.Duration(with*1e3)), append(off, time.Duration(without*1e3))
		diffs = append(diffs, (with-without)/without)
		c := inProcessCPU.FindSubmatch(out)
		if c == nil {
			b.Fatalf("colltime_ab.py printed no %q line:\n%s", inProcessCPU, out)
		}
		cpuWith, _ := strconv.ParseFloat(string(c[1]), 64)
		cpuWithout, _ := strconv.ParseFloat(string(c[2]), 64)
		cpuDiffs = append(cpuDiffs, (cpuWith-cpuWithout)/cpuWithout)
		fmt.Printf("job %d of %d: %s per step with the hook, %s without (%+.2f%%); CPU %.1f us with, %.1f us without (%+.2f%%); %s\n",
			i+1, b.N, on[i], off[i], 100*(with-without)/without, cpuWith, cpuWithout, 100*cpuDiffs[i], inProcessBuckets.Find(out))
	}
	mon, moff, mdiff := median(on), median(off), medianFloat(diffs)
	b.ReportMetric(float64(mon.Nanoseconds())/1e3, "on-us/step")
	b.ReportMetric(float64(moff.Nanoseconds())/1e3, "off-us/step")
	b.ReportMetric(100*mdiff, "overhead-%")
	b.ReportMetric(100*medianFloat(cpuDiffs), "cpu-overhead-%")
	fmt.Printf("median of %d jobs (%s steps, --allreduce %s, ROVER_COLLECTIVE_TIMING=%s, %v): %s per step with the hook, %s without; "+
		"median difference %+.2f%% (CPU time per step: %+.2f%%)\n", b.N, steps, allreduce, timing, size, mon, moff, 100*mdiff, 100*medianFloat(cpuDiffs))
}

var forwardLine = regexp.MustCompile(`forward: ([0-9.]+) us per call with the rule, ([0-9.]+) us bare: ([0-9.]+) us of bookkeeping`)

// BenchmarkCollectiveTimingForward measures what collective timing adds to
// each forward call of a stock DDP model whose buckets it leaves untimed
// (the adaptive rule's bookkeeping), on a fake DDP without torch
// (testdata/colltime_forward.py): b.N runs, the median of their best-of-7
// figures reported, in microseconds per call.
func BenchmarkCollectiveTimingForward(b *testing.B) {
	var extra []float64
	for i := range b.N {
		cmd := exec.Command(pythonExec, filepath.Join(repoRoot, "test", "e2e", "testdata", "colltime_forward.py"))
		cmd.Env = append(os.Environ(), "ROVER_PYTHON="+filepath.Join(repoRoot, "python"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("colltime_forward.py: %v\n%s", err, out)
		}
		m := forwardLine.FindSubmatch(out)
		if m == nil {
			b.Fatalf("colltime_forward.py printed no %q line:\n%s", forwardLine, out)
		}
		us, _ := strconv.ParseFloat(string(m[3]), 64)
		extra = append(extra, us)
		fmt.Printf("run %d of %d: %s", i+1, b.N, out)
	}
	b.ReportMetric(medianFloat(extra), "us/forward")
	fmt.Printf("median of %d runs: %.3f us of bookkeeping per forward call\n", b.N, medianFloat(extra))
}
