package agent_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	roverv1 "github.com/roverml/rover/api/rover/v1"
	"github.com/roverml/rover/internal/agent"
	"github.com/roverml/rover/internal/runconfig"
	"github.com/roverml/rover/internal/store"
	"github.com/roverml/rover/internal/testbuf"
	"github.com/roverml/rover/internal/testsrc"
	"google.golang.org/protobuf/proto"
)

// beatRecorder keeps the heartbeats a recording proxy saw going to the
// master.
type beatRecorder struct {
	mu     sync.Mutex
	beats  []*roverv1.Heartbeat
	notify chan struct{} // size one: a beat arrived
}

func (r *beatRecorder) add(hb *roverv1.Heartbeat) {
	r.mu.Lock()
	r.beats = append(r.beats, hb)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *beatRecorder) snapshot() []*roverv1.Heartbeat {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*roverv1.Heartbeat(nil), r.beats...)
}

// events is every node event recorded, in the order sent.
func (r *beatRecorder) events() []*roverv1.NodeEvent {
	var out []*roverv1.NodeEvent
	for _, hb := range r.snapshot() {
		out = append(out, hb.GetEvents()...)
	}
	return out
}

// waitFor waits until ok holds of the recorded events, or fails the test.
func (r *beatRecorder) waitFor(ctx context.Context, t *testing.T, what string, ok func([]*roverv1.NodeEvent) bool) {
	t.Helper()
	for !ok(r.events()) {
		select {
		case <-r.notify:
		case <-ctx.Done():
			t.Fatalf("the master heard no %s; events: %v", what, r.events())
		}
	}
}

// startRecordingProxy serves h2c on loopback and forwards every call to the
// master at target, recording the heartbeats of the agents' sessions.
func startRecordingProxy(t *testing.T, target string) (string, *beatRecorder) {
	t.Helper()
	rec := &beatRecorder{notify: make(chan struct{}, 1)}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: target})
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	rp.Transport = tr
	rp.FlushInterval = -1
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasSuffix(req.URL.Path, "/Session") {
			req.Body = &sessionTap{body: req.Body, rec: rec, t: t}
		}
		rp.ServeHTTP(w, req)
	})
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), rec
}

// sessionTap reads a session's request stream (gRPC envelopes of
// SessionRequest) as it passes, and records its heartbeats.
type sessionTap struct {
	body io.ReadCloser
	buf  []byte
	rec  *beatRecorder
	t    *testing.T
}

func (s *sessionTap) Read(p []byte) (int, error) {
	n, err := s.body.Read(p)
	s.buf = append(s.buf, p[:n]...)
	for len(s.buf) >= 5 {
		size := int(binary.BigEndian.Uint32(s.buf[1:5]))
		if len(s.buf) < 5+size {
			break
		}
		flags, msg := s.buf[0], s.buf[5:5+size]
		if flags&1 != 0 {
			zr, zerr := gzip.NewReader(bytes.NewReader(msg))
			if zerr == nil {
				msg, zerr = io.ReadAll(zr)
			}
			if zerr != nil {
				s.t.Errorf("a compressed session message: %v", zerr)
			}
		}
		var m roverv1.SessionRequest
		if uerr := proto.Unmarshal(msg, &m); uerr != nil {
			s.t.Errorf("a session message the proxy cannot read: %v", uerr)
		} else if hb := m.GetHeartbeat(); hb != nil {
			s.rec.add(hb)
		}
		s.buf = s.buf[5+size:]
	}
	return n, err
}

func (s *sessionTap) Close() error { return s.body.Close() }

// torchPython is a Python that imports torch (scripts/find-python); the
// test fails without one.
func torchPython(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(filepath.Join("..", "..", "scripts", "find-python")).Output()
	if err != nil {
		t.Fatalf("no Python that can import torch (%v): set PYTHON_EXEC or run `scripts/find-python --install`", err)
	}
	return strings.TrimSpace(string(out))
}

// nodeEventsScript trains 8 steps with rover.checkpoint (a memory save every
// step, persisted at step 3) and reports its steps. Both workers load, then
// wait for each other. In restart 0 they wait for the file "go"; local rank 1 then dies after step 5,
// once local rank 0 saved it too (the ranks do not step together), while local rank 0 waits there to be
// stopped. In restart 1 both resume
// from memory, finish, and wait for the file "done" before exiting.
const nodeEventsScript = `
import os, sys, time, torch
import rover.checkpoint, rover.progress
d = sys.argv[1]
restart, local = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["LOCAL_RANK"]
def wait_file(name):
    while not os.path.exists(os.path.join(d, name)):
        time.sleep(0.01)
ck = rover.checkpoint.Checkpointer(os.path.join(d, "ckpt"))
got = ck.load()
start = 0 if got is None else got[0] + 1
open(os.path.join(d, f"loaded-{restart}-{local}"), "w").close()
for other in ("0", "1"):  # a barrier, as DDP's first collective is
    wait_file(f"loaded-{restart}-{other}")
if restart == "0":
    assert got is None, got
    wait_file("go")
else:
    assert got is not None and got[0] == 5 and ck.restored_from == "memory", (got, ck.restored_from)
w = torch.zeros(250000) if got is None else got[1]["w"]
for step in range(start, 8):
    w += 1
    ck.save(step, {"w": w}, persist=(step == 3))
    rover.progress.step(step)
    if restart == "0" and step == 5:
        open(os.path.join(d, f"saved5-{local}"), "w").close()
        if local == "1":
            wait_file("saved5-0")  # both ranks hold step 5 in memory before one dies
            os._exit(3)
        while True:
            time.sleep(0.05)
ck.wait()
wait_file("done")
`

