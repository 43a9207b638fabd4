package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roverml/rover/internal/ckpt"
	"github.com/roverml/rover/internal/testbuf"
)

var ckptWorkerBuild struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// ckptWorker builds test/ckptworker once, next to TestMain's programs (so
// that TestMain's cleanup removes it), and returns its path.
func ckptWorker(t *testing.T) string {
	t.Helper()
	b := &ckptWorkerBuild
	b.once.Do(func() {
		b.path = filepath.Join(filepath.Dir(fakeWorker), "ckptworker")
		b.out, b.err = exec.Command("go", "build", "-o", b.path, "github.com/roverml/rover/test/ckptworker").CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("build ckptworker: %v\n%s", b.err, b.out)
	}
	return b.path
}

// ckptTensor is rover.Tensor as ckptworker writes it in JSON.
type ckptTensor struct {
	Name  string
	DType string
	Shape []int64
	Data  []byte
}

// ckptSnapshot is ckptworker's Snapshot.
type ckptSnapshot struct {
	Found   bool         `json:"found"`
	Step    int64        `json:"step"`
	Tensors []ckptTensor `json:"tensors"`
	Extra   []byte       `json:"extra"`
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// sameSnapshot reports how got differs from want (tensors in any order).
func sameSnapshot(got, want ckptSnapshot) string {
	if !got.Found {
		return "not found"
	}
	if got.Step != want.Step {
		return "step " + strconv.FormatInt(got.Step, 10) + ", want " + strconv.FormatInt(want.Step, 10)
	}
	if !bytes.Equal(got.Extra, want.Extra) {
		return "extra " + strconv.Quote(string(got.Extra)) + ", want " + strconv.Quote(string(want.Extra))
	}
	if len(got.Tensors) != len(want.Tensors) {
		return strconv.Itoa(len(got.Tensors)) + " tensors, want " + strconv.Itoa(len(want.Tensors))
	}
	for _, w := range want.Tensors {
		i := slices.IndexFunc(got.Tensors, func(g ckptTensor) bool { return g.Name == w.Name })
		if i < 0 {
			return "no tensor " + w.Name
		}
		g := got.Tensors[i]
		if g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) {
			return "tensor " + w.Name + " differs"
		}
	}
	return ""
}

// TestGoSDKCheckpointSurvivesRestart runs two Go workers that save steps 1
// to 5 through the Go SDK, persisting step 4, until one fails: after the
// restart each rank loads step 5 from the agent's memory with exactly the
// bytes it saved; storage holds step 4 (persisted by the worker) and step 5
// (persisted by the agent when the workers failed), in the safetensors
// format internal/ckpt decodes, and Restore brings back step 5.
//
// The storage is the launcher's (--checkpoint-dir), or, with none, the one
// the workers' checkpointers declare (url and keep): the same outcome.
func TestGoSDKCheckpointSurvivesRestart(t *testing.T) {
	worker := ckptWorker(t)
	for _, declared := range []bool{false, true} {
		t.Run(map[bool]string{false: "launcher's storage", true: "declared by the workers"}[declared], func(t *testing.T) {
			testGoSDKCheckpointSurvivesRestart(t, worker, declared)
		})
	}
}

func testGoSDKCheckpointSurvivesRestart(t *testing.T, worker string, declared bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, store := t.TempDir(), filepath.Join(t.TempDir(), "ckpts")
	launcher, workerArgs := []string{"--checkpoint-dir", store, "--checkpoint-keep", "2"}, []string{"--url", store}
	if declared {
		launcher, workerArgs = nil, []string{"--url", store, "--keep", "2"}
	}
	args := append(append([]string{"--standalone"}, launcher...), "--nproc-per-node", "2", "--max-restarts", "1", "--stop-grace-period", "5s",
		"--no-python", worker, "--out", dir)
	r := runAgent(ctx, t, append(args, workerArgs...)...)
	if r.err != nil {
		t.Fatalf("agent: %v\n%s", r.err, r.stderr)
	}
	if !strings.Contains(r.stderr.String(), "failing on purpose") {
		t.Errorf("rank 1 did not fail in the first attempt:\n%s", r.stderr)
	}
	b, err := os.ReadFile(filepath.Join(store, ckpt.LatestKey))
	// Step 4 was persisted by the worker; step 5, held only in memory, was
	// persisted by the agent when rank 1 failed.
	if err != nil || strings.TrimSpace(string(b)) != "5" {
		t.Errorf("storage's latest marker is %q (%v), want step 5 (persisted when the workers failed)", b, err)
	}
	for rank := range 2 {
		rs := strconv.Itoa(rank)
		var saved map[int64]ckptSnapshot
		readJSON(t, filepath.Join(dir, "saved-"+rs+".json"), &saved)
		var loaded struct {
			Steps    []int64      `json:"steps"`
			Load     ckptSnapshot `json:"load"`
			Restore  ckptSnapshot `json:"restore"`
			Step4    ckptSnapshot `json:"step4"`
			Step3    ckptSnapshot `json:"step3"`
			Restored []int64      `json:"restored"`
		}
		readJSON(t, filepath.Join(dir, "loaded-"+rs+".json"), &loaded)
		if !slices.Equal(loaded.Steps, []int64{5, 4}) {
			t.Errorf("rank %d: steps in memory after the restart %v, want [5 4]", rank, loaded.Steps)
		}
		if d := sameSnapshot(loaded.Load, saved[5]); d != "" {
			t.Errorf("rank %d: Load after the restart: %s", rank, d)
		}
		if d := sameSnapshot(loaded.Restore, saved[5]); d != "" {
			t.Errorf("rank %d: Restore from storage: %s", rank, d)
		}
		// Restoring step 5 into memory replaced the older slot (step 4).
		if loaded.Step4.Found || loaded.Step3.Found {
			t.Errorf("rank %d: LoadStep found steps 4 (%v) or 3 (%v) no longer in memory", rank, loaded.Step4.Found, loaded.Step3.Found)
		}
		if !slices.Equal(loaded.Restored, []int64{5}) {
			t.Errorf("rank %d: steps in memory after the restore %v, want [5]", rank, loaded.Restored)
		}

		file, err := os.ReadFile(filepath.Join(store, filepath.FromSlash(ckpt.RankPath(4, rank))))
		if err != nil {
			t.Fatalf("rank %d's persisted file: %v", rank, err)
		}
		tensors, meta, err := ckpt.Decode(file)
		if err != nil {
			t.Fatalf("rank %d's persisted file: %v", rank, err)
		}
		want := map[string]string{ckpt.MetaStep: "4", ckpt.MetaRank: rs, ckpt.MetaWorldSize: "2"}
		for k, v := range want {
			if meta[k] != v {
				t.Errorf("rank %d's persisted file: metadata %s=%q, want %q", rank, k, meta[k], v)
			}
		}
		rest, extra := ckpt.SplitExtra(tensors)
		got := ckptSnapshot{Found: true, Step: 4, Extra: extra}
		for _, t := range rest {
			got.Tensors = append(got.Tensors, ckptTensor(t))
		}
		if d := sameSnapshot(got, saved[4]); d != "" {
			t.Errorf("rank %d's persisted file: %s", rank, d)
		}
	}
}

// TestGoSDKCheckpointShmTooSmall saves a snapshot larger than any /dev/shm
// through the Go SDK, both into a new arena and into one that has to grow:
// each save fails with ErrShmTooSmall and the agent's advice, before any
// tensor is written, and the arena keeps the snapshot it had.
func TestGoSDKCheckpointShmTooSmall(t *testing.T) {
	worker := ckptWorker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	r := runAgent(ctx, t, "--standalone", "--nproc-per-node", "1", "--no-python", worker, "--huge", "--out", dir)
	if r.err != nil {
		t.Fatalf("agent: %v\n%s", r.err, r.stderr)
	}
	var h struct {
		CreateErr   string  `json:"create_err"`
		CreateIsShm bool    `json:"create_is_shm"`
		ResizeErr   string  `json:"resize_err"`
		ResizeIsShm bool    `json:"resize_is_shm"`
		FillCalled  bool    `json:"fill_called"`
		Steps       []int64 `json:"steps"`
	}
	readJSON(t, filepath.Join(dir, "huge-0.json"), &h)
	for _, c := range []struct {
		what, err string
		isShm     bool
	}{{"a new arena", h.CreateErr, h.CreateIsShm}, {"a growing arena", h.ResizeErr, h.ResizeIsShm}} {
		if !c.isShm {
			t.Errorf("%s: the error %q does not wrap rover.ErrShmTooSmall", c.what, c.err)
		}
		for _, s := range []string{"save checkpoint step", "shared memory too small", "shm", "--shm-size", "sizeLimit"} {
			if !strings.Contains(c.err, s) {
				t.Errorf("%s: the error %q does not mention %q", c.what, c.err, s)
			}
		}
	}
	if h.FillCalled {
		t.Error("SaveFunc wrote a tensor of a save that had no shared memory")
	}
	if !slices.Equal(h.Steps, []int64{1}) {
		t.Errorf("steps in memory after the failed save %v, want [1]", h.Steps)
	}
}

// TestPersistenceRetriesWhileStorageFails makes the checkpoint storage
// unreachable (its directory's parent is a regular file) when the worker
// persists step 4: training goes on, the agent logs the error and retries,
// and once the storage is back the retry makes step 4 durable, which the
// worker's Wait sees.
func TestPersistenceRetriesWhileStorageFails(t *testing.T) {
	worker := ckptWorker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, blocked := t.TempDir(), filepath.Join(t.TempDir(), "blocked")
	if err := os.WriteFile(blocked, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(blocked, "ckpts")
	stderr := &testbuf.Buffer{}
	unblocked := make(chan bool, 1)
	go func() {
		for ctx.Err() == nil {
			if strings.Contains(stderr.String(), "could not persist a checkpoint; training goes on, retrying") {
				unblocked <- os.Remove(blocked) == nil
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		unblocked <- false
	}()
	r := runAgentLogging(ctx, t, stderr, "--standalone", "--checkpoint-dir", store, "--checkpoint-keep", "2", "--nproc-per-node", "2", "--max-restarts", "1",
		"--stop-grace-period", "5s", "--no-python", worker, "--out", dir, "--url", store, "--no-initial-load")
	if r.err != nil {
		t.Fatalf("agent: %v\n%s", r.err, r.stderr)
	}
	if !<-unblocked {
		t.Fatalf("the agent never reported a failed persistence:\n%s", r.stderr)
	}
	// The worker checked that Wait returned step 4 as durable; the agent
	// persisted step 5 from memory when rank 1 failed.
	b, err := os.ReadFile(filepath.Join(store, ckpt.LatestKey))
	if err != nil || strings.TrimSpace(string(b)) != "5" {
		t.Errorf("storage's latest marker is %q (%v), want step 5\n%s", b, err, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(store, filepath.FromSlash(ckpt.RankPath(4, 1)))); err != nil {
		t.Errorf("step 4 was not persisted by a retry: %v", err)
	}
}

// TestGoSDKReplicatedKeepsOneCopyPerNode runs the same job in replicated
// mode: only local rank 0's saves reach shared memory and storage, and
// after the restart every rank loads that node copy.
func TestGoSDKReplicatedKeepsOneCopyPerNode(t *testing.T) {
	worker := ckptWorker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, store := t.TempDir(), filepath.Join(t.TempDir(), "ckpts")
	r := runAgent(ctx, t, "--standalone", "--checkpoint-dir", store, "--checkpoint-keep", "2", "--nproc-per-node", "2", "--max-restarts", "1", "--stop-grace-period", "5s",
		"--no-python", worker, "--out", dir, "--url", store, "--mode", "replicated")
	if r.err != nil {
		t.Fatalf("agent: %v\n%s", r.err, r.stderr)
	}
	for _, step := range []int64{4, 5} {
		if _, err := os.Stat(filepath.Join(store, filepath.FromSlash(ckpt.RankPath(step, 0)))); err != nil {
			t.Errorf("step %d: local rank 0's file: %v\n%s", step, err, r.stderr)
		}
		if _, err := os.Stat(filepath.Join(store, filepath.FromSlash(ckpt.RankPath(step, 1)))); !os.IsNotExist(err) {
			t.Errorf("step %d: local rank 1 persisted a second copy (%v)", step, err)
		}
	}
	var saved map[int64]ckptSnapshot
	readJSON(t, filepath.Join(dir, "saved-0.json"), &saved)
	for rank := range 2 {
		var loaded struct {
			Steps    []int64      `json:"steps"`
			Load     ckptSnapshot `json:"load"`
			Restored []int64      `json:"restored"`
		}
		readJSON(t, filepath.Join(dir, "loaded-"+strconv.Itoa(rank)+".json"), &loaded)
		if len(slices.Compact(slices.Clone(loaded.Restored))) != len(loaded.Restored) || !slices.Contains(loaded.Restored, 5) {
			t.Errorf("rank %d: steps after the restore %v, want step 5 listed once", rank, loaded.Restored)
		}
		// Rank 0's restore from storage may replace step 4 in the node copy
		// before rank 1 looks.
		if len(loaded.Steps) == 0 || loaded.Steps[0] != 5 {
			t.Errorf("rank %d: steps in memory after the restart %v, want the node copy's 5 first", rank, loaded.Steps)
		}
		if d := sameSnapshot(loaded.Load, saved[5]); d != "" {
			t.Errorf("rank %d: Load after the restart: %s", rank, d)
		}
	}
}
