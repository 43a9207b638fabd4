package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/roverml/rover/internal/agent/stacks"
	"github.com/roverml/rover/internal/proc"
)

// standbyLoader is the -c program of a standby interpreter: it runs
// python/rover/_standby.py (argv[1]) in __main__, which that file empties
// before the worker's script runs there.
const standbyLoader = "import sys\nwith open(sys.argv[1], 'rb') as f: c = f.read()\nexec(compile(c, sys.argv[1], 'exec'))\n"

// standbyStopGrace is how long a standby that is no longer wanted gets to
// exit on SIGTERM; it runs no user code, so this is short.
const standbyStopGrace = time.Second

// roundEnvKeys are the worker variables that change from one start of a
// local rank to the next (torchrun's contract and Rover's per-round ones).
// A standby is started without them and receives them with the rest of
// the environment; every other variable must be the same in the standby
// and the worker it becomes, or the start is cold (standbyKey).
var roundEnvKeys = []string{
	"LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
	"GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
	"TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
	"ROVER_NODE_ID", "ROVER_NODE_RANK", "ROVER_ROUND", "ROVER_MAX_NODES", "ROVER_WORKER_INCARNATION",
	"ROVER_CHECKPOINT_DIR", "ROVER_CHECKPOINT_KEEP", stacks.FileEnv,
}

// standbyPool keeps, per local rank, a Python interpreter that has
// imported torch and waits to become that rank's next worker
// (docs/design/restart.md). All methods are safe for concurrent use.
type standbyPool struct {
	script string // the extracted python/rover/_standby.py
	log    *slog.Logger

	mu     sync.Mutex
	slots  map[int]*standby
	closed bool
	// noStoreWait: rank 0 once did not listen in time (awaitStore).
	noStoreWait bool
	// noRemoteStoreWait: rank 0's store on another node once did not
	// accept connections in time (awaitRemoteStore).
	noRemoteStoreWait bool
}

// standby is one waiting interpreter.
type standby struct {
	proc   *proc.Process
	ctl    *os.File // the agent's end of the control socket pair
	key    string
	env    []string      // its stable environment (stableEnv)
	ready  chan struct{} // closed when the interpreter said it is ready
	errLog *lineRing     // its standard error before the handover
}

func newStandbyPool(script string, log *slog.Logger) *standbyPool {
	return &standbyPool{script: script, log: log, slots: map[int]*standby{}}
}

// workerLaunch is how a worker of one start is to run.
type workerLaunch struct {
	Argv []string // the cold command line: [PYTHON -u SCRIPT ARGS...] or [PYTHON -u -m MODULE ARGS...]
	Env  []string
}

// interpreter returns the part of argv a standby is started with (the
// interpreter and its flags), the entrypoint kind ("script" or "module"),
// and whether a standby can run it at all.
func (l workerLaunch) interpreter() (prefix []string, kind string, ok bool) {
	a := l.Argv
	if len(a) < 3 || a[1] != "-u" {
		return nil, "", false
	}
	if a[2] == "-m" {
		return a[:2], "module", len(a) >= 4 && a[3] != ""
	}
	// A script: a regular file named *.py (a directory or a zip archive
	// runs differently; those start cold).
	fi, err := os.Stat(a[2])
	return a[:2], "script", err == nil && fi.Mode().IsRegular() && strings.HasSuffix(a[2], ".py")
}

// standbyKey is what a standby must have been started with to run l:
// the interpreter, its flags and every variable that is not per round.
func standbyKey(prefix, env []string) string {
	var b strings.Builder
	for _, a := range prefix {
		b.WriteString(a)
		b.WriteByte(0)
	}
	b.WriteByte(0)
	// Sorted: the order of the variables is the worker's to see (it
	// receives its whole environment, in order), not the interpreter's.
	for _, kv := range slices.Sorted(slices.Values(stableEnv(env))) {
		b.WriteString(kv)
		b.WriteByte(0)
	}
	return b.String()
}

