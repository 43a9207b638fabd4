package master

import (
	"context"
	"sync"
)

// sessionCount counts the agents' open session streams, so that a master
// whose job ended can wait for every agent to have heard it (WaitIdle).
type sessionCount struct {
	mu      sync.Mutex
	n       int
	changed chan struct{} // closed and replaced on every change
}

func newSessionCount() *sessionCount { return &sessionCount{changed: make(chan struct{})} }

// add counts a session opening (+1) or closing (-1); a nil count ignores it.
func (s *sessionCount) add(delta int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n += delta
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *sessionCount) get() (int, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n, s.changed
}

// WaitIdle blocks until no agent holds a session open, or ctx ends (then it
// returns ctx's error). An agent closes its session when it exits, so a
// master that stops once its job ended and WaitIdle returned has told every
// agent how the job ended; agents that died or are cut off keep it waiting
// until ctx ends.
func (m *Master) WaitIdle(ctx context.Context) error {
	for {
		n, changed := m.sessions.get()
		if n == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