// TestHeartbeatsCarryNodeEvents runs a node of two Python workers (real
// torch, rover.checkpoint) against a real master behind a recording proxy
// and checks what the heartbeats carried: the round's events in order
// (WORKERS_STARTED, RESTORE_STARTED, RESUMED, one CHECKPOINT_SAVED per step
// with its blocking time, durable once persisted), a restart's resume from
// memory at the step the failed round reached, sent_unix_nanos on every
// beat and the newest step's time in the progress. With a heartbeat
// interval of an hour, the events reach the master at once: the first
// round's RESUMED arrives while the workers wait for it, before any step.
func TestHeartbeatsCarryNodeEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	proxy, rec := startRecordingProxy(t, startMaster(t))
	dir := t.TempDir()
	done, stderr := runPythonNode(ctx, t, nodeEventsScript, dir, "--nproc-per-node", "2", "--rdzv-endpoint", proxy, "--max-restarts", "1",
		"--rdzv-conf", "last_call_timeout=100ms,join_timeout=60s,heartbeat_timeout=3h,disconnect_grace=1s", "--heartbeat-interval", "1h")

	resumedAt := func(step int64, src roverv1.CheckpointSource) func([]*roverv1.NodeEvent) bool {
		return func(es []*roverv1.NodeEvent) bool {
			for _, e := range es {
				if e.GetKind() == roverv1.NodeEventKind_NODE_EVENT_KIND_RESUMED && e.GetStep() == step && e.GetSource() == src {
					return true
				}
			}
			return false
		}
	}
	rec.waitFor(ctx, t, "RESUMED from nothing", resumedAt(-1, roverv1.CheckpointSource_CHECKPOINT_SOURCE_NONE))
	touch(t, filepath.Join(dir, "go"))
	rec.waitFor(ctx, t, "RESUMED from memory at step 5", resumedAt(5, roverv1.CheckpointSource_CHECKPOINT_SOURCE_MEMORY))
	saved7 := func(es []*roverv1.NodeEvent) bool {
		for _, e := range es {
			if e.GetKind() == roverv1.NodeEventKind_NODE_EVENT_KIND_CHECKPOINT_SAVED && e.GetStep() == 7 && !e.GetDurable() {
				return true
			}
		}
		return false
	}
	rec.waitFor(ctx, t, "CHECKPOINT_SAVED of step 7", saved7)
	touch(t, filepath.Join(dir, "done"))
	if err := <-done; err != nil {
		t.Fatalf("agent: %v\n%s", err, stderr)
	}

	// The rounds' events, durable saves apart, in the order sent.
	byRound := map[int64][]string{}
	var rounds []int64
	durable := map[string]bool{}
	for _, e := range rec.events() {
		if e.GetTimeUnixNanos() <= 0 {
			t.Errorf("event %v has no time", e)
		}
		if e.GetDurable() {
			durable[fmt.Sprintf("%d/%d", e.GetRound(), e.GetStep())] = true
			continue
		}
		if _, ok := byRound[e.GetRound()]; !ok {
			rounds = append(rounds, e.GetRound())
		}
		s := strings.TrimPrefix(e.GetKind().String(), "NODE_EVENT_KIND_")
		switch e.GetKind() {
		case roverv1.NodeEventKind_NODE_EVENT_KIND_RESUMED:
			s += fmt.Sprintf("(%d %s)", e.GetStep(), strings.TrimPrefix(e.GetSource().String(), "CHECKPOINT_SOURCE_"))
		case roverv1.NodeEventKind_NODE_EVENT_KIND_LAST_STEP:
			s += fmt.Sprintf("(%d)", e.GetStep())
		case roverv1.NodeEventKind_NODE_EVENT_KIND_CHECKPOINT_SAVED:
			s += fmt.Sprintf("(%d)", e.GetStep())
			if e.GetBlockingNanos() <= 0 {
				t.Errorf("the save of step %d reports no blocking time", e.GetStep())
			}
		}
		byRound[e.GetRound()] = append(byRound[e.GetRound()], s)
	}
	if len(rounds) != 2 || rounds[0] >= rounds[1] {
		t.Fatalf("events of rounds %v, want two rounds in order: %v", rounds, byRound)
	}
	wantFirst := "WORKERS_STARTED RESTORE_STARTED RESUMED(-1 NONE) CHECKPOINT_SAVED(0) CHECKPOINT_SAVED(1) CHECKPOINT_SAVED(2) " +
		"CHECKPOINT_SAVED(3) CHECKPOINT_SAVED(4) CHECKPOINT_SAVED(5) LAST_STEP(5)"
	if got := strings.Join(byRound[rounds[0]], " "); got != wantFirst {
		t.Errorf("round %d's events:\n got %s\nwant %s", rounds[0], got, wantFirst)
	}
	// The last round's LAST_STEP may not go out before the agent ends.
	wantSecond := "WORKERS_STARTED RESTORE_STARTED RESUMED(5 MEMORY) CHECKPOINT_SAVED(6) CHECKPOINT_SAVED(7)"
	if got := strings.TrimSuffix(strings.Join(byRound[rounds[1]], " "), " LAST_STEP(7)"); got != wantSecond {
		t.Errorf("round %d's events:\n got %s\nwant %s", rounds[1], got, wantSecond)
	}
	if k := fmt.Sprintf("%d/3", rounds[0]); !durable[k] {
		t.Errorf("no durable save of step 3 in round %d: durable %v", rounds[0], durable)
	}
	stepTimes := 0
	for _, hb := range rec.snapshot() {
		if hb.GetSentUnixNanos() <= 0 {
			t.Errorf("a heartbeat without sent_unix_nanos: %v", hb)
		}
		for _, w := range hb.GetProgress().GetWorkers() {
			if w.GetStepUnixNanos() <= 0 {
				t.Errorf("progress without the step's time: %v", w)
			}
			stepTimes++
		}
	}
	if stepTimes == 0 {
		t.Error("no heartbeat carried progress")
	}
}

