package eventlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// FileName is the event log's file in the job's directory; its rotated
// predecessors are FileName.1 (the newer) to FileName.<Options.KeepFiles>.
const FileName = "events.jsonl"

// Options bound a log.
type Options struct {
	// MaxFileBytes is the size at which events.jsonl is rotated (default
	// 4 MiB); KeepFiles the rotated files kept (default 2). The log takes
	// at most about (KeepFiles+1) * MaxFileBytes on disk.
	MaxFileBytes int64
	KeepFiles    int
	// Ring is how many of the newest events are kept in memory for the
	// API (default 4096).
	Ring int
}

func (o *Options) defaults() {
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = 4 << 20
	}
	if o.KeepFiles <= 0 {
		o.KeepFiles = 2
	}
	if o.Ring <= 0 {
		o.Ring = 4096
	}
}

// Log is a job's event log: appended to events.jsonl in the job's
// directory (or kept in memory only, without one), with a ring of the
// newest events for readers, who wait for the next with Wait. It is safe
// for concurrent use.
type Log struct {
	mu   sync.Mutex
	dir  string
	opts Options
	f    *os.File // nil without a directory, or once closed
	size int64

	last uint64 // the newest event's Seq
	// ring holds the newest events, at most opts.Ring: ring[head] is the
	// oldest once it is full, ring[0] before.
	ring []Event
	head int
	wake chan struct{}
}

// Open opens the event log in dir, creating it, and goes on numbering
// after the newest event it holds. A last line cut short (the master was
// killed while writing it) is dropped; so is a line that does not decode
// (with the error in Damaged). dir "" keeps the events in memory only.
func Open(dir string, opts Options) (*Log, error) {
	opts.defaults()
	l := &Log{dir: dir, opts: opts, wake: make(chan struct{})}
	if dir == "" {
		return l, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create the event log's directory: %w", err)
	}
	for i := opts.KeepFiles; i >= 1; i-- {
		if err := l.load(l.path(i), false); err != nil {
			return nil, err
		}
	}
	if err := l.load(l.path(0), true); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(l.path(0), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the event log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open the event log: %w", err)
	}
	l.f, l.size = f, st.Size()
	return l, nil
}

// path is the file of generation i: 0 is events.jsonl, i the i-th rotated.
func (l *Log) path(i int) string {
	if i == 0 {
		return filepath.Join(l.dir, FileName)
	}
	return filepath.Join(l.dir, fmt.Sprintf("%s.%d", FileName, i))
}

// load reads one file's events into the ring. In the current file, a
// torn last line (no newline) is cut off.
func (l *Log) load(path string, current bool) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the event log %s: %w", path, err)
	}
	whole := bytes.LastIndexByte(b, '\n') + 1
	if current && whole < len(b) {
		if err := os.Truncate(path, int64(whole)); err != nil {
			return fmt.Errorf("drop the torn last line of the event log %s: %w", path, err)
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(b[:whole]))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e Event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Seq <= l.last {
			continue // damage, or a line out of order: not an event to show
		}
		l.keep(e)
	}
	return nil
}

// keep adds e to the ring, over its oldest event once it is full. The
// caller holds mu (or owns l).
func (l *Log) keep(e Event) {
	l.last = e.Seq
	if len(l.ring) < l.opts.Ring {
		l.ring = append(l.ring, e)
		return
	}
	l.ring[l.head] = e
	l.head = (l.head + 1) % len(l.ring)
}

// at is the ring's i-th event, oldest first.
func (l *Log) at(i int) Event { return l.ring[(l.head+i)%len(l.ring)] }

// Append numbers events in order after the newest, bounds their strings,
// writes them as one write(2) of JSON lines and wakes the readers. The
// events are in memory even when writing fails (a full disk): the error
// says the file misses them. A write that returned survives the master
// being killed; only the machine's crash can lose it (the log is not
// fsynced: it describes the journal, which is).
func (l *Log) Append(events ...Event) ([]Event, error) {
	if len(events) == 0 {
		return nil, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Event, len(events))
	var buf bytes.Buffer
	var encErr error
	for i, e := range events {
		e = e.Bound()
		e.Seq = l.last + 1
		b, err := json.Marshal(e)
		if err != nil {
			encErr = errors.Join(encErr, fmt.Errorf("encode a %s event: %w", e.Kind, err))
			continue
		}
		buf.Write(b)
		buf.WriteByte('\n')
		l.keep(e)
		out[i] = e
	}
	close(l.wake)
	l.wake = make(chan struct{})
	if l.f == nil {
		return out, encErr
	}
	return out, errors.Join(encErr, l.writeLocked(buf.Bytes()))
}

// writeLocked appends b to the current file, rotating it first when b
// would take it past the bound.
func (l *Log) writeLocked(b []byte) error {
	if l.size > 0 && l.size+int64(len(b)) > l.opts.MaxFileBytes {
		if err := l.rotateLocked(); err != nil {
			return err
		}
	}
	n, err := l.f.Write(b)
	l.size += int64(n)
	if err != nil {
		return fmt.Errorf("write the event log: %w", err)
	}
	return nil
}

// rotateLocked shifts events.jsonl to events.jsonl.1 (and so on, the
// oldest dropped) and starts an empty one.
func (l *Log) rotateLocked() error {
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("rotate the event log: %w", err)
	}
	l.f = nil
	for i := l.opts.KeepFiles; i >= 1; i-- {
		err := os.Rename(l.path(i-1), l.path(i))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("rotate the event log: %w", err)
		}
	}
	f, err := os.OpenFile(l.path(0), os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("rotate the event log: %w", err)
	}
	l.f, l.size = f, 0
	return nil
}

// Since returns the events after seq that the ring holds, oldest first, at
// most max (0: all), and the Seq of the oldest event the ring holds (0 when
// empty): an oldest above seq+1 means the events in between are only in
// the files, or rotated away.
func (l *Log) Since(seq uint64, max int) (events []Event, oldest uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ring) == 0 {
		return nil, 0
	}
	oldest = l.at(0).Seq
	i := 0
	if seq >= oldest {
		i = int(min(seq-oldest+1, uint64(len(l.ring))))
	}
	n := len(l.ring) - i
	if max > 0 && n > max {
		n = max
	}
	if n == 0 {
		return nil, oldest
	}
	events = make([]Event, n)
	for j := range events {
		events[j] = l.at(i + j)
	}
	return events, oldest
}

// Last is the newest event's Seq, 0 before the first.
func (l *Log) Last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// Wait returns a channel closed at the next Append.
func (l *Log) Wait() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.wake
}

// Close closes the file; later events are kept in memory only.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

var _ io.Closer = (*Log)(nil)
