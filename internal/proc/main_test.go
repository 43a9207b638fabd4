package proc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv switches the test binary into a helper process (see TestMain).
const helperEnv = "ROVER_PROC_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "pdeathsig":
		pdeathsigHelper(Spec{Argv: []string{"sleep", "60"}})
	case "pdeathsig-term":
		// The child records the signal its parent's death sends it.
		r, w, err := os.Pipe()
		if err != nil {
			os.Exit(2)
		}
		pdeathsigHelper(Spec{
			Argv:              []string{"sh", "-c", `trap 'echo TERM > "$PDEATHSIG_OUT"; kill $!; exit 0' TERM; echo ready; sleep 600 & wait`},
			Env:               os.Environ(),
			Stdout:            w,
			ParentDeathSignal: syscall.SIGTERM,
		}, r)
	default:
		fmt.Fprintf(os.Stderr, "unknown %s=%q\n", helperEnv, os.Getenv(helperEnv))
		os.Exit(2)
	}
}

// pdeathsigHelper starts a long-lived child through Start, prints its pid and
// dies abruptly, leaving the child to the parent-death signal.
// With ready, it first waits for the child's first line there (the child
// has set up its signal handling).
func pdeathsigHelper(spec Spec, ready ...*os.File) {
	p, err := Start(spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for _, r := range ready {
		if _, err := bufio.NewReader(r).ReadString('\n'); err != nil {
			os.Exit(2)
		}
	}
	fmt.Printf("%d\n", p.Pid())
	_ = os.Stdout.Sync()
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// guard bounds waits that should finish quickly; it only turns a hang into a
// failure, never asserts on timing.
const guard = 30 * time.Second

// waitGone polls until pid no longer runs: gone, or a zombie nobody reaps
// (possible when the test's PID 1 does not reap orphans).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for !gone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still running after %v", pid, guard)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return false
	}
	state := stat[i+2]
	return state == 'Z' || state == 'X'
}

// waitDone waits for p to be reaped, failing the test after guard.
func waitDone(t *testing.T, p *Process) Exit {
	t.Helper()
	select {
	case <-p.Done():
		return p.Exit()
	case <-time.After(guard):
		p.Stop(0)
		t.Fatalf("pid %d not done after %v", p.Pid(), guard)
		return Exit{}
	}
}

// lineNotifier is a writer that sends each complete line it receives.
type lineNotifier struct {
	lines chan string
	buf   strings.Builder
}

func newLineNotifier() *lineNotifier { return &lineNotifier{lines: make(chan string, 16)} }

func (n *lineNotifier) Write(p []byte) (int, error) {
	n.buf.Write(p)
	for {
		s := n.buf.String()
		line, rest, ok := strings.Cut(s, "\n")
		if !ok {
			return len(p), nil
		}
		n.lines <- line
		n.buf.Reset()
		n.buf.WriteString(rest)
	}
}

// next returns the next line, failing the test after guard.
func (n *lineNotifier) next(t *testing.T) string {
	t.Helper()
	select {
	case l := <-n.lines:
		return l
	case <-time.After(guard):
		t.Fatalf("no output line after %v", guard)
		return ""
	}
}