// runPythonNode runs a one-node agent (node id n0) of script, a Python
// program (the torch Python) given dir as its argument, with args besides.
func runPythonNode(ctx context.Context, t *testing.T, program, dir string, args ...string) (<-chan error, *testbuf.Buffer) {
	t.Helper()
	py := torchPython(t)
	script := filepath.Join(dir, "train.py")
	if err := os.WriteFile(script, []byte(program), 0o600); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"--nnodes", "1", "--node-id", "n0", "--stop-grace-period", "2s"}, args...)
	args = append(args, script, dir)
	env := map[string]string{"ROVER_TOKEN": token}
	cfg, err := runconfig.Parse(args, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	testsrc.Track()
	stderr := &testbuf.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, cfg, agent.Options{Stdout: &testbuf.Buffer{}, Stderr: stderr, PythonExec: py,
			Getenv: func(k string) string { return env[k] }, Logger: slog.New(slog.NewTextHandler(stderr, nil))})
	}()
	return done, stderr
}

// TestNodeEventsOutliveAMasterRestart: an event of a save made while the
// master is away waits in the agent's queue and reaches the restarted
// master (same address and journal) once the agent is back, and the
// round's milestones (its RESUMED) go out again on the new session.
func TestNodeEventsOutliveAMasterRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st := store.NewMemory()
	first := startMasterOn(t, "127.0.0.1:0", st)
	addr := first.Addr()
	proxy, rec := startRecordingProxy(t, addr)
	dir := t.TempDir()
	done, stderr := runPythonNode(ctx, t, `
import os, sys, time, torch
import rover.checkpoint
d = sys.argv[1]
def wait_file(name):
    while not os.path.exists(os.path.join(d, name)):
        time.sleep(0.01)
ck = rover.checkpoint.Checkpointer()
assert ck.load() is None
wait_file("save")
ck.save(1, {"w": torch.zeros(4)})
wait_file("done")
`, dir, "--nproc-per-node", "1", "--rdzv-endpoint", proxy, "--rdzv-conf", "join_timeout=60s,heartbeat_timeout=60s", "--heartbeat-interval", "500ms")
	rec.waitFor(ctx, t, "RESUMED", func(es []*roverv1.NodeEvent) bool {
		return len(es) > 0 && es[len(es)-1].GetKind() == roverv1.NodeEventKind_NODE_EVENT_KIND_RESUMED
	})
	first.stop()
	waitFor(t, "the agent to notice the master is gone", func() bool { return strings.Contains(stderr.String(), "lost the master") })
	touch(t, filepath.Join(dir, "save"))
	startMasterOn(t, addr, st)
	rec.waitFor(ctx, t, "the save made while the master was away", func(es []*roverv1.NodeEvent) bool {
		for _, e := range es {
			if e.GetKind() == roverv1.NodeEventKind_NODE_EVENT_KIND_CHECKPOINT_SAVED && e.GetStep() == 1 && e.GetBlockingNanos() > 0 {
				return true
			}
		}
		return false
	})
	if !strings.Contains(stderr.String(), "reconnected to the master") {
		t.Errorf("the save's event arrived, but not over a new session:\n%s", stderr)
	}
	// The round's milestones went out again on the new session, for a
	// master that never journaled them.
	rec.waitFor(ctx, t, "the round's milestones sent again", func(es []*roverv1.NodeEvent) bool {
		n := 0
		for _, e := range es {
			if e.GetKind() == roverv1.NodeEventKind_NODE_EVENT_KIND_RESUMED {
				n++
			}
		}
		return n >= 2
	})
	touch(t, filepath.Join(dir, "done"))
	if err := <-done; err != nil {
		t.Fatalf("agent: %v\n%s", err, stderr)
	}
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}
