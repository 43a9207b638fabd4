package proc

import (
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Exit describes how a reaped process ended.
type Exit struct {
	// Code is the exit status when the process exited normally, -1 when it
	// was killed by a signal.
	Code int
	// Signal is the signal that killed the process, 0 if it exited normally.
	Signal syscall.Signal
	// Time is when the process was reaped.
	Time time.Time
}

// Success reports whether the process exited normally with status 0.
func (e Exit) Success() bool { return e.Signal == 0 && e.Code == 0 }

// Signaled reports whether the process was killed by a signal.
func (e Exit) Signaled() bool { return e.Signal != 0 }

// ShellCode returns the status a shell would show: Code, or 128+Signal when
// the process was killed by a signal.
func (e Exit) ShellCode() int {
	if e.Signal != 0 {
		return 128 + int(e.Signal)
	}
	return e.Code
}

// String returns "exit status N" or "killed by signal N (SIGNAME)".
func (e Exit) String() string {
	if e.Signal != 0 {
		return "killed by " + signalText(e.Signal)
	}
	return fmt.Sprintf("exit status %d", e.Code)
}

// signalText renders "signal 9 (SIGKILL)", or "signal N" for a signal
// without a name.
func signalText(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return fmt.Sprintf("signal %d (%s)", int(sig), name)
	}
	return fmt.Sprintf("signal %d", int(sig))
}

// exitFromWaitStatus converts a wait status into an Exit reaped at t.
func exitFromWaitStatus(ws syscall.WaitStatus, t time.Time) Exit {
	if ws.Signaled() {
		return Exit{Code: -1, Signal: ws.Signal(), Time: t}
	}
	return Exit{Code: ws.ExitStatus(), Time: t}
}
