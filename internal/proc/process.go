package proc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// outputDrainTimeout bounds how long reaping waits for a child's output pipes
// to reach EOF after the child's process group has been killed. Only a
// descendant that escaped the group (setsid, setpgid) can hold them open that
// long; its remaining output is then dropped.
const outputDrainTimeout = 10 * time.Second

// Spec describes a process to start.
type Spec struct {
	// Argv is the command line. Argv[0] is looked up in the PATH of Env
	// (the agent's PATH if Env has none) when it contains no slash; relative
	// PATH entries are ignored. A relative Argv[0] with a slash is resolved
	// against Dir.
	Argv []string
	// Env is the child's full environment. Nil means the agent's own
	// environment, as with exec.Cmd.
	Env []string
	// Dir is the working directory; "" means the agent's.
	Dir string
	// Stdout and Stderr receive the child's output; nil discards it. An
	// *os.File is handed to the child directly; any other writer is fed by a
	// copying goroutine, and if it returns an error the pipe is closed and
	// the child sees EPIPE on its next write, so prefer the never-failing
	// writers of [Output]. The child's stdin is /dev/null.
	Stdout io.Writer
	Stderr io.Writer
	// ParentDeathSignal is the signal the child gets when this process
	// dies, however it dies (PR_SET_PDEATHSIG); 0 means SIGKILL. A child
	// that must clean up after its parent's death (an agent stopping its
	// workers and removing its shared memory) asks for SIGTERM.
	ParentDeathSignal syscall.Signal
	// ExtraFiles are open in the child as file descriptors 3, 4, ...
	// (a standby interpreter's control socket, see [Process.TakeStreams]).
	ExtraFiles []*os.File
}

// Process is a started child process. It runs in its own process group,
// whose id equals its pid, and receives SIGKILL (or Spec.ParentDeathSignal)
// if the agent dies (PR_SET_PDEATHSIG). All methods are safe for concurrent use.
//
// When the process exits, the rest of its process group (stray grandchildren
// such as dataloader workers or backgrounded shell jobs) is sent SIGKILL
// before the process is reaped, so nothing started by a worker outlives it
// unless it left the group. Descendants that did leave the group are not
// tracked, and PR_SET_PDEATHSIG covers only the direct child. Being in its
// own group, a worker does not receive terminal signals such as Ctrl-C; the
// agent forwards them with Signal or Stop.
type Process struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{}
	exit Exit // written once before done is closed

	mu     sync.Mutex
	exited bool // the leader has exited; its pid may soon be reused

	stopOnce sync.Once

	// streams are the output streams given to the process after it
	// started (TakeStreams); reaping waits for their copying too.
	streams []*Streams
}

// Start starts the process described by spec. It returns once the child has
// been executed, or an error if it could not be.
func Start(spec Spec) (*Process, error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, errors.New("start process: empty argv")
	}
	path, err := lookPath(spec.Argv[0], spec.Env)
	if err != nil {
		return nil, fmt.Errorf("start process %q: %w", spec.Argv[0], err)
	}
	deathSig := spec.ParentDeathSignal
	if deathSig == 0 {
		deathSig = syscall.SIGKILL
	}
	cmd := &exec.Cmd{
		Path:       path,
		Args:       slices.Clone(spec.Argv),
		Env:        spec.Env,
		Dir:        spec.Dir,
		Stdout:     spec.Stdout,
		Stderr:     spec.Stderr,
		WaitDelay:  outputDrainTimeout,
		ExtraFiles: spec.ExtraFiles,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:   true,
			Pdeathsig: deathSig,
		},
	}
	if err := spawn(cmd); err != nil {
		return nil, fmt.Errorf("start process %q: %w", spec.Argv[0], err)
	}
	p := &Process{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	go p.reap()
	return p, nil
}

// Pid returns the process id, which is also its process group id.
func (p *Process) Pid() int { return p.pid }

// Done returns a channel closed once the process has been reaped and all of
// its output has been copied to Spec.Stdout and Spec.Stderr.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exit returns how the process ended. It is valid only after Done is
// closed; before that it returns the zero Exit.
func (p *Process) Exit() Exit {
	select {
	case <-p.done:
		return p.exit
	default:
		return Exit{}
	}
}

