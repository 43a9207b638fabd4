package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roverml/rover/internal/k8stest"
	"github.com/roverml/rover/internal/platform"
	"github.com/roverml/rover/internal/platform/platformtest"
	"github.com/roverml/rover/internal/proc"

	"github.com/roverml/rover/internal/testbuf"
)

func watch(t *testing.T, l *Local) *platformtest.Recorder {
	t.Helper()
	return platformtest.Record(t, l)
}

func spec(id string, argv ...string) platform.NodeSpec {
	return platform.NodeSpec{Job: "j", Group: "worker", ID: id, Argv: argv, Env: map[string]string{"GREETING": "hi"}}
}

// TestLocalNodes runs real processes: one that exits with a code, one that
// runs until deleted; their events, logs, console and environment.
func TestLocalNodes(t *testing.T) {
	ctx := context.Background()
	console := &testbuf.Buffer{}
	l, err := New(Options{Dir: t.TempDir(), Console: console, Grace: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	r := watch(t, l)

	if err := l.Create(ctx, spec("j-worker-0-0", "sh", "-c", `echo "$GREETING from $NODE_ID rank $NODE_RANK worker $WORKER_ID"; exit 3`)); err != nil {
		t.Fatal(err)
	}
	if e := r.WaitKind(t, "j-worker-0-0", platform.Exited); e.ExitCode != 3 || e.Signal != 0 || !e.Failed() {
		t.Errorf("exit event %+v, want code 3", e)
	}
	log, _ := os.ReadFile(filepath.Join(l.LogDir("j-worker-0-0"), "stdout.log"))
	if string(log) != "hi from j-worker-0-0 rank 0 worker 0\n" {
		t.Errorf("node log %q", log)
	}
	if !strings.Contains(console.String(), "[j-worker-0-0]") {
		t.Errorf("console %q lacks the node's prefix", console.String())
	}
	if err := l.Create(ctx, spec("j-worker-0-0", "true")); !errors.Is(err, platform.ErrExists) {
		t.Errorf("Create of a held id: %v, want ErrExists", err)
	}

	if err := l.Create(ctx, spec("j-worker-1-0", "sleep", "600")); err != nil {
		t.Fatal(err)
	}
	r.WaitKind(t, "j-worker-1-0", platform.Running)
	// A second watcher first hears of every node held now.
	r2 := watch(t, l)
	r2.WaitKind(t, "j-worker-0-0", platform.Exited)
	r2.WaitKind(t, "j-worker-1-0", platform.Running)

	for _, id := range []string{"j-worker-1-0", "j-worker-0-0", "j-worker-1-0", "unknown"} {
		if err := l.Delete(ctx, id); err != nil {
			t.Errorf("Delete(%s): %v", id, err)
		}
	}
	if e := r.WaitKind(t, "j-worker-1-0", platform.Exited); e.Signal != 15 || e.ExitCode != 143 {
		t.Errorf("deleted node's exit %+v, want SIGTERM (143)", e)
	}
	r.WaitKind(t, "j-worker-1-0", platform.Deleted)
	r.WaitKind(t, "j-worker-0-0", platform.Deleted)
}

// TestLocalRefuses: what the local platform cannot do is refused, not ignored.
func TestLocalRefuses(t *testing.T) {
	l, err := New(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	s := spec("j-worker-0-0", "true")
	s.Image = "train:latest"
	if err := l.Create(context.Background(), s); !errors.Is(err, platform.ErrUnsupported) {
		t.Errorf("an image: %v, want ErrUnsupported", err)
	}
	s = spec("j-worker-0-0", "true")
	s.Resources.MemoryBytes = 1 << 30
	if err := l.Create(context.Background(), s); !errors.Is(err, platform.ErrUnsupported) {
		t.Errorf("resources: %v, want ErrUnsupported", err)
	}
	if err := l.Create(context.Background(), spec("Bad_ID", "true")); !errors.Is(err, platform.ErrInvalidSpec) {
		t.Errorf("a bad id: %v, want ErrInvalidSpec", err)
	}
	// A program that cannot start is a node that failed at once.
	r := watch(t, l)
	if err := l.Create(context.Background(), spec("j-worker-2-0", "/nonexistent/agent")); err != nil {
		t.Fatal(err)
	}
	if e := r.WaitKind(t, "j-worker-2-0", platform.Exited); e.ExitCode != 127 || e.Reason == "" {
		t.Errorf("a missing program: %+v, want exit 127 with the reason", e)
	}
}

// TestLocalKillsWhatOutlivesTheAgent: an agent killed with SIGKILL leaves
// its children running (one in its group, one in a session of its own);
// the platform kills them, and runs AfterExit, before it reports the exit.
func TestLocalKillsWhatOutlivesTheAgent(t *testing.T) {
	exited := make(chan string, 1)
	l, err := New(Options{Dir: t.TempDir(), Grace: 5 * time.Second, AfterExit: func(id string) { exited <- id }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	r := watch(t, l)
	const id = "j-worker-0-0"
	tag := []byte(l.tag(id))
	t.Cleanup(func() { proc.KillTagged(string(tag)) })
	if err := l.Create(context.Background(), spec(id, "sh", "-c", `setsid sleep 600 & sleep 600 & kill -9 $$`)); err != nil {
		t.Fatal(err)
	}
	if e := r.WaitKind(t, id, platform.Exited); e.Signal != 9 {
		t.Errorf("exit %+v, want SIGKILL", e)
	}
	select {
	case got := <-exited:
		if got != id {
			t.Errorf("AfterExit(%q), want %q", got, id)
		}
	default:
		t.Error("the node was reported Exited before AfterExit ran")
	}
	deadline := time.Now().Add(30 * time.Second)
	for pids := proc.TaggedPids(tag); len(pids) > 0; pids = proc.TaggedPids(tag) {
		if time.Now().After(deadline) {
			t.Fatalf("processes %v of the node still run after its agent's exit was reported", pids)
		}
		time.Sleep(20 * time.Millisecond) // SIGKILLed: they are being torn down
	}
}

// TestLocalStartsNothingOnceStopping: a cancelled Create, and any Create
// once Close has begun, start no process.
func TestLocalStartsNothingOnceStopping(t *testing.T) {
	l, err := New(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	r := watch(t, l)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Create(ctx, spec("j-worker-0-0", "sleep", "600")); !errors.Is(err, context.Canceled) {
		t.Errorf("Create with a cancelled context: %v, want context.Canceled", err)
	}
	l.Close()
	if err := l.Create(context.Background(), spec("j-worker-1-0", "sleep", "600")); !errors.Is(err, ErrClosed) {
		t.Errorf("Create after Close: %v, want ErrClosed", err)
	}
	for _, e := range r.All() {
		if e.NodeID != "" {
			t.Errorf("event %+v: a node was started", e)
		}
	}
}

// TestLocalCapacity: with MaxNodes 2 the third and later nodes are
// reported Pending and their processes wait; a waiting node deleted goes
// at once without ever running; the oldest waiting node starts when a
// running one exits, the next when one is deleted.
func TestLocalCapacity(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := New(Options{Dir: filepath.Join(dir, "nodes"), Grace: 5 * time.Second, MaxNodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	if got := l.Capabilities(); got.MaxNodes != 2 || got.Capacity() != 2 {
		t.Errorf("Capabilities %+v (capacity %d), want MaxNodes 2", got, got.Capacity())
	}
	r := watch(t, l)
	flag := filepath.Join(dir, "go")
	nodes := []platform.NodeSpec{
		spec("j-worker-0-0", "sh", "-c", `while [ ! -e "$0" ]; do sleep 0.05; done`, flag), // exits once flag exists
		spec("j-worker-1-0", "sleep", "600"),
		spec("j-worker-2-0", "sh", "-c", `echo started; exec sleep 600`),
		spec("j-worker-3-0", "sleep", "600"),
		spec("j-worker-4-0", "sleep", "600"),
	}
	for _, s := range nodes {
		if err := l.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	r.WaitKind(t, "j-worker-0-0", platform.Running)
	r.WaitKind(t, "j-worker-1-0", platform.Running)
	for _, id := range []string{"j-worker-2-0", "j-worker-3-0", "j-worker-4-0"} {
		r.WaitKind(t, id, platform.Pending)
		if waiting := l.isWaiting(id); !waiting {
			t.Errorf("node %s started beyond the capacity of 2", id)
		}
	}
	// A watcher that starts now hears the waiting nodes are Pending.
	r.WaitKind(t, "j-worker-2-0", platform.Pending)
	if e := watch(t, l).WaitKind(t, "j-worker-3-0", platform.Pending); e.NodeID != "j-worker-3-0" {
		t.Errorf("first report %+v", e)
	}

	if err := l.Delete(ctx, "j-worker-4-0"); err != nil {
		t.Fatal(err)
	}
	r.WaitKind(t, "j-worker-4-0", platform.Deleted)

	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if e := r.WaitKind(t, "j-worker-0-0", platform.Exited); e.Failed() {
		t.Errorf("node 0 exit %+v, want success", e)
	}
	r.WaitKind(t, "j-worker-2-0", platform.Running) // the oldest waiting node
	if !l.isWaiting("j-worker-3-0") {
		t.Error("node 3 started too: the exit of node 0 freed one place")
	}
	waitFor(t, "node 2's output", func() bool {
		log, _ := os.ReadFile(filepath.Join(l.LogDir("j-worker-2-0"), "stdout.log"))
		return string(log) == "started\n"
	})

	if err := l.Delete(ctx, "j-worker-1-0"); err != nil {
		t.Fatal(err)
	}
	r.WaitKind(t, "j-worker-3-0", platform.Running)
	for _, e := range r.Of("j-worker-4-0") {
		if e.Kind != platform.Pending && e.Kind != platform.Deleted {
			t.Errorf("the waiting node deleted had event %+v; want only Pending and Deleted", e)
		}
	}
	if _, err := New(Options{Dir: dir, MaxNodes: -1}); err == nil || !strings.Contains(err.Error(), "MaxNodes is -1") {
		t.Errorf("New with MaxNodes -1: %v, want a refusal naming it", err)
	}
}

// isWaiting reports whether node id waits for a place.
func (l *Local) isWaiting(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.nodes[id]
	return n != nil && n.waiting
}

// waitFor polls cond until it holds, failing after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	k8stest.WaitFor(t, what, cond)
}

// TestNodeCPUSeconds: a node whose child process spins (behind a shell
// that waits for it) shows its CPU time growing; a node not running has
// none.
func TestNodeCPUSeconds(t *testing.T) {
	ctx := context.Background()
	l, err := New(Options{Dir: t.TempDir(), Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	r := watch(t, l)
	if _, ok := l.NodeCPUSeconds("j-worker-0-0"); ok {
		t.Error("CPU time of a node never created")
	}
	if err := l.Create(ctx, spec("j-worker-0-0", "sh", "-c", `sh -c 'while :; do :; done'; echo done`)); err != nil {
		t.Fatal(err)
	}
	r.WaitKind(t, "j-worker-0-0", platform.Running)
	k8stest.WaitFor(t, "the spinning node to use half a second of CPU", func() bool {
		s, ok := l.NodeCPUSeconds("j-worker-0-0")
		return ok && s >= 0.5
	})
	if err := l.Delete(ctx, "j-worker-0-0"); err != nil {
		t.Fatal(err)
	}
	r.WaitKind(t, "j-worker-0-0", platform.Deleted)
	if _, ok := l.NodeCPUSeconds("j-worker-0-0"); ok {
		t.Error("CPU time of a deleted node")
	}
}
