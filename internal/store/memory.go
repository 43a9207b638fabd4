package store

import (
	"context"
	"errors"
	"sync"
)

// ErrClosed is returned by a store used after Close.
var ErrClosed = errors.New("store is closed")

// Contents is what a store holds: the newest snapshot (nil before the first)
// and the records appended after it, oldest first.
type Contents struct {
	Snapshot []byte
	Records  [][]byte
}

// Memory is a journal kept in memory. It survives a master restarted in the same
// process (tests use that), not a process restart.
type Memory struct {
	mu       sync.Mutex
	snapshot []byte
	records  [][]byte
	closed   bool
}

// NewMemory returns an empty in-memory journal.
func NewMemory() *Memory { return &Memory{} }

// Append adds records to the journal, in order. The records are copied.
func (m *Memory) Append(_ context.Context, recs [][]byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	for _, r := range recs {
		m.records = append(m.records, append([]byte(nil), r...))
	}
	return nil
}

// Snapshot replaces the snapshot with state, which must reflect every record
// appended so far, and drops those records.
func (m *Memory) Snapshot(_ context.Context, state []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.snapshot = append([]byte(nil), state...)
	m.records = nil
	return nil
}

// Load returns copies of the snapshot and of the records after it.
func (m *Memory) Load(_ context.Context) (Contents, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Contents{}, ErrClosed
	}
	c := Contents{Records: make([][]byte, len(m.records))}
	for i, r := range m.records {
		c.Records[i] = append([]byte(nil), r...)
	}
	if m.snapshot != nil {
		c.Snapshot = append([]byte(nil), m.snapshot...)
	}
	return c, nil
}

// Len returns the number of records after the snapshot.
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