// stableEnv is env, deduplicated as exec does, without roundEnvKeys.
func stableEnv(env []string) []string {
	var out []string
	for _, kv := range dedupEnv(env) {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(roundEnvKeys, k) {
			out = append(out, kv)
		}
	}
	return out
}

// dedupEnv keeps the last value of each variable, in the order of those
// last values, as os/exec does with a command's environment.
func dedupEnv(env []string) []string {
	seen := map[string]bool{}
	out := make([]string, 0, len(env))
	for i := len(env) - 1; i >= 0; i-- {
		k, _, _ := strings.Cut(env[i], "=")
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, env[i])
	}
	slices.Reverse(out)
	return out
}

// refill starts a standby for local, in the background, for the next start
// that looks like l, unless one is there already.
func (sp *standbyPool) refill(local int, l workerLaunch) {
	prefix, _, ok := l.interpreter()
	if !ok {
		return
	}
	key := standbyKey(prefix, l.Env)
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.closed {
		return
	}
	if s := sp.slots[local]; s != nil {
		if s.key == key && !s.exited() {
			return
		}
		delete(sp.slots, local)
		go s.discard()
	}
	s, err := sp.start(local, prefix, stableEnv(l.Env), key, l.Argv)
	if err != nil {
		sp.log.Warn("cannot start a standby worker interpreter; restarts start cold", "local_rank", local, "err", err)
		return
	}
	sp.slots[local] = s
}

func (sp *standbyPool) start(local int, prefix, env []string, key string, cold []string) (*standby, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket pair: %w", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil { // pollable: Close ends a pending Read
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, err
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "standby-control"), os.NewFile(uintptr(fds[1]), "standby-control")
	defer theirs.Close()
	s := &standby{ctl: ours, key: key, env: env, ready: make(chan struct{}), errLog: newLineRing(20)}
	argv := append(slices.Clone(prefix), "-c", standbyLoader, sp.script, "3")
	argv = append(argv, cmdlinePadding(argv, cold)...)
	s.proc, err = proc.Start(proc.Spec{Argv: argv, Env: env, Stderr: s.errLog, ExtraFiles: []*os.File{theirs}})
	if err != nil {
		ours.Close()
		return nil, err
	}
	started := time.Now()
	go func() {
		var b [1]byte
		if n, _ := ours.Read(b[:]); n == 1 && b[0] == 'R' {
			close(s.ready)
			sp.log.Info("standby worker interpreter ready", "local_rank", local, "pid", s.proc.Pid(),
				"ready_after", time.Since(started).Round(time.Millisecond))
		}
	}()
	return s, nil
}

// take hands local's standby the worker l, with its output going to stdout
// and stderr, and returns it as the worker's process. It returns nil, and
// why, when the start must be cold; the standby, if any, is then gone.
func (sp *standbyPool) take(local int, l workerLaunch, stdout, stderr io.Writer) (*proc.Process, string) {
	sp.mu.Lock()
	s := sp.slots[local]
	delete(sp.slots, local)
	sp.mu.Unlock()
	if s == nil {
		return nil, "no standby"
	}
	pr, why := s.handOver(l, stdout, stderr)
	if pr == nil {
		go s.discard()
	}
	return pr, why
}

func (s *standby) handOver(l workerLaunch, stdout, stderr io.Writer) (*proc.Process, string) {
	prefix, kind, ok := l.interpreter()
	switch {
	case !ok:
		return nil, "entrypoint not runnable in a standby"
	case standbyKey(prefix, l.Env) != s.key:
		return nil, "interpreter or environment changed: " + changedVars(s.env, stableEnv(l.Env))
	case s.exited():
		return nil, "standby exited: " + strings.TrimSpace(s.errLog.String())
	case proc.IsTerminal(stdout) || proc.IsTerminal(stderr):
		return nil, "output is a terminal"
	}
	select {
	case <-s.ready:
	default:
		return nil, "standby not ready"
	}
	msg, err := handoverMessage(kind, l)
	if err != nil {
		return nil, err.Error()
	}
	streams, err := s.proc.TakeStreams(stdout, stderr)
	if err != nil {
		return nil, "standby exited"
	}
	defer streams.CloseChildEnds()
	if err := sendHandover(s.ctl, msg, streams.Files()); err != nil {
		return nil, "hand over: " + err.Error()
	}
	s.ctl.Close()
	return s.proc, ""
}

