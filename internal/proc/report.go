package proc

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// reportWidth is the width of the report's '=' and '-' rules.
const reportWidth = 72

// tracebackHint is shown for a failure with neither an error file nor a
// signal, as torchrun does.
const tracebackHint = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"

// Failure is one failed worker, as shown in a failure report.
type Failure struct {
	Time      time.Time    // error file timestamp if present, else reap time
	Host      string       // host name of the node
	Node      int          // node rank ("group rank")
	Rank      int          // global rank
	LocalRank int          // rank on the node
	Pid       int          // worker pid
	Exit      Exit         // how the worker ended
	ErrorFile string       // error file path, or ""
	Error     *ErrorRecord // parsed error file; may be nil
	LogTail   string       // last lines of the worker's output; may be ""
	// Diagnosis is the master's verdict on the round's failure: "cause ->
	// action: why" (docs/fault-tolerance.md); "" when not known.
	Diagnosis string
}

// RootCause picks the first observed failure: the earliest Time, ties going
// to the lowest Rank. The others are returned sorted by Time, then Rank. fs
// is not modified. With no failures it returns the zero Failure and nil.
func RootCause(fs []Failure) (root Failure, others []Failure) {
	if len(fs) == 0 {
		return Failure{}, nil
	}
	sorted := slices.Clone(fs)
	slices.SortStableFunc(sorted, func(a, b Failure) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Rank, b.Rank)
	})
	return sorted[0], sorted[1:]
}

// FormatReport renders torchrun's failure table: title on its own line
// (pass e.g. "train.py FAILED"), the other failures numbered from [1], then
// the root cause as [0] (see [RootCause]). Times are shown in their own
// location. The result ends with a newline.
func FormatReport(title string, fs []Failure) string {
	root, others := RootCause(fs)
	border := strings.Repeat("=", reportWidth) + "\n"
	section := strings.Repeat("-", reportWidth) + "\n"

	var b strings.Builder
	b.WriteString(border)
	b.WriteString(title + "\n")
	b.WriteString(section)
	b.WriteString("Failures:\n")
	if len(others) == 0 {
		b.WriteString("  <NO_OTHER_FAILURES>\n")
	}
	for i, f := range others {
		writeFailure(&b, i+1, f)
	}
	b.WriteString(section)
	b.WriteString("Root Cause (first observed failure):\n")
	if len(fs) == 0 {
		b.WriteString("  <NO_FAILURES>\n")
	} else {
		writeFailure(&b, 0, root)
	}
	b.WriteString(border)
	return b.String()
}

func writeFailure(b *strings.Builder, idx int, f Failure) {
	fmt.Fprintf(b, "[%d]:\n", idx)
	field(b, "time", f.Time.Format("2006-01-02_15:04:05"))
	field(b, "host", orNA(f.Host))
	field(b, "rank", fmt.Sprintf("%d (local_rank: %d, node: %d)", f.Rank, f.LocalRank, f.Node))
	field(b, "exitcode", fmt.Sprintf("%s (pid: %d)", exitCodeText(f.Exit), f.Pid))
	field(b, "error_file", orNA(f.ErrorFile))
	field(b, "traceback", traceback(f))
	if f.Error == nil && strings.TrimSpace(f.LogTail) != "" {
		field(b, "log tail", f.LogTail)
	}
	if f.Diagnosis != "" {
		field(b, "diagnosis", f.Diagnosis)
	}
}

// field writes "  name      : value"; continuation lines of value are
// indented two spaces, aligning them under the field names.
func field(b *strings.Builder, name, value string) {
	value = strings.TrimRight(value, "\r\n")
	for i, line := range strings.Split(value, "\n") {
		line = strings.TrimRight(line, "\r")
		switch {
		case i == 0:
			fmt.Fprintf(b, "  %-10s: %s\n", name, line)
		case line == "":
			b.WriteString("\n")
		default:
			b.WriteString("  " + line + "\n")
		}
	}
}

// exitCodeText renders the exit code as torchrun does: negative signal
// numbers for signal deaths.
func exitCodeText(e Exit) string {
	if e.Signal != 0 {
		return strconv.Itoa(-int(e.Signal))
	}
	return strconv.Itoa(e.Code)
}

func traceback(f Failure) string {
	switch {
	case f.Error != nil && f.Error.Traceback != "":
		return f.Error.Traceback
	case f.Error != nil && f.Error.Message != "":
		return f.Error.Message
	case f.Error != nil:
		return "<N/A>"
	case f.Exit.Signal != 0:
		return fmt.Sprintf("Signal %d (%s) received by PID %d", int(f.Exit.Signal), signalName(f.Exit.Signal), f.Pid)
	default:
		return tracebackHint
	}
}

// signalName returns e.g. "SIGKILL", or "<N/A>" for an unnamed signal.
func signalName(sig syscall.Signal) string {
	return orNA(unix.SignalName(sig))
}

func orNA(s string) string {
	if s == "" {
		return "<N/A>"
	}
	return s
}
