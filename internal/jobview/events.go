package jobview

import (
	"fmt"
	"strings"
	"time"
	"unicode"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// EventLine is one event of the job's log as `rover events` prints it, on
// one line: seq, time, severity, kind, round, node, message. Control
// characters of the strings (a worker's message may hold any) are shown,
// never sent to the terminal.
func EventLine(e *roverv1.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%6d  %s  %-7s  %-20s", e.GetSeq(), time.Unix(0, e.GetTimeUnixNanos()).UTC().Format("2006-01-02T15:04:05.000Z"),
		printable(e.GetSeverity()), printable(e.GetKind()))
	if r := e.GetRound(); r > 0 {
		fmt.Fprintf(&b, "  round %d", r)
	}
	if n := e.GetNode(); n != "" {
		fmt.Fprintf(&b, "  node %s", printable(n))
	}
	b.WriteString("  ")
	b.WriteString(printable(e.GetMessage()))
	if x := lastLine(e.GetExcerpt()); x != "" && !strings.Contains(e.GetMessage(), x) {
		b.WriteString(": ")
		b.WriteString(printable(x))
	}
	return b.String()
}

// lastLine is the last non-empty line of s: where a traceback says what
// was raised.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// printable replaces the control characters of s: newlines and tabs by
// spaces, others by U+FFFD.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return ' '
		}
		if unicode.IsControl(r) {
			return '\uFFFD'
		}
		return r
	}, s)
}
