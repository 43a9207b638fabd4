// Package stacks collects the stacks of a node's workers when the job
// hangs: each worker's state from /proc, its Python stacks through the
// faulthandler its startup hook (python/rover/_sitecustomize.py) registers
// for SIGUSR1, and py-spy's dump when py-spy is installed, written to one
// file per hang in the agent's log directory. It does not detect hangs (the
// master does, and tells the agent) and does not restart workers.
package stacks

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
)

// FileEnv names, in every worker's environment, the file its Python
// startup hook (python/rover/_sitecustomize.py) registers with faulthandler
// for SIGUSR1.
const FileEnv = "ROVER_STACKS_FILE"

// Marker lines the startup hook writes to the stacks file.
const (
	registeredMarker = "rover-stacks: registered pid="
	releasedMarker   = "rover-stacks: released pid="
)

// How long a worker's stacks may take: faulthandler writes them at once
// from its signal handler; py-spy attaches and reads the process.
const (
	dumpTimeout  = 3 * time.Second
	dumpSettle   = 100 * time.Millisecond
	pySpyTimeout = 10 * time.Second
)

// Worker is a running worker, for the stacks of a hang.
type Worker struct {
	Local, Rank, Pid int
	StacksFile       string
}

// Collector collects the stacks of the node's running workers, once per
// hang the master reports.
type Collector struct {
	dir     string // <log dir>/hangs
	nodeID  string
	running atomic.Pointer[[]Worker]
	seen    int64 // the id of the newest hang whose stacks were collected
}

// NewCollector writes the stacks of node's workers under logDir/hangs.
func NewCollector(logDir, node string) *Collector {
	return &Collector{dir: filepath.Join(logDir, "hangs"), nodeID: node}
}

// SetRunning records the workers of the group just started.
func (c *Collector) SetRunning(ws []Worker) { c.running.Store(&ws) }

// Fresh reports whether h is a hang not seen before, and marks it seen.
func (c *Collector) Fresh(h *roverv1.HangNotice) bool {
	if h == nil || h.GetId() == c.seen {
		return false
	}
	c.seen = h.GetId()
	return true
}

// Collect writes the stacks of the running workers for hang h and returns
// the file's path; "" (with no error) when no group was ever started.
func (c *Collector) Collect(ctx context.Context, h *roverv1.HangNotice) (string, error) {
	refs := c.running.Load()
	if refs == nil {
		return "", nil
	}
	return c.collect(ctx, h, *refs)
}

// collect writes every worker's stacks, or what can be told of it,
// to <log dir>/hangs/hang-<id>.txt and returns the path.
func (c *Collector) collect(ctx context.Context, h *roverv1.HangNotice, refs []Worker) (string, error) {
	dir := c.dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	sections := make([]string, len(refs))
	var wg sync.WaitGroup
	for i, r := range refs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sections[i] = workerStacks(ctx, r)
		}()
	}
	wg.Wait()
	var b strings.Builder
	fmt.Fprintf(&b, "# rover: stacks of node %s's workers at %s\n# hang: %s\n\n", c.nodeID, time.Now().Format(time.RFC3339Nano), h.GetReason())
	for _, s := range sections {
		b.WriteString(s)
		b.WriteString("\n")
	}
	path := filepath.Join(dir, fmt.Sprintf("hang-%d.txt", h.GetId()))
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}

