package proc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// Std is a set of standard streams, as in torchrun's --redirects and --tee.
type Std int

// Standard stream sets.
const (
	None   Std = 0
	Stdout Std = 1
	Stderr Std = 2
	All    Std = Stdout | Stderr
)

// Has reports whether s includes every stream in o.
func (s Std) Has(o Std) bool { return s&o == o }

// String returns "none", "stdout", "stderr" or "all".
func (s Std) String() string {
	switch s {
	case None:
		return "none"
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	case All:
		return "all"
	default:
		return fmt.Sprintf("Std(%d)", int(s))
	}
}

// OutputSpec describes where one worker's stdout and stderr go.
//
// Per stream: if it is teed, it goes to its log file and to the console; if
// it is redirected (and not teed), only to its log file; otherwise only to
// the console. As in torchrun, tee implies writing the file, so a stream in
// both Redirect and Tee is teed. A teed stream reaches the console
// line-buffered, each line prefixed with Prefix; a stream that goes only to
// the console reaches it as written, unprefixed (the child inherits the
// console's file descriptor when the console is a file, as torchrun's
// workers do). File output is written verbatim.
type OutputSpec struct {
	// Dir is the worker's log directory, created with mode 0700 (with its
	// parents) if missing; the agent may put the worker's error file there
	// too. "" means no files, in which case Redirect and Tee must be None.
	Dir string
	// Redirect lists the streams that go only to files.
	Redirect Std
	// Tee lists the streams that go to files and the console.
	Tee Std
	// Console false filters this worker out of the console entirely
	// (torchrun's --local-ranks-filter); its files are unaffected.
	Console bool
	// Prefix starts every console line of a teed stream, e.g.
	// "[default0]:" (torchrun's "[<role><local_rank>]:").
	Prefix string
	// ConsoleOut and ConsoleErr are the agent's shared stdout and stderr,
	// normally wrapped by [NewSyncWriter]; nil discards.
	ConsoleOut, ConsoleErr io.Writer
}

// Output is one worker's opened output plumbing. Pass Stdout and Stderr to
// [Spec] and call Close after the process is done.
type Output struct {
	stdout, stderr io.Writer
	closers        []io.Closer // prefix writers first, then files
	sinks          []*teeWriter
}

// OpenOutput creates the log directory and files spec needs and returns the
// writers for the worker's streams. Log files are <Dir>/stdout.log and
// <Dir>/stderr.log, mode 0600, created only for redirected or teed streams
// and appended to, so a reused directory keeps earlier output.
func OpenOutput(spec OutputSpec) (*Output, error) {
	files := spec.Redirect | spec.Tee
	if files != None && spec.Dir == "" {
		return nil, fmt.Errorf("open output: redirect %v / tee %v needs a log directory", spec.Redirect, spec.Tee)
	}
	if spec.Dir != "" {
		if err := os.MkdirAll(spec.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("open output: %w", err)
		}
	}
	o := &Output{}
	var err error
	if o.stdout, err = o.stream(spec, Stdout, "stdout.log", spec.ConsoleOut); err == nil {
		o.stderr, err = o.stream(spec, Stderr, "stderr.log", spec.ConsoleErr)
	}
	if err != nil {
		_ = o.Close()
		return nil, fmt.Errorf("open output: %w", err)
	}
	return o, nil
}

// stream builds the writer for one stream, or nil when it goes nowhere.
func (o *Output) stream(spec OutputSpec, s Std, name string, console io.Writer) (io.Writer, error) {
	var dsts []io.Writer
	if spec.Redirect.Has(s) || spec.Tee.Has(s) {
		f, err := os.OpenFile(filepath.Join(spec.Dir, name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, err
		}
		o.closers = append(o.closers, f)
		dsts = append(dsts, f)
	}
	switch {
	case !spec.Console:
	case spec.Tee.Has(s):
		if console == nil {
			console = io.Discard
		}
		pw := NewPrefixWriter(console, spec.Prefix)
		// Flush prefix writers before closing files.
		o.closers = append([]io.Closer{pw}, o.closers...)
		dsts = append(dsts, pw)
	case !spec.Redirect.Has(s):
		// Straight to the console, as written.
		if console == nil {
			return nil, nil
		}
		if f := consoleFile(console); f != nil {
			return f, nil // the child writes the console itself
		}
		dsts = append(dsts, console)
	}
	switch {
	case len(dsts) == 0:
		return nil, nil
	case len(dsts) == 1 && isFile(dsts[0]):
		return dsts[0], nil // the child writes the file itself
	default:
		t := &teeWriter{dsts: dsts, errs: make([]error, len(dsts))}
		o.sinks = append(o.sinks, t)
		return t, nil
	}
}

// consoleFile returns the file behind a console writer (itself, or the one
// a [NewSyncWriter] wraps), or nil.
func consoleFile(w io.Writer) *os.File {
	if sw, ok := w.(*syncWriter); ok {
		w = sw.w
	}
	f, _ := w.(*os.File)
	return f
}

func isFile(w io.Writer) bool {
	_, ok := w.(*os.File)
	return ok
}

// Stdout returns the writer for the worker's stdout; nil means discard.
func (o *Output) Stdout() io.Writer { return o.stdout }

// Stderr returns the writer for the worker's stderr; nil means discard.
func (o *Output) Stderr() io.Writer { return o.stderr }

// Close flushes partial console lines and closes the log files. It returns
// any error met while writing or closing; write errors are otherwise never
// passed to the worker, so a broken console cannot make it fail with EPIPE.
// Close the Output only after the process's Done channel is closed.
func (o *Output) Close() error {
	var errs []error
	for _, t := range o.sinks {
		errs = append(errs, t.err())
	}
	for _, c := range o.closers {
		errs = append(errs, c.Close())
	}
	o.closers, o.sinks = nil, nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close output: %w", err)
	}
	return nil
}

// teeWriter writes to every destination and never fails; it remembers the
// first error of each destination for Output.Close.
type teeWriter struct {
	mu   sync.Mutex
	dsts []io.Writer
	errs []error
}

func (t *teeWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, d := range t.dsts {
		if _, err := d.Write(p); err != nil && t.errs[i] == nil {
			t.errs[i] = err
		}
	}
	return len(p), nil
}

func (t *teeWriter) err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return errors.Join(t.errs...)
}
