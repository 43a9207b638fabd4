package ckptsaver

import (
	"runtime"
	"testing"
)

func TestYieldingRunLowersOnlyItsOwnThread(t *testing.T) {
	var inside bool
	lowered := yieldingRun(func() { inside = threadIsIdle() })
	if runtime.GOOS != "linux" {
		if lowered || inside {
			t.Fatalf("off Linux: lowered %v, idle inside %v; want neither", lowered, inside)
		}
		return
	}
	if !lowered || !inside {
		t.Fatalf("lowered %v, thread idle inside fn %v; want both", lowered, inside)
	}
	// The caller's thread, and every thread the runtime hands out later,
	// keep their priority: the lowered one ended with fn.
	for i := 0; i < 50; i++ {
		ch := make(chan bool)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ch <- threadIsIdle()
		}()
		if <-ch {
			t.Fatalf("a thread of the runtime runs at idle priority after yieldingRun returned")
		}
	}
}
