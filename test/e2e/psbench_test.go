package e2e

import (
	"bufio"
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

// psTimes reads OUT/times (ps_roles.py with PS_ROLES_TIMES=1): each
// line "ps INDEX start|add UNIX", in order.
type psTime struct {
	ps   int
	what string
	at   time.Time
}

func readPSTimes(tb testing.TB, out string) []psTime {
	tb.Helper()
	f, err := os.Open(filepath.Join(out, "times"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var ts []psTime
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var t psTime
		var secs float64
		if n, _ := fmt.Sscanf(sc.Text(), "ps %d %s %f", &t.ps, &t.what, &secs); n == 3 {
			t.at = time.Unix(0, int64(secs*1e9))
			ts = append(ts, t)
		}
	}
	return ts
}

// psPhases finds, after from, PS ps's first start and its first add after
// that start, and its last add before from.
func psPhases(ts []psTime, ps int, from time.Time) (lastAdd, start, firstAdd time.Time) {
	for _, t := range ts {
		if t.ps != ps {
			continue
		}
		switch {
		case t.at.Before(from) && t.what == "add":
			lastAdd = t.at
		case !t.at.Before(from) && t.what == "start" && start.IsZero():
			start = t.at
		case !start.IsZero() && t.what == "add" && firstAdd.IsZero():
			firstAdd = t.at
		}
	}
	return lastAdd, start, firstAdd
}

// psBenchJob submits a parameter-server job of ps_roles.py whose workers
// step every 20 ms, with the PS's times on: 2 PS (auto-scaled when hot is
// set: that PS burns half a core over a 200m request), 3 workers, 1 chief.
func psBenchJob(b *testing.B, job, out, hot string) *submitted {
	env := map[string]string{"PS_ROLES_STEP_SLEEP": "0.02", "PS_ROLES_TIMES": "1"}
	if hot != "" {
		env["PS_ROLES_HOT"] = hot
	}
	const steps = 100000 // the job is stopped once measured
	return submit(b, job, psScaleJob(b, job, out, steps, steps, 2, "200m", env))
}

// BenchmarkPSRecovery measures, under rover submit, a PS's failure to
// training resumed on it (make bench-ps; docs/benchmarks.md): PS 0 is
// SIGKILLed while the workers step every 20 ms;
//
//	relaunched  the kill, to the new PS 0 serving (restored from its checkpoint)
//	resumed     the kill, to the first step applied on the new PS 0
//	gap         PS 0's last step before the kill, to that first step
func BenchmarkPSRecovery(b *testing.B) {
	var total psInterruption
	for i := range b.N {
		out := b.TempDir()
		s := psBenchJob(b, uniqueJob(fmt.Sprintf("psrec%d", i)), out, "")
		waitFor(b, 2*time.Minute, "PS 0 to apply steps", func() bool {
			n := 0
			for _, t := range readPSTimes(b, out) {
				if t.ps == 0 && t.what == "add" {
					n++
				}
			}
			return n >= 20
		})
		pid, err := os.ReadFile(filepath.Join(out, "pid-ps-0"))
		if err != nil {
			b.Fatal(err)
		}
		p, _ := strconv.Atoi(string(pid))
		killed := time.Now()
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		total.add(b, i, "relaunched", measurePSInterruption(b, s, out, 0, killed))
	}
	total.report(b, "relaunched")
}

// psInterruption is how long training on one PS stopped, measured from a
// kill or a decision: to the new PS serving, to the first step applied on
// it (resumed), and from the old PS's last step to that first one (gap).
type psInterruption struct{ serving, resumed, gap time.Duration }

// measurePSInterruption waits for a step applied on the new PS ps after
// from, and stops s.
func measurePSInterruption(b *testing.B, s *submitted, out string, ps int, from time.Time) psInterruption {
	var last, start, first time.Time
	waitFor(b, 2*time.Minute, fmt.Sprintf("a step on the new PS %d", ps), func() bool {
		last, start, first = psPhases(readPSTimes(b, out), ps, from)
		return !first.IsZero()
	})
	s.stop(b)
	return psInterruption{serving: start.Sub(from), resumed: first.Sub(from), gap: first.Sub(last)}
}

// add adds run i's interruption to the total and logs it, calling the
// time to serving what serving names.
func (p *psInterruption) add(b *testing.B, i int, serving string, run psInterruption) {
	b.Helper()
	p.serving += run.serving
	p.resumed += run.resumed
	p.gap += run.gap
	b.Logf("run %d: %s %v, resumed %v, gap %v", i, serving, run.serving.Round(time.Millisecond),
		run.resumed.Round(time.Millisecond), run.gap.Round(time.Millisecond))
}

// report reports the mean of b.N runs' interruptions as serving-ms (named
// by serving), resumed-ms and gap-ms.
func (p psInterruption) report(b *testing.B, serving string) {
	mean := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(mean(p.serving), serving+"-ms")
	b.ReportMetric(mean(p.resumed), "resumed-ms")
	b.ReportMetric(mean(p.gap), "gap-ms")
}

// psLogTime reads the time of the first slog line of text holding msg.
func psLogTime(text, msg string) (time.Time, bool) {
	for _, line := range strings.Split(text, "\n") {
		if !strings.Contains(line, `msg="`+msg+`"`) {
			continue
		}
		if m := regexp.MustCompile(`time=(\S+)`).FindStringSubmatch(line); m != nil {
			t, err := time.Parse(time.RFC3339Nano, m[1])
			return t, err == nil
		}
	}
	return time.Time{}, false
}

// BenchmarkPSMigration measures, under rover submit, a hot PS's
// migration (make bench-ps): PS 1 burns half a core over its 200m
// request while the workers step every 20 ms; from the master's decision
// (its log line's time) to
//
//	serving   the new PS 1 serving at the same address (restored)
//	resumed   the first step applied on it
//	gap       the old PS 1's last step, to that first step
func BenchmarkPSMigration(b *testing.B) {
	var total psInterruption
	for i := range b.N {
		out := b.TempDir()
		s := psBenchJob(b, uniqueJob(fmt.Sprintf("psmigb%d", i)), out, "1")
		var decided time.Time
		waitFor(b, 2*time.Minute, "the migration decision", func() bool {
			var ok bool
			decided, ok = psLogTime(s.stderr.String(), "PS scaling")
			return ok
		})
		total.add(b, i, "serving", measurePSInterruption(b, s, out, 1, decided))
	}
	total.report(b, "serving")
}

// stop stops rover submit as Ctrl-C would and waits for it.
func (s *submitted) stop(tb testing.TB) {
	tb.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(time.Minute):
		tb.Fatal("rover submit did not stop within a minute of SIGTERM")
	}
}
