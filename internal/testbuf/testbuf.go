// Package testbuf gives tests a goroutine-safe buffer for what processes
// and goroutines write (a child's stdout, a node's console) and a way to
// wait for a piece of it: each write wakes the waiters, so a test waits for
// the text itself, never for a guessed while. It is test support: no
// program imports it.
package testbuf

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Buffer is a bytes.Buffer that many goroutines may write and read. The
// zero Buffer is empty and ready to use.
type Buffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed and replaced by every write; nil until a waiter asks
}

// Write appends p and wakes the waiters. It never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Write(p)
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
	return len(p), nil
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Changed returns everything written so far and a channel that the next
// write closes.
func (b *Buffer) Changed() (string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed == nil {
		b.changed = make(chan struct{})
	}
	return b.b.String(), b.changed
}

// WaitFor waits until every one of subs has been written. It returns an
// error naming what is missing, with what was written, when timeout passes
// first, or when done (nil for none: a writer that may finish, such as a
// process) is closed before and the buffer still lacks it.
func (b *Buffer) WaitFor(timeout time.Duration, done <-chan struct{}, subs ...string) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		text, changed := b.Changed()
		missing := firstMissing(text, subs)
		if missing == "" {
			return nil
		}
		select {
		case <-changed:
		case <-done:
			if text := b.String(); firstMissing(text, subs) != "" {
				return fmt.Errorf("%q was not written before the writer finished; got:\n%s", firstMissing(text, subs), text)
			}
			return nil
		case <-timer.C:
			return fmt.Errorf("%q was not written within %v; got:\n%s", missing, timeout, text)
		}
	}
}

func firstMissing(text string, subs []string) string {
	for _, s := range subs {
		if !strings.Contains(text, s) {
			return s
		}
	}
	return ""
}