// Signal sends sig to the process's whole process group. Once the process
// has exited it does nothing and returns nil: its group has already been
// killed and its pid may be reused.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return nil
	}
	// The leader is alive or an unreaped zombie, so its pid (the group id)
	// cannot have been reused.
	if err := unix.Kill(-p.pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal process group %d with %s: %w", p.pid, signalText(sig), err)
	}
	return nil
}

// Stop terminates the process: SIGTERM to its group, up to grace for it to
// exit, then SIGKILL to the group. It returns the Exit once the process is
// reaped. Stop is idempotent and safe to call concurrently: the first call
// decides the grace period, later calls just wait for the same Exit. Stop on
// an exited process returns its Exit immediately.
func (p *Process) Stop(grace time.Duration) Exit {
	p.stopOnce.Do(func() { p.terminate(grace) })
	<-p.done
	return p.exit
}

func (p *Process) terminate(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	// Errors are ignored: the process may exit at any moment, and SIGKILL
	// below is the backstop either way.
	_ = p.Signal(syscall.SIGTERM)
	// A stopped process (SIGSTOP, a hang's suspect) keeps a SIGTERM pending
	// until it runs again: resume it, so it ends now rather than at SIGKILL.
	_ = p.Signal(syscall.SIGCONT)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return
	case <-t.C:
	}
	_ = p.Signal(syscall.SIGKILL)
}

// reap waits for the leader to exit, kills the rest of its group, reaps it,
// waits for its output to be copied and closes done.
func (p *Process) reap() {
	var info unix.Siginfo
	var err error
	for {
		// WNOWAIT leaves the leader a zombie, which keeps its pid (the
		// group id) from being reused while we kill the group.
		err = unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	p.mu.Lock()
	p.exited = true
	if err == nil {
		_ = unix.Kill(-p.pid, unix.SIGKILL)
	}
	p.mu.Unlock()

	// Wait's error is an *exec.ExitError (the status is in ProcessState),
	// an output copying error or exec.ErrWaitDelay; none changes the Exit.
	_ = p.cmd.Wait()
	p.mu.Lock()
	streams := p.streams
	p.mu.Unlock()
	drainStreams(streams, outputDrainTimeout)
	now := time.Now()
	if ps := p.cmd.ProcessState; ps != nil {
		p.exit = exitFromWaitStatus(ps.Sys().(syscall.WaitStatus), now)
	} else {
		p.exit = Exit{Code: -1, Time: now}
	}
	close(p.done)
}

// spawnRequests feeds the spawner goroutine.
var (
	spawnerOnce   sync.Once
	spawnRequests chan spawnRequest
)

type spawnRequest struct {
	cmd  *exec.Cmd
	errc chan error
}

// spawn starts cmd from the spawner goroutine's OS thread. PR_SET_PDEATHSIG
// fires when the thread that forked the child exits, not the process, and
// the Go runtime may retire idle threads; forking from one locked thread that
// never exits makes the signal fire only when the agent itself dies.
func spawn(cmd *exec.Cmd) error {
	spawnerOnce.Do(func() {
		spawnRequests = make(chan spawnRequest)
		go spawner(spawnRequests)
	})
	req := spawnRequest{cmd: cmd, errc: make(chan error, 1)}
	spawnRequests <- req
	return <-req.errc
}

func spawner(reqs <-chan spawnRequest) {
	// Never unlocked, and this goroutine never returns, so its thread
	// lives as long as the process.
	runtime.LockOSThread()
	for req := range reqs {
		req.errc <- req.cmd.Start()
	}
}

// lookPath resolves file the way the child's environment would: through the
// PATH in env, or the agent's PATH when env is nil or has none.
func lookPath(file string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	path, ok := envValue(env, "PATH")
	if !ok {
		path = os.Getenv("PATH")
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue // "" and "." would make the result depend on Dir
		}
		candidate := filepath.Join(dir, file)
		if isExecutable(candidate) {
			return candidate, nil
		}
	}
	return "", fmt.Errorf("look up %q in PATH: %w", file, exec.ErrNotFound)
}

// envValue returns the last value of key in env, as exec.Cmd deduplicates.
func envValue(env []string, key string) (string, bool) {
	for _, kv := range slices.Backward(env) {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return false
	}
	return unix.Access(path, unix.X_OK) == nil
}