// cmdlinePadding is the empty arguments that make a standby's command line
// (argv) as long as the cold one it will become, so that it can rewrite
// /proc/PID/cmdline (what ps and pgrep read) to exactly that: the kernel
// shows the argument area the process started with, and its size cannot
// change. Each empty argument is one byte, its terminating NUL; the
// standby ignores them.
func cmdlinePadding(argv, cold []string) []string {
	size := func(args []string) int {
		n := 0
		for _, a := range args {
			n += len(a) + 1
		}
		return n
	}
	if pad := size(cold) - size(argv); pad > 0 {
		return make([]string, pad)
	}
	return nil
}

// handoverMessage is what the standby reads: NUL-terminated fields, the
// entrypoint kind, the working directory, the cold command line
// (sys.orig_argv, counted), sys.argv (counted) and the environment.
func handoverMessage(kind string, l workerLaunch) ([]byte, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("working directory: %w", err)
	}
	var argv []string
	if kind == "module" {
		argv = append([]string{l.Argv[3]}, l.Argv[4:]...) // the standby runs argv[0] as -m does
	} else {
		argv = l.Argv[2:]
	}
	env := dedupEnv(l.Env)
	fields := []string{kind, cwd, strconv.Itoa(len(l.Argv))}
	fields = append(fields, l.Argv...)
	fields = append(fields, strconv.Itoa(len(argv)))
	fields = append(fields, argv...)
	fields = append(fields, env...)
	var b bytes.Buffer
	for _, f := range fields {
		if strings.IndexByte(f, 0) >= 0 {
			return nil, errors.New("a NUL byte in the command line or environment")
		}
		b.WriteString(f)
		b.WriteByte(0)
	}
	return b.Bytes(), nil
}

// sendHandover writes msg's length (8 bytes, big-endian) with files
// attached, then msg.
func sendHandover(ctl *os.File, msg []byte, files []*os.File) error {
	var head [8]byte
	binary.BigEndian.PutUint64(head[:], uint64(len(msg)))
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	raw, err := ctl.SyscallConn()
	if err != nil {
		return err
	}
	var sendErr error
	err = raw.Write(func(fd uintptr) bool {
		sendErr = unix.Sendmsg(int(fd), head[:], unix.UnixRights(fds...), nil, 0)
		return !errors.Is(sendErr, syscall.EAGAIN)
	})
	if err == nil {
		err = sendErr
	}
	if err != nil {
		return err
	}
	_, err = ctl.Write(msg)
	return err
}

// changedVars names the variables whose values differ between two
// environments (or "the interpreter or its flags" if none does).
func changedVars(a, b []string) string {
	values := func(env []string) map[string]string {
		m := map[string]string{}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		return m
	}
	ma, mb := values(a), values(b)
	var keys []string
	for k, v := range ma {
		if w, ok := mb[k]; !ok || w != v {
			keys = append(keys, k)
		}
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "the interpreter or its flags"
	}
	slices.Sort(keys)
	return strings.Join(keys, ",")
}

func (s *standby) exited() bool {
	select {
	case <-s.proc.Done():
		return true
	default:
		return false
	}
}

// discard stops the standby: closing its control socket makes it exit.
func (s *standby) discard() {
	s.ctl.Close()
	s.proc.Stop(standbyStopGrace)
}

// close stops every standby and starts no more.
func (sp *standbyPool) close() {
	sp.mu.Lock()
	sp.closed = true
	slots := sp.slots
	sp.slots = map[int]*standby{}
	sp.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range slots {
		wg.Add(1)
		go func() { defer wg.Done(); s.discard() }()
	}
	wg.Wait()
}

// standbyScript is the standby program inside the extracted packages.
func standbyScript(pypath string) string { return filepath.Join(pypath, "rover", "_standby.py") }
