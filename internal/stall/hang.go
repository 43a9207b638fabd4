package stall

import (
	"fmt"
	"time"
)

// Policy is what the master does about a hang: DLRover's --hang_detection.
type Policy int

// Policies.
const (
	// LogOnly logs the hang and collects the workers' stacks.
	LogOnly Policy = 0
	// Warn does the same and warns on every agent's console and in the
	// job's status.
	Warn Policy = 1
	// Restart does the same, then restarts the workers (a new round,
	// counted against --max-restarts).
	Restart Policy = 2
)

func (p Policy) String() string {
	switch p {
	case LogOnly:
		return "log"
	case Warn:
		return "warn"
	case Restart:
		return "restart"
	}
	return fmt.Sprintf("policy(%d)", int(p))
}

// Hang is the hang timer of one job. The job hangs when no worker made
// progress for the timeout, counted from its newest progress, provided a
// worker completed a step in the current round before: a slow start, a
// checkpoint restore or a long first step is not a hang. A hang is declared
// once; progress or a new round ends it.
type Hang struct {
	timeout time.Duration
	round   int64
	armed   bool      // a worker completed a step in this round
	last    time.Time // of the newest progress
	hung    bool
	seq     int64
}

// NewHang returns a timer; a timeout <= 0 never declares a hang.
func NewHang(timeout time.Duration) *Hang { return &Hang{timeout: timeout} }

// Progress records progress of round at now: a worker reached a new step;
// completed says it finished one (not only started the first).
// Progress of an earlier round is ignored; a later round resets the timer.
func (h *Hang) Progress(round int64, completed bool, now time.Time) {
	switch {
	case round < h.round:
		return
	case round > h.round:
		h.NewRound(round)
	}
	h.last = now
	h.armed = h.armed || completed
	h.hung = false
}

// NewRound resets the timer for a new round: its workers start afresh.
func (h *Hang) NewRound(round int64) {
	if round <= h.round {
		return
	}
	h.round, h.armed, h.hung, h.last = round, false, false, time.Time{}
}

// Round is the round the timer follows.
func (h *Hang) Round() int64 { return h.round }

// Check reports whether the job becomes hung at now: true once per hang.
func (h *Hang) Check(now time.Time) bool {
	if h.timeout <= 0 || !h.armed || h.hung || now.Sub(h.last) < h.timeout {
		return false
	}
	h.hung = true
	h.seq++
	return true
}

// Deadline is when Check would next declare a hang; ok is false when it
// cannot (off, not armed, or hung already).
func (h *Hang) Deadline() (time.Time, bool) {
	if h.timeout <= 0 || !h.armed || h.hung {
		return time.Time{}, false
	}
	return h.last.Add(h.timeout), true
}

// Hung reports whether the job is hung now; Seq counts the hangs declared;
// Since is the time of the newest progress.
func (h *Hang) Hung() bool       { return h.hung }
func (h *Hang) Seq() int64       { return h.seq }
func (h *Hang) Since() time.Time { return h.last }
