package python

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/roverml/rover/internal/ckpt"
)

// The tests in this file run Checkpointer without `rover run` (no agent):
// checkpoints written by Python must read in Go and the other way round,
// with internal/ckpt's validation rules on both sides.

var (
	torchOnce sync.Once
	torchExe  string
	torchErr  error
)

// torchPython returns a Python that can import torch, as scripts/find-python
// finds it ($PYTHON_EXEC first). Without one the test fails rather than
// skips: these tests prove that checkpoints cross between Python and Go.
func torchPython(t *testing.T) string {
	t.Helper()
	torchOnce.Do(func() {
		out, err := exec.Command(filepath.Join("..", "scripts", "find-python")).Output()
		torchExe, torchErr = strings.TrimSpace(string(out)), err
	})
	if torchErr != nil {
		t.Fatalf("no Python that can import torch (%v): set PYTHON_EXEC or run `scripts/find-python --install`", torchErr)
	}
	return torchExe
}

// pythonCmd is script run by the torch Python, outside any rover job: no
// agent socket and no torchrun variables but those in env.
func pythonCmd(ctx context.Context, t *testing.T, script string, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, torchPython(t), append([]string{"-c", script}, args...)...)
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "ROVER_AGENT_SOCKET", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT":
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

func runPython(t *testing.T, script string, env []string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := pythonCmd(ctx, t, script, env, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v\n%s%s", err, out, stderr.String())
	}
	return out
}

