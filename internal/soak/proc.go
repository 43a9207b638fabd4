package soak

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// proc is a process soak started, its output appended to a file.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // after done
}

// startProc starts prog with args in dir, its output appended to outPath,
// in a process group of its own.
func startProc(name, dir, outPath string, env []string, prog string, args ...string) (*proc, error) {
	out, err := os.OpenFile(outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	fmt.Fprintf(out, "==== %s %s: %s %q\n", time.Now().UTC().Format(time.RFC3339Nano), name, prog, args)
	p := &proc{name: name, cmd: exec.Command(prog, args...), done: make(chan struct{})}
	p.cmd.Dir, p.cmd.Env, p.cmd.Stdout, p.cmd.Stderr = dir, env, out, out
	// Pdeathsig: a soak that dies takes its jobs with it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		out.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitCode is the process's exit code once it exited (-1 by a signal).
func (p *proc) exitCode() int {
	<-p.done
	return p.cmd.ProcessState.ExitCode()
}

// kill SIGKILLs the process and waits for it.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop asks the process to stop (SIGTERM) and SIGKILLs its group past grace.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// stepTail reads a step log as it grows.
type stepTail struct {
	path    string
	off     int64
	partial []byte
	events  []Event
}

// poll reads what was appended since the last poll and returns every event
// so far.
func (t *stepTail) poll() ([]Event, error) {
	f, err := os.Open(t.path)
	if errors.Is(err, os.ErrNotExist) {
		return t.events, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read step log: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(t.off, io.SeekStart); err != nil {
		return nil, fmt.Errorf("read step log: %w", err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read step log: %w", err)
	}
	t.off += int64(len(b))
	b = append(t.partial, b...)
	end := bytes.LastIndexByte(b, '\n') + 1
	t.partial = append([]byte(nil), b[end:]...)
	evs, _, err := ParseStepLog(bytes.NewReader(b[:end]))
	if err != nil {
		return nil, err
	}
	t.events = append(t.events, evs...)
	return t.events, nil
}