// workerStacks returns one worker's section: its state from /proc, its
// Python stacks through faulthandler (a process that registered the hook
// and is not stopped), and py-spy's dump when py-spy is installed.
func workerStacks(ctx context.Context, r Worker) string {
	var b strings.Builder
	state := procState(r.Pid)
	fmt.Fprintf(&b, "== rank %d (local rank %d) pid %d: %s\n", r.Rank, r.Local, r.Pid, state.text)
	pids := hookedPids(r.StacksFile, r.Pid)
	switch {
	case state.stopped:
		b.WriteString("stopped (SIGSTOP or a debugger): a stopped process cannot run its faulthandler; " +
			"it resumes (SIGCONT) and ends if the workers are restarted\n")
	case len(pids) == 0:
		b.WriteString("no Python stacks by signal: not a Python program, or it handles SIGUSR1 itself\n")
	}
	if !state.stopped {
		for _, pid := range pids {
			fmt.Fprintf(&b, "-- faulthandler, pid %d:\n%s", pid, faulthandlerDump(r.StacksFile, pid))
		}
	}
	if out, ok := pySpyDump(ctx, r.Pid); ok {
		fmt.Fprintf(&b, "-- py-spy dump --pid %d:\n%s", r.Pid, out)
	}
	return b.String()
}

type pstate struct {
	text    string
	stopped bool
}

// procState reads a process's state from /proc/<pid>/stat: "R (running)",
// "S (sleeping)", "T (stopped)", ...
func procState(pid int) pstate {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return pstate{text: "gone"}
	}
	// The command name, in parentheses, may hold spaces: the state follows
	// its last ")".
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) == 0 {
		return pstate{text: "unknown"}
	}
	names := map[string]string{"R": "running", "S": "sleeping", "D": "waiting for I/O (uninterruptible)",
		"T": "stopped", "t": "stopped by a tracer", "Z": "zombie", "X": "dead", "I": "idle"}
	return pstate{text: f[0] + " (" + names[f[0]] + ")", stopped: f[0] == "T" || f[0] == "t"}
}

// procGroup is a process's process group id; -1 when unknown.
func procGroup(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 3 {
		return -1
	}
	g, err := strconv.Atoi(f[2])
	if err != nil {
		return -1
	}
	return g
}

// hookedPids are the processes of the worker (process group leader) whose
// startup hook registered for SIGUSR1 in file and did not release it.
func hookedPids(file string, leader int) []int {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	on := map[int]bool{}
	var order []int
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, registeredMarker); ok {
			if pid, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				if !on[pid] {
					order = append(order, pid)
				}
				on[pid] = true
			}
		} else if v, ok := strings.CutPrefix(line, releasedMarker); ok {
			if pid, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				on[pid] = false
			}
		}
	}
	var pids []int
	for _, pid := range order {
		// The group check keeps a reused pid from getting a SIGUSR1,
		// whose default action would end it.
		if on[pid] && procGroup(pid) == leader {
			pids = append(pids, pid)
		}
	}
	return pids
}

// faulthandlerDump sends SIGUSR1 to pid and returns what its faulthandler
// appended to file: it waits until the file grew and then stayed the same
// for dumpSettle, up to dumpTimeout.
func faulthandlerDump(file string, pid int) string {
	before := fileSize(file)
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		return fmt.Sprintf("could not signal it: %v\n", err)
	}
	deadline := time.Now().Add(dumpTimeout)
	size, stableSince := before, time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		<-tick.C
		if s := fileSize(file); s != size {
			size, stableSince = s, time.Now()
		} else if size > before && time.Since(stableSince) >= dumpSettle {
			break
		}
	}
	if size <= before {
		return fmt.Sprintf("no stacks within %s (the process may be stuck in the kernel)\n", dumpTimeout)
	}
	f, err := os.Open(file)
	if err != nil {
		return fmt.Sprintf("could not read %s: %v\n", file, err)
	}
	defer f.Close()
	buf := make([]byte, size-before)
	n, _ := f.ReadAt(buf, before)
	return string(buf[:n])
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// pySpyDump runs `py-spy dump --nonblocking` on pid when py-spy is on the
// PATH; --nonblocking reads a stopped process without waiting for it.
func pySpyDump(ctx context.Context, pid int) (string, bool) {
	bin, err := exec.LookPath("py-spy")
	if err != nil {
		return "", false
	}
	ctx, cancel := context.WithTimeout(ctx, pySpyTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "dump", "--nonblocking", "--pid", strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s(py-spy failed: %v)\n", out, err), true
	}
	return string(out), true
}