func f32s(vs ...float32) []byte {
	b := make([]byte, 0, 4*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func i64s(vs ...int64) []byte {
	b := make([]byte, 0, 8*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return b
}

// byName indexes tensors, dropping the extras document.
func byName(tensors []ckpt.Tensor) map[string]ckpt.Tensor {
	m := map[string]ckpt.Tensor{}
	for _, x := range tensors {
		if x.Name != ckpt.ExtraName {
			m[x.Name] = x
		}
	}
	return m
}

func stepDirs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		if e.IsDir() {
			files, err := os.ReadDir(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				names = append(names, e.Name()+"/"+f.Name())
			}
		}
	}
	return names
}

// TestDirectCheckpointReadByGo saves five steps with keep=2 from Python
// without the agent and reads them with internal/ckpt: the two newest steps
// are left, the manifest is the one Go would write byte for byte, and the
// latest step's tensors and metadata are what Python saved.
func TestDirectCheckpointReadByGo(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "ckpt")
	script := `
import sys, torch
sys.path.insert(0, ".")
from rover.checkpoint import Checkpointer
c = Checkpointer(sys.argv[1], keep=2)
for step in range(1, 6):
    c.save(step, {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3) * step,
                  "i": torch.tensor([step, -step]), "lr": 0.1 * step}, persist=True)
assert c.wait() == 5 and c.latest_step() == 5, (c.wait(), c.latest_step())
print("ok")
`
	runPython(t, script, nil, dir)

	wantFiles := []string{"latest", "step-000000000004", "step-000000000004/manifest.json",
		"step-000000000004/rank-00000.safetensors", "step-000000000005", "step-000000000005/manifest.json",
		"step-000000000005/rank-00000.safetensors"}
	if diff := cmp.Diff(wantFiles, stepDirs(t, dir)); diff != "" {
		t.Errorf("checkpoint directory (-want +got):\n%s", diff)
	}
	ctx := context.Background()
	b, err := ckpt.OpenBucket(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, err := ckpt.LoadLatest(ctx, b)
	if err != nil {
		t.Fatalf("Go does not load Python's checkpoint: %v", err)
	}
	if m.Step != 5 || m.WorldSize != 1 || m.Mode != ckpt.Sharded || len(m.Files) != 1 {
		t.Fatalf("manifest %+v", m)
	}
	raw, err := os.ReadFile(filepath.Join(dir, ckpt.ManifestPath(5)))
	if err != nil {
		t.Fatal(err)
	}
	if again, err := ckpt.MarshalManifest(m); err != nil || string(again) != string(raw) {
		t.Errorf("Python's manifest is not what Go writes for it (err %v):\n%s\nGo:\n%s", err, raw, again)
	}
	tensors, meta, err := ckpt.LoadRank(ctx, b, m, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantMeta := map[string]string{ckpt.MetaStep: "5", ckpt.MetaRank: "0", ckpt.MetaWorldSize: "1", ckpt.MetaMode: "sharded"}
	if diff := cmp.Diff(wantMeta, meta); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
	want := map[string]ckpt.Tensor{
		"state.w": {Name: "state.w", DType: "F32", Shape: []int64{2, 3}, Data: f32s(0, 5, 10, 15, 20, 25)},
		"state.i": {Name: "state.i", DType: "I64", Shape: []int64{2}, Data: i64s(5, -5)},
	}
	if diff := cmp.Diff(want, byName(tensors)); diff != "" {
		t.Errorf("tensors of step 5 (-want +got):\n%s", diff)
	}
	if _, extra := ckpt.SplitExtra(tensors); len(extra) == 0 {
		t.Error("no extras document (__rover_extra__)")
	}
	if deleted, err := ckpt.Keep(ctx, b, 2); err != nil || len(deleted) != 0 {
		t.Errorf("Go's Keep(2) after Python's deleted %v (err %v), want nothing", deleted, err)
	}
}

// goCheckpoint persists and commits step as the agent and the master do:
// every rank's file, then the manifest and the latest marker.
func goCheckpoint(t *testing.T, b *ckpt.Bucket, step int64, world int, mode ckpt.Mode, files map[int][]ckpt.Tensor, meta bool) {
	t.Helper()
	ctx := context.Background()
	c, err := ckpt.NewCommit(world, mode)
	if err != nil {
		t.Fatal(err)
	}
	for rank, tensors := range files {
		var md map[string]string
		if meta {
			md = map[string]string{ckpt.MetaStep: strconv.FormatInt(step, 10), ckpt.MetaRank: strconv.Itoa(rank)}
		}
		var payload strings.Builder
		if err := ckpt.Encode(&payload, tensors, md); err != nil {
			t.Fatal(err)
		}
		info, err := ckpt.PersistRank(ctx, b, step, rank, []byte(payload.String()))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Durable(step, rank, info); err != nil {
			t.Fatal(err)
		}
	}
	m, err := c.Manifest(step, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := ckpt.WriteManifestAndLatest(ctx, b, m); err != nil {
		t.Fatal(err)
	}
}

func rankTensors(rank int, step int64) []ckpt.Tensor {
	v := float32(10*step) + float32(rank)
	return []ckpt.Tensor{
		{Name: "w", DType: "F32", Shape: []int64{2, 2}, Data: f32s(v, v+0.5, -v, 0)},
		{Name: "n", DType: "I64", Shape: []int64{3}, Data: i64s(int64(rank), step, -1)},
	}
}

// TestGoCheckpointLoadedByPython commits checkpoints with internal/ckpt, as
// the agent and master do, and loads them in Python without the agent:
// sharded, each rank gets its own file; replicated, a rank without a file
// gets rank 0's. The files carry no extras document (other tools write
// plain safetensors), so the state is a flat dict of tensors.
func TestGoCheckpointLoadedByPython(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		mode       ckpt.Mode
		files      []int // ranks with a file
		meta       bool
		rank       int // the Python process's RANK
		wantSource int // whose file it loads
	}{
		{"sharded rank 0", ckpt.Sharded, []int{0, 1}, true, 0, 0},
		{"sharded rank 1", ckpt.Sharded, []int{0, 1}, true, 1, 1},
		{"sharded without metadata", ckpt.Sharded, []int{0, 1}, false, 1, 1},
		{"replicated rank 1 gets rank 0's", ckpt.Replicated, []int{0}, true, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			b, err := ckpt.OpenBucket(context.Background(), "file://"+dir)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			for _, step := range []int64{3, 7} {
				files := map[int][]ckpt.Tensor{}
				for _, r := range tc.files {
					files[r] = rankTensors(r, step)
				}
				goCheckpoint(t, b, step, 2, tc.mode, files, tc.meta)
			}
			script := `
import json, sys
sys.path.insert(0, ".")
from rover.checkpoint import Checkpointer
c = Checkpointer("file://" + sys.argv[1], mode=sys.argv[2])
latest = c.latest_step()
step, state = c.load()
print(json.dumps({"latest": latest, "step": step,
                  "tensors": {k: [str(v.dtype), list(v.shape), v.tolist()] for k, v in state.items()}}))
`
			out := runPython(t, script, []string{"RANK=" + strconv.Itoa(tc.rank), "WORLD_SIZE=2"}, dir, string(tc.mode))
			var got struct {
				Latest, Step int64
				Tensors      map[string][]any
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			v := float64(70 + tc.wantSource)
			want := map[string][]any{
				"w": {"torch.float32", []any{2.0, 2.0}, []any{[]any{v, v + 0.5}, []any{-v, 0.0}}},
				"n": {"torch.int64", []any{3.0}, []any{float64(tc.wantSource), 7.0, -1.0}},
			}
			if got.Latest != 7 || got.Step != 7 {
				t.Errorf("latest_step %d, load step %d; want 7", got.Latest, got.Step)
			}
			if diff := cmp.Diff(want, got.Tensors); diff != "" {
				t.Errorf("state (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDirectLoadSkipsCorruptSteps damages a checkpoint directory that
// Python wrote (steps 1, 2 and 3) in the ways storage and crashes do, and
// checks that Python loads the step Go's LoadLatest takes: the newest step
// the marker allows whose manifest and files validate; a damaged file is
// never loaded.
func TestDirectLoadSkipsCorruptSteps(t *testing.T) {
	t.Parallel()
	template := filepath.Join(t.TempDir(), "template")
	runPython(t, `
import sys, torch
sys.path.insert(0, ".")
from rover.checkpoint import Checkpointer
c = Checkpointer(sys.argv[1], keep=0)
for step in (1, 2, 3):
    c.save(step, {"x": torch.full((1000,), float(step)), "step": step}, persist=True)
`, nil, template)

	file := func(step int64) string { return ckpt.RankPath(step, 0) }
	flip := func(name string, at func(size int64) int64) func(string) error {
		return func(dir string) error {
			p := filepath.Join(dir, name)
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			data[at(int64(len(data)))] ^= 0x10
			return os.WriteFile(p, data, 0o600)
		}
	}
	inData := func(size int64) int64 { return size - 100 }
	inHeader := func(int64) int64 { return 20 }
	write := func(name, content string) func(string) error {
		return func(dir string) error { return os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600) }
	}
	remove := func(name string) func(string) error {
		return func(dir string) error { return os.Remove(filepath.Join(dir, name)) }
	}
	truncate := func(name string) func(string) error {
		return func(dir string) error { return os.Truncate(filepath.Join(dir, name), 1000) }
	}
	cases := []struct {
		name   string
		damage []func(dir string) error
		want   int64 // 0: nothing to load
	}{
		{"intact", nil, 3},
		{"byte flipped in the tensors of step 3", []func(string) error{flip(file(3), inData)}, 2},
		{"byte flipped in the header of step 3", []func(string) error{flip(file(3), inHeader)}, 2},
		{"step 3 truncated", []func(string) error{truncate(file(3))}, 2},
		{"step 3 file missing", []func(string) error{remove(file(3))}, 2},
		{"step 3 manifest missing", []func(string) error{remove(ckpt.ManifestPath(3))}, 2},
		{"step 3 manifest garbage", []func(string) error{write(ckpt.ManifestPath(3), "{\"schema\": 1,")}, 2},
		{"step 3 manifest with an unknown field", []func(string) error{func(dir string) error {
			p := filepath.Join(dir, ckpt.ManifestPath(3))
			raw, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(p, []byte(strings.Replace(string(raw), "{", `{"extra": 1,`, 1)), 0o600)
		}}, 2},
		{"steps 3 and 2 damaged", []func(string) error{flip(file(3), inData), flip(file(2), inData)}, 1},
		{"every step damaged", []func(string) error{flip(file(3), inData), flip(file(2), inData), truncate(file(1))}, 0},
		{"marker torn", []func(string) error{write(ckpt.LatestKey, "3")}, 3},
		{"marker names step 2: step 3 is a commit in progress", []func(string) error{write(ckpt.LatestKey, "2\n")}, 2},
		{"no marker", []func(string) error{remove(ckpt.LatestKey)}, 0},
	}
	var dirs []string
	for i, tc := range cases {
		dir := filepath.Join(t.TempDir(), fmt.Sprint(i))
		if err := os.CopyFS(dir, os.DirFS(template)); err != nil {
			t.Fatal(err)
		}
		for _, d := range tc.damage {
			if err := d(dir); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		dirs = append(dirs, dir)
	}
	script := `
import json, sys, warnings
sys.path.insert(0, ".")
warnings.simplefilter("ignore")
from rover.checkpoint import Checkpointer
out = []
for d in sys.argv[1:]:
    got = Checkpointer(d).load()
    if got is None:
        out.append(0)
        continue
    step, state = got
    assert state["step"] == step and state["x"].eq(float(step)).all(), (d, step, state)
    out.append(step)
print(json.dumps(out))
`
	var got []int64
	if err := json.Unmarshal(runPython(t, script, nil, dirs...), &got); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, tc := range cases {
		b, err := ckpt.OpenBucket(ctx, dirs[i])
		if err != nil {
			t.Fatal(err)
		}
		var goStep int64
		m, err := ckpt.LoadLatest(ctx, b)
		switch {
		case err == nil:
			goStep = m.Step
		case !errors.Is(err, ckpt.ErrNoCheckpoint):
			t.Errorf("%s: Go: %v", tc.name, err)
		}
		b.Close()
		if got[i] != tc.want || goStep != tc.want {
			t.Errorf("%s: Python loads step %d, Go step %d; want %d", tc.name, got[i], goStep, tc.want)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestDirectDistributed runs two ranks in a gloo process group without the
// agent. Each saves three steps with keep=2; rank 0 commits each step once
// both files are durable (sharded) or its own is (replicated). Go reads
// both ranks of the latest step, and each rank loads its own state back.
func TestDirectDistributed(t *testing.T) {
	t.Parallel()
	script := `
import sys, torch, torch.distributed as dist
sys.path.insert(0, ".")
from rover.checkpoint import Checkpointer
dist.init_process_group("gloo")
r, mode = dist.get_rank(), sys.argv[2]
c = Checkpointer(sys.argv[1], keep=2, mode=mode)
for step in (1, 2, 3):
    c.save(step, {"x": torch.full((4,), float(10 * step + r)), "rank": r}, persist=True)
assert c.wait() == 3, c.wait()
c2 = Checkpointer(sys.argv[1], mode=mode)  # a fresh process: nothing in memory
assert c2.latest_step() == 3, c2.latest_step()
step, state = c2.load()
src = r if mode == "sharded" else 0
assert step == 3 and state["rank"] == src and state["x"].tolist() == [30.0 + src] * 4, (step, state)
dist.destroy_process_group()
`
	for _, tc := range []struct {
		mode      ckpt.Mode
		wantRanks []int // ranks with a file in the manifest
	}{
		{ckpt.Sharded, []int{0, 1}},
		{ckpt.Replicated, []int{0}},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			port := freePort(t)
			var cmds []*exec.Cmd
			var outs []*strings.Builder
			for rank := range 2 {
				env := []string{"MASTER_ADDR=127.0.0.1", fmt.Sprintf("MASTER_PORT=%d", port),
					fmt.Sprintf("RANK=%d", rank), "WORLD_SIZE=2", fmt.Sprintf("LOCAL_RANK=%d", rank)}
				cmd := pythonCmd(ctx, t, script, env, dir, string(tc.mode))
				out := &strings.Builder{}
				cmd.Stdout, cmd.Stderr = out, out
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				cmds, outs = append(cmds, cmd), append(outs, out)
			}
			for rank, cmd := range cmds {
				if err := cmd.Wait(); err != nil {
					t.Errorf("rank %d: %v\n%s", rank, err, outs[rank])
				}
			}
			if t.Failed() {
				return
			}
			b, err := ckpt.OpenBucket(ctx, dir)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			m, err := ckpt.LoadLatest(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			var ranks []int
			for _, f := range m.Files {
				ranks = append(ranks, f.Rank)
			}
			if m.Step != 3 || m.WorldSize != 2 || m.Mode != tc.mode || !slices.Equal(ranks, tc.wantRanks) {
				t.Fatalf("manifest: step %d, world size %d, mode %s, files of ranks %v", m.Step, m.WorldSize, m.Mode, ranks)
			}
			for rank := range 2 {
				tensors, meta, err := ckpt.LoadRank(ctx, b, m, rank)
				if err != nil {
					t.Fatal(err)
				}
				src := rank
				if tc.mode == ckpt.Replicated {
					src = 0
				}
				v := float32(30 + src)
				want := map[string]ckpt.Tensor{"state.x": {Name: "state.x", DType: "F32", Shape: []int64{4}, Data: f32s(v, v, v, v)}}
				if diff := cmp.Diff(want, byName(tensors)); diff != "" {
					t.Errorf("rank %d (-want +got):\n%s", rank, diff)
				}
				if meta[ckpt.MetaRank] != strconv.Itoa(src) || meta[ckpt.MetaWorldSize] != "2" {
					t.Errorf("rank %d: metadata %v", rank, meta)
				}
			}
			steps, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range steps {
				names = append(names, e.Name())
			}
			if diff := cmp.Diff([]string{"latest", "step-000000000002", "step-000000000003"}, names); diff != "" {
				t.Errorf("with keep=2 (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDirectSnapshotInMemory checks what a save without persist keeps in
// process memory: a copy (in-place updates after the save do not reach it),
// preferred to storage when newer, gone with the process; and the URLs
// that need the agent.
func TestDirectSnapshotInMemory(t *testing.T) {
	t.Parallel()
	script := `
import sys, torch
sys.path.insert(0, ".")
from rover.checkpoint import Checkpointer

w = torch.zeros(3)
c = Checkpointer()  # memory only
assert c.load() is None and c.latest_step() is None and c.wait() is None
c.save(1, {"w": w, "tag": "one"})
w.add_(5)  # training goes on in place
step, state = c.load()
assert step == 1 and state["w"].tolist() == [0, 0, 0] and state["tag"] == "one", state
into = {"w": torch.full((3,), 9.0), "tag": None}
target = into["w"]
step, state = c.load(into=into)
assert state["w"].data_ptr() == target.data_ptr() and target.tolist() == [0, 0, 0], state
try:
    c.save(2, {"w": w}, persist=True)
    raise AssertionError("persist without a directory")
except ValueError:
    pass

d = sys.argv[1]
c = Checkpointer(d)
c.save(1, {"w": w}, persist=True)
w.add_(1)
c.save(2, {"w": w})  # newer, in memory only
assert c.latest_step() == 2 and c.wait() == 1, (c.latest_step(), c.wait())
assert c.load()[1]["w"].tolist() == [6, 6, 6]
fresh = Checkpointer(d)  # another process: only storage
assert fresh.latest_step() == 1 and fresh.load()[1]["w"].tolist() == [5, 5, 5]

for url in ("s3://bucket/run1", "gs://bucket/run1", "mem://", "file://otherhost/run1"):
    try:
        Checkpointer(url)
        raise AssertionError(url + " accepted")
    except ValueError as e:
        assert ("rover run" in str(e)) == ("bucket" in url or url == "mem://"), e
print("ok")
`
	if out := runPython(t, script, nil, t.TempDir()); string(out) != "ok\n" {
		t.Errorf("python: %s", out)
	}
}
