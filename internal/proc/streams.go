package proc

import (
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Streams are standard output and error opened for a process that is
// already running: a standby interpreter that becomes a worker receives
// them (as file descriptors over its control socket) when it is handed the
// worker's command line. They behave as [Spec]'s Stdout and Stderr: an
// *os.File is handed over directly, any other writer is fed from a pipe by
// a copying goroutine, and the process's Done waits for that copying.
type Streams struct {
	child  [2]*os.File // what the process gets as fd 1 and 2
	owned  [2]bool     // child[i] is a pipe end this package opened
	copies sync.WaitGroup
	reads  []*os.File // the pipes' read ends, closed by the copiers
}

// ErrExited is returned by TakeStreams for a process that has already
// exited.
var ErrExited = errors.New("the process has exited")

// TakeStreams opens stdout and stderr for p (nil discards) and registers
// them, so that Done also waits for their output to be copied. Pass Files
// to the process, then call CloseChildEnds.
func (p *Process) TakeStreams(stdout, stderr io.Writer) (*Streams, error) {
	s := &Streams{}
	for i, w := range []io.Writer{stdout, stderr} {
		if err := s.open(i, w); err != nil {
			s.CloseChildEnds()
			s.closeReads()
			return nil, err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		s.CloseChildEnds()
		s.closeReads()
		return nil, ErrExited
	}
	p.streams = append(p.streams, s)
	return s, nil
}

func (s *Streams) open(i int, w io.Writer) error {
	if w == nil {
		f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		s.child[i], s.owned[i] = f, true
		return err
	}
	if f, ok := w.(*os.File); ok {
		s.child[i] = f
		return nil
	}
	r, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	s.child[i], s.owned[i] = pw, true
	s.reads = append(s.reads, r)
	s.copies.Add(1)
	go func() {
		defer s.copies.Done()
		_, _ = io.Copy(w, r)
		r.Close()
	}()
	return nil
}

// Files are the process's standard output and error, in that order.
func (s *Streams) Files() []*os.File { return s.child[:] }

// CloseChildEnds closes this process's copies of the pipe ends the child
// writes to (the child keeps its own); an *os.File given to TakeStreams
// is left open.
func (s *Streams) CloseChildEnds() {
	for i, f := range s.child {
		if f != nil && s.owned[i] {
			f.Close()
			s.owned[i] = false
		}
	}
}

func (s *Streams) closeReads() {
	for _, r := range s.reads {
		r.Close()
	}
}

// IsTerminal reports whether w is a terminal, which a process's standard
// streams must not be to be handed over (the interpreter chose its
// buffering when it started).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// drainStreams waits up to timeout, in all, for the streams' copying to
// end (a descendant that escaped the process group may hold a pipe open),
// then stops the rest.
func drainStreams(streams []*Streams, timeout time.Duration) {
	if len(streams) == 0 {
		return
	}
	done := make(chan struct{})
	go func() {
		for _, s := range streams {
			s.copies.Wait()
		}
		close(done)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		for _, s := range streams {
			s.closeReads()
		}
		<-done
	}
}
