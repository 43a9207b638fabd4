package store

import (
	"context"
	"errors"
	"sync"
)

// ErrClosed is returned by a store used after Close.
var ErrClosed = errors.New("store is closed")

// Memory is a journal kept in memory. It survives a master restarted in the same
// process (tests use that), not a process restart.
type Memory struct {
	mu      sync.Mutex
	records [][]byte
	closed  bool
}

// NewMemory returns an empty in-memory journal.
func NewMemory() *Memory { return &Memory{} }

// Append adds one record to the journal. The record is copied.
func (m *Memory) Append(_ context.Context, rec []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.records = append(m.records, append([]byte(nil), rec...))
	return nil
}

// Records returns every record in the order appended.
func (m *Memory) Records(_ context.Context) ([][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	out := make([][]byte, len(m.records))
	copy(out, m.records)
	return out, nil
}

// Len returns the number of records.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.records)
}

// Close makes later calls fail with ErrClosed.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}
