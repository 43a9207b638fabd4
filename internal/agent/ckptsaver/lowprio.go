package ckptsaver

import "runtime"

// yieldingRun runs fn on an OS thread of its own that gives way to the
// node's training processes: on Linux its CPU policy is SCHED_IDLE (or,
// where that is refused, nice 19) and its I/O priority class idle, so the
// CRC32C, write, fsync and read-back of a persistence run on cores the
// workers leave idle and never slow a training step on busy ones. An
// unprivileged thread cannot raise its priority again, so the thread is
// not given back to the Go runtime: it ends with fn (runtime.LockOSThread
// without Unlock). It returns once fn has, and whether the thread's
// priority was lowered (false: fn ran at normal priority).
//
// fn must not hold a lock that training's calls wait for: a starved thread
// holding one would delay them (the persister pins a slot before and
// unpins it after, on its own goroutine).
func yieldingRun(fn func()) (lowered bool) {
	done := make(chan bool, 1) // size 1: the thread ends without waiting for the reader
	go func() {
		runtime.LockOSThread() // never unlocked: the lowered thread dies with this goroutine
		ok := lowerThreadPriority()
		defer func() { done <- ok }()
		fn()
	}()
	return <-done
}
