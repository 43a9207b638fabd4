package testbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestConcurrentWrites: writes from many goroutines all land, whole.
func TestConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				fmt.Fprintf(&b, "w%d-%d\n", i, j)
			}
		})
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 800 {
		t.Errorf("%d lines written, want 800", n)
	}
}

// TestWaitForWakesOnWrite: a waiter returns once a later write completes
// the text, with no deadline in sight.
func TestWaitForWakesOnWrite(t *testing.T) {
	var b Buffer
	result := make(chan error, 1)
	go func() { result <- b.WaitFor(time.Hour, nil, "ready", "set") }()
	b.Write([]byte("get set, "))
	b.Write([]byte("ready\n"))
	if err := <-result; err != nil {
		t.Fatal(err)
	}
}

// TestWaitForDone: a writer that finishes without writing the text ends
// the wait with an error that shows what was written; one that wrote it
// just before finishing does not.
func TestWaitForDone(t *testing.T) {
	var b Buffer
	b.Write([]byte("exiting\n"))
	done := make(chan struct{})
	close(done)
	err := b.WaitFor(time.Hour, done, "ready")
	if err == nil || !strings.Contains(err.Error(), `"ready"`) || !strings.Contains(err.Error(), "exiting") {
		t.Errorf("WaitFor after the writer finished: %v, want the missing text and the output", err)
	}
	if err := b.WaitFor(time.Hour, done, "exiting"); err != nil {
		t.Errorf("WaitFor of written text: %v", err)
	}
}

// TestWaitForTimeout: with nothing written, the wait ends when its timeout
// passes, naming what was missing.
func TestWaitForTimeout(t *testing.T) {
	var b Buffer
	if err := b.WaitFor(time.Millisecond, nil, "never"); err == nil || !strings.Contains(err.Error(), `"never"`) {
		t.Errorf("WaitFor with nothing written: %v, want a timeout naming the text", err)
	}
}
