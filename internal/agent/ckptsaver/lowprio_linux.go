package ckptsaver

import "golang.org/x/sys/unix"

// ioprioIdle is the I/O priority class idle (IOPRIO_CLASS_IDLE << 13) for
// ioprio_set(IOPRIO_WHO_PROCESS, 0: the calling thread).
const (
	ioprioWhoProcess = 1
	ioprioIdle       = 3 << 13
)

// lowerThreadPriority makes the calling OS thread yield to every other:
// SCHED_IDLE, else nice 19; and I/O class idle (best effort).
func lowerThreadPriority() bool {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}
	ok := unix.SchedSetAttr(0, &attr, 0) == nil
	if !ok {
		ok = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 19) == nil
	}
	_, _, _ = unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoProcess, 0, ioprioIdle)
	return ok
}

// threadIsIdle reports whether the calling thread runs under SCHED_IDLE
// or at nice 19 (for tests).
func threadIsIdle() bool {
	if attr, err := unix.SchedGetAttr(0, 0); err == nil && attr.Policy == unix.SCHED_IDLE {
		return true
	}
	// getpriority returns 20 - nice.
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	return err == nil && prio == 1
}
