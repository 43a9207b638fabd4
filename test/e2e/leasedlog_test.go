package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// The log of completed shards that leased workers write (leased.py's --out,
// sdkworker's done.jsonl), and what a test may conclude from it.
//
// A worker writes a shard's line after the master took its completion, so a
// process that dies in between (SIGKILLed, or stopped by its agent when the
// workers restart: every worker of the job, not only the one killed) leaves
// a shard the master counts as done out of the log. leased.py therefore
// announces each completion first: a "pending" line with the shard's
// samples, then the shard's line once the master took it, or a "refused"
// line. A pending line left without its outcome is the one shard its
// process may have completed unseen; a sample in no shard line and in no
// such unresolved pending line was lost.

// sample is (epoch, index).
type sample = [2]int64

// leasedLog is what a log of completed shards says.
type leasedLog struct {
	done       map[sample]int  // sample -> shard lines that hold it
	lines      int             // shard lines
	unresolved map[sample]bool // samples of pending lines without an outcome
	pending    int             // such pending lines
}

// logLine is one line of the log; Pending and Refused lines are
// announcements and outcomes, the others (sdkworker writes only those) are
// completed shards.
type logLine struct {
	PID     int     `json:"pid"`
	Lease   string  `json:"lease"`
	Epoch   int64   `json:"epoch"`
	Indices []int64 `json:"indices"`
	Pending bool    `json:"pending"`
	Refused bool    `json:"refused"`
}

// parseLeasedLog reads the lines of a log; a line cut short by a kill is
// skipped.
func parseLeasedLog(text string) leasedLog {
	l := leasedLog{done: map[sample]int{}, unresolved: map[sample]bool{}}
	type key struct {
		pid   int
		lease string
	}
	var open []key
	announced := map[key][]int64{}
	epochs := map[key]int64{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		var s logLine
		if json.Unmarshal([]byte(line), &s) != nil {
			continue
		}
		k := key{s.PID, s.Lease}
		switch {
		case s.Pending:
			open = append(open, k)
			announced[k], epochs[k] = s.Indices, s.Epoch
			continue
		case s.Lease != "":
			delete(announced, k) // its outcome
		}
		if s.Refused {
			continue
		}
		l.lines++
		for _, i := range s.Indices {
			l.done[sample{s.Epoch, i}]++
		}
	}
	for _, k := range open {
		if idx, ok := announced[k]; ok {
			delete(announced, k)
			l.pending++
			for _, i := range idx {
				l.unresolved[sample{epochs[k], i}] = true
			}
		}
	}
	return l
}

// readLeasedLog reads the log at path (empty when it does not exist yet).
func readLeasedLog(t testing.TB, path string) leasedLog {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return parseLeasedLog(string(b))
}

// leasedLines reads a log of completed shards: (epoch, sample) ->
// completions, and the number of completed shards.
func leasedLines(t testing.TB, path string) (map[sample]int, int) {
	l := readLeasedLog(t, path)
	return l.done, l.lines
}

// problems checks a finished job's log of epochs of size samples: no sample
// completed twice, and every sample completed or in a shard whose process
// died while its completion was on its way. A log without pending lines
// (sdkworker's) must hold every sample exactly once.
func (l leasedLog) problems(epochs, size int64) []string {
	var out []string
	var lost []sample
	for e := range epochs {
		for i := range size {
			s := sample{e, i}
			switch n := l.done[s]; {
			case n > 1:
				out = append(out, fmt.Sprintf("epoch %d sample %d completed %d times", e, i, n))
			case n == 0 && !l.unresolved[s]:
				lost = append(lost, s)
			}
		}
	}
	if len(lost) > 0 {
		out = append(out, fmt.Sprintf("%d samples were lost: in no completed shard and in no shard whose process died while completing it (%d such shards); the first: epoch %d sample %d",
			len(lost), l.pending, lost[0][0], lost[0][1]))
	}
	return out
}

// The log's accounting, on logs written as the interleavings of a kill
// write them. The old check allowed one shard missing from the log per
// SIGKILL; but every worker that a restart stops can die between the
// master's taking its completion and its line, as case "two processes die
// completing" does (the SIGKILLed one and one its agent stopped), and the
// check failed on a correct run.
func TestLeasedLogAccounting(t *testing.T) {
	const size = 6 // 3 shards of 2 samples, one epoch
	pending := func(pid int, lease string, idx ...int64) string {
		b, _ := json.Marshal(logLine{PID: pid, Lease: lease, Indices: idx, Pending: true})
		return string(b)
	}
	done := func(pid int, lease string, idx ...int64) string {
		b, _ := json.Marshal(logLine{PID: pid, Lease: lease, Indices: idx})
		return string(b)
	}
	refused := func(pid int, lease string) string {
		b, _ := json.Marshal(logLine{PID: pid, Lease: lease, Refused: true})
		return string(b)
	}
	for _, tc := range []struct {
		name     string
		lines    []string
		problems int
		missing  int // samples in no shard line
	}{
		{"clean", []string{pending(1, "1", 0, 1), done(1, "1", 0, 1), pending(2, "2", 2, 3), done(2, "2", 2, 3),
			pending(1, "3", 4, 5), done(1, "3", 4, 5)}, 0, 0},
		// pid 1 is SIGKILLed and pid 2 stopped by its agent, each after
		// the master took its completion: two shards out of the log.
		{"two processes die completing", []string{pending(1, "1", 0, 1), pending(2, "2", 2, 3),
			pending(3, "3", 4, 5), done(3, "3", 4, 5)}, 0, 4},
		// pid 1 dies before the master took its completion: the shard is
		// requeued and completed by pid 2.
		{"died, shard redone", []string{pending(1, "1", 0, 1), pending(2, "4", 0, 1), done(2, "4", 0, 1),
			pending(2, "2", 2, 3), done(2, "2", 2, 3), pending(2, "3", 4, 5), done(2, "3", 4, 5)}, 0, 0},
		// A refused completion (the lease went elsewhere) explains nothing.
		{"refused and never redone", []string{pending(1, "1", 0, 1), refused(1, "1"), pending(2, "2", 2, 3),
			done(2, "2", 2, 3), pending(2, "3", 4, 5), done(2, "3", 4, 5)}, 1, 2},
		{"lost without a pending line", []string{done(2, "2", 2, 3), done(2, "3", 4, 5)}, 1, 2},
		{"completed twice", []string{done(1, "1", 0, 1), done(2, "4", 0, 1), done(2, "2", 2, 3),
			done(2, "3", 4, 5)}, 2, 0},
		{"a line cut short", []string{pending(1, "1", 0, 1), `{"pid": 1, "lease": "1", "ind`, done(2, "2", 2, 3),
			done(2, "3", 4, 5)}, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := parseLeasedLog(strings.Join(tc.lines, "\n"))
			if p := l.problems(1, size); len(p) != tc.problems {
				t.Errorf("problems %q, want %d", p, tc.problems)
			}
			missing := 0
			for i := range int64(size) {
				if l.done[sample{0, i}] == 0 {
					missing++
				}
			}
			if missing != tc.missing {
				t.Errorf("%d samples in no shard line, want %d", missing, tc.missing)
			}
		})
	}
}
