package diagnosis

import (
	"cmp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Platform reasons, as Kubernetes and schedulers report them. Comparisons
// ignore case.
const (
	ReasonOOMKilled = "OOMKilled"
	ReasonEvicted   = "Evicted"
	ReasonPreempted = "Preempted"
)

// maxLogTailLines bounds the log lines a Failure keeps: the last ones.
const maxLogTailLines = 200

// Failure is one failed worker, as the rules see it.
type Failure struct {
	// Who and when. Time orders a round's failures (see [RootCause]).
	Host      string
	NodeRank  int
	Rank      int
	LocalRank int
	Round     int64
	Time      time.Time

	// ExitCode is the exit status; for a worker killed by a signal it is
	// -1 (as the agent reports it) or -N (as torchrun shows it), and
	// Signal is N.
	ExitCode int
	// Signal is the signal that killed the worker, 0 if it exited.
	Signal int
	// OOMKilled says the worker was killed for memory: the kernel OOM
	// killer (SIGKILL plus evidence, such as the cgroup's oom_kill count
	// going up) or the platform (Kubernetes' OOMKilled reason).
	OOMKilled bool
	// PlatformReason is the platform's word for why the node or container
	// ended, such as "OOMKilled", "Evicted" or "Preempted"; "" if none.
	PlatformReason string

	// ExceptionType and Message are the Python exception, such as
	// "ValueError" and "bad batch size 3"; "" if unknown.
	ExceptionType string
	Message       string
	// Place is "file:line" of the traceback's innermost frame; "" if none.
	Place string
	// Traceback is the Python traceback, if any.
	Traceback string
	// LogTail is the last lines of the worker's output, oldest first.
	LogTail []string
	// RestoreFailed says the agent started no workers because it could
	// not restore the round's agreed checkpoint from a peer's memory.
	RestoreFailed bool
}

// Report is a failed worker as its agent reported it (the protocol's
// WorkerFailure, which the master converts): what FromReport reads.
type Report struct {
	Host          string
	NodeRank      int
	Rank          int
	LocalRank     int
	Round         int64
	TimeUnixNanos int64 // 0: unknown
	ExitCode      int
	Signal        int
	// Message is the error file's message, Traceback its traceback, and
	// LogTail the last lines of the worker's output.
	Message   string
	Traceback string
	LogTail   string
	// RestoreFailed: the agent started no workers, for want of the
	// round's agreed checkpoint from a peer (WorkerFailure.restore_failed).
	RestoreFailed bool
}

// FromReport converts a reported failure. The exception comes from the
// error file's message and traceback, else from a traceback in the log
// tail. A worker killed by SIGKILL (or exiting 137) counts as OOM-killed
// when its message or log tail holds a kernel OOM line ("Out of memory:
// Killed process", "oom-kill", "oom_reaper"). PlatformReason is left
// empty: the platform, not the worker, knows it.
func FromReport(w Report) Failure {
	f := Failure{
		Host:          w.Host,
		NodeRank:      w.NodeRank,
		Rank:          w.Rank,
		LocalRank:     w.LocalRank,
		Round:         w.Round,
		Time:          time.Unix(0, w.TimeUnixNanos),
		ExitCode:      w.ExitCode,
		Signal:        w.Signal,
		Traceback:     w.Traceback,
		RestoreFailed: w.RestoreFailed,
	}
	if w.TimeUnixNanos == 0 {
		f.Time = time.Time{}
	}
	if tail := strings.TrimRight(w.LogTail, "\n"); tail != "" {
		f.LogTail = strings.Split(tail, "\n")
		if n := len(f.LogTail); n > maxLogTailLines {
			f.LogTail = f.LogTail[n-maxLogTailLines:]
		}
	}
	f.ExceptionType, f.Message = splitException(w.Message)
	tb := ParseTraceback(f.Traceback)
	if tb.File == "" && tb.Type == "" {
		tb = ParseTraceback(w.LogTail)
	}
	f.Place = tb.Place()
	if f.ExceptionType == "" {
		f.ExceptionType = tb.Type
		if f.Message == "" {
			f.Message = tb.Message
		}
	}
	if f.signal() == syscall.SIGKILL && (containsAny(w.Message, kernelOOMEvidence) || containsAny(w.LogTail, kernelOOMEvidence)) {
		f.OOMKilled = true
	}
	return f
}

// kernelOOMEvidence are lines the kernel's OOM killer leaves.
var kernelOOMEvidence = []string{"Out of memory: Killed process", "oom-kill:", "oom_reaper:", "Memory cgroup out of memory"}

// signal returns the signal that ended the worker, from Signal, a negative
// ExitCode below -1 (torchrun's -N), or a shell status 128+N for the
// signals the rules name. An exit code of -1 with no signal is the agent's
// "could not start the workers", not SIGHUP.
func (f Failure) signal() syscall.Signal {
	switch {
	case f.Signal > 0:
		return syscall.Signal(f.Signal)
	case f.ExitCode < -1:
		return syscall.Signal(-f.ExitCode)
	}
	switch s := syscall.Signal(f.ExitCode - 128); s {
	case syscall.SIGKILL, syscall.SIGTERM, syscall.SIGINT, syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGABRT:
		return s
	}
	return 0
}

// text is everything the worker said: message, traceback and log tail.
func (f Failure) text() string {
	var b strings.Builder
	b.WriteString(f.ExceptionType)
	b.WriteString(": ")
	b.WriteString(f.Message)
	b.WriteByte('\n')
	b.WriteString(f.Traceback)
	b.WriteByte('\n')
	for _, l := range f.LogTail {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// Signature identifies an exception at a place, for the fail-fast rule.
// Two failures with equal, non-empty signatures raised the same exception
// at the same line.
type Signature struct {
	Type    string `json:"type,omitempty"`
	Message string `json:"message,omitempty"` // normalized, see Signature's doc
	Place   string `json:"place,omitempty"`
}

// IsZero reports whether s identifies nothing: without an exception type
// and a place, a failure never counts as a repeat.
func (s Signature) IsZero() bool { return s.Type == "" || s.Place == "" }

// Signature returns f's exception type, its message normalized (numbers
// and addresses replaced by "#", white space collapsed, at most 256 bytes)
// and its place.
func (f Failure) Signature() Signature {
	return Signature{Type: f.ExceptionType, Message: normalizeMessage(f.Message), Place: f.Place}
}

// RootCause picks the failure that caused a round's others, as torchrun
// does: the earliest Time, ties going to the lowest Rank. A failure the
// rules classify as [PeerFailure] (a collective broken by a peer) is never
// the root while the round has any other failure, even an earlier-stamped
// one: hosts' clocks differ and error files stamp whole seconds. The
// others are returned in the same order. fs is not modified. With no
// failures it returns the zero Failure and nil.
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
	i := slices.IndexFunc(sorted, func(f Failure) bool { return Match(f).Cause != PeerFailure })
	if i < 0 {
		i = 0
	}
	root = sorted[i]
	return root, slices.Delete(sorted, i, i+1)
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
