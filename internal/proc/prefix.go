package proc

import (
	"bytes"
	"errors"
	"io"
	"sync"
)

// maxLine is the longest line a prefix writer buffers; longer lines are
// written in pieces of this size, each prefixed and newline-terminated.
const maxLine = 64 << 10

// errWriterClosed is returned by writes to a closed prefix writer.
var errWriterClosed = errors.New("write to closed prefix writer")

// NewSyncWriter returns a writer that serialises Write calls to w with a
// mutex, so that writers sharing w (such as many prefix writers sharing the
// agent's stdout) never interleave within one Write.
func NewSyncWriter(w io.Writer) io.Writer {
	if sw, ok := w.(*syncWriter); ok {
		return sw
	}
	return &syncWriter{w: w}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// NewPrefixWriter returns a line-buffered writer that writes each complete
// line to dst as prefix+line. Every Write to dst carries whole prefixed
// lines only (the lines completed by one Write are batched), so prefix
// writers sharing a dst wrapped by [NewSyncWriter] never interleave within a
// line. A line longer than 64 KiB is written in 64 KiB pieces, each prefixed
// and newline-terminated, so memory stays bounded. Close writes a trailing
// partial line with a "\n" added. The writer is safe for concurrent use.
func NewPrefixWriter(dst io.Writer, prefix string) io.WriteCloser {
	return &prefixWriter{dst: dst, prefix: []byte(prefix)}
}

type prefixWriter struct {
	mu     sync.Mutex
	dst    io.Writer
	prefix []byte
	buf    []byte // partial line, at most maxLine bytes
	out    []byte // prefixed lines pending a write to dst, < 2*maxLine+2*len(prefix)+2 bytes
	closed bool
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, errWriterClosed
	}
	n := len(p)
	for len(p) > 0 {
		seg, rest, complete := bytes.Cut(p, []byte{'\n'})
		p = rest
		for len(w.buf)+len(seg) > maxLine {
			take := maxLine - len(w.buf)
			w.buf = append(w.buf, seg[:take]...)
			seg = seg[take:]
			if err := w.emit(); err != nil {
				return n, err
			}
		}
		w.buf = append(w.buf, seg...)
		if complete {
			if err := w.emit(); err != nil {
				return n, err
			}
		}
	}
	return n, w.flush()
}

// emit moves the buffered line to out, flushing out when it grows large.
func (w *prefixWriter) emit() error {
	w.out = append(w.out, w.prefix...)
	w.out = append(w.out, w.buf...)
	w.out = append(w.out, '\n')
	w.buf = w.buf[:0]
	if len(w.out) >= maxLine {
		return w.flush()
	}
	return nil
}

func (w *prefixWriter) flush() error {
	if len(w.out) == 0 {
		return nil
	}
	_, err := w.dst.Write(w.out)
	w.out = w.out[:0]
	return err
}

// Close writes any partial line, terminated by "\n". Later writes fail;
// later Closes return nil.
func (w *prefixWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	if len(w.buf) > 0 {
		if err := w.emit(); err != nil {
			return err
		}
	}
	return w.flush()
}
