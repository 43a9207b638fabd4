package agent_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPythonPackageReachesTheAgent runs a Python worker that imports the
// embedded rover package (nothing installed) and asks the agent over the
// local unix socket where it is.
func TestPythonPackageReachesTheAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	script := filepath.Join(dir, "info.py")
	err := os.WriteFile(script, []byte(`import json, os, stat, sys
import rover
info = rover.agent_info()
mode = stat.S_IMODE(os.stat(os.environ["ROVER_AGENT_SOCKET"]).st_mode)
info["socketMode"] = oct(mode)
with open(os.path.join(sys.argv[1], "info-%s.json" % os.environ["RANK"]), "w") as f:
    json.dump(info, f)
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	r := runAgent(ctx, t, "--standalone", "--nproc-per-node", "2", "--rdzv-id", "py", script, dir)
	if r.err != nil {
		t.Fatalf("agent: %v\n%s", r.err, r.stderr)
	}
	for _, rank := range []string{"0", "1"} {
		b, err := os.ReadFile(filepath.Join(dir, "info-"+rank+".json"))
		if err != nil {
			t.Fatalf("rank %s wrote no info: %v\n%s", rank, err, r.stderr)
		}
		var info map[string]any
		if err := json.Unmarshal(b, &info); err != nil {
			t.Fatal(err)
		}
		if info["runId"] != "py" || info["worldSize"] != float64(2) || info["localWorldSize"] != float64(2) || info["round"] != "1" {
			t.Errorf("rank %s: info %v", rank, info)
		}
		if info["socketMode"] != "0o600" {
			t.Errorf("agent socket mode %v, want 0o600", info["socketMode"])
		}
	}
}

// TestPythonShardClient runs two Python workers that lease shards of one
// dataset through their agent: together they train every sample once.
func TestPythonShardClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	script := filepath.Join(dir, "leased.py")
	err := os.WriteFile(script, []byte(`import json, os, sys
from rover.data import ShardClient, ElasticSampler
client = ShardClient("items", size=1000, shard_size=7, epochs=2, shuffle=True, seed=3)
got = []
for shard in client:
    got.append([shard.epoch, shard.indices()])
    assert client.complete(shard)
sampler = ElasticSampler("sync", size=64, batch_size=4)
first = list(iter(sampler))
with open(os.path.join(sys.argv[1], "out-%s.json" % os.environ["RANK"]), "w") as f:
    json.dump({"shards": got, "sync": first}, f)
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	r := runAgent(ctx, t, "--standalone", "--nproc-per-node", "2", script, dir)
	if r.err != nil {
		t.Fatalf("agent: %v\n%s", r.err, r.stderr)
	}
	count := map[[2]int64]int{}
	var syncIdx []int64
	for _, rank := range []string{"0", "1"} {
		b, err := os.ReadFile(filepath.Join(dir, "out-"+rank+".json"))
		if err != nil {
			t.Fatalf("rank %s: %v\n%s", rank, err, r.stderr)
		}
		var out struct {
			Shards [][2]json.RawMessage `json:"shards"`
			Sync   []int64              `json:"sync"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		for _, s := range out.Shards {
			var epoch int64
			var idx []int64
			json.Unmarshal(s[0], &epoch)
			json.Unmarshal(s[1], &idx)
			for _, i := range idx {
				count[[2]int64{epoch, i}]++
			}
		}
		syncIdx = append(syncIdx, out.Sync...)
	}
	for e := int64(0); e < 2; e++ {
		for i := int64(0); i < 1000; i++ {
			if c := count[[2]int64{e, i}]; c != 1 {
				t.Fatalf("epoch %d sample %d trained %d times, want once", e, i, c)
			}
		}
	}
	seen := map[int64]bool{}
	for _, i := range syncIdx {
		if seen[i] {
			t.Fatalf("sync sample %d trained twice", i)
		}
		seen[i] = true
	}
	if len(seen) != 64 {
		t.Errorf("sync epoch trained %d samples, want 64", len(seen))
	}
}

// TestGoSDKLeasedWorkers runs three Go workers that lease shards through the
// Go SDK, one of them slow: every sample is trained once, and the slow
// worker takes fewer shards instead of holding the others back.
func TestGoSDKLeasedWorkers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	r := runAgent(ctx, t, "--standalone", "--nproc-per-node", "3", "--no-python", sdkWorker,
		"--size", "600", "--shard-size", "10", "--per-shard", "5ms", "--slow-rank", "2", "--slow-per-shard", "50ms", "--out", dir)
	if r.err != nil {
		t.Fatalf("agent: %v\n%s", r.err, r.stderr)
	}
	count := map[int64]int{}
	perRank := map[string]int{}
	for _, rank := range []string{"0", "1", "2"} {
		b, err := os.ReadFile(filepath.Join(dir, "out-"+rank+".json"))
		if err != nil {
			t.Fatalf("rank %s: %v\n%s", rank, err, r.stderr)
		}
		var out struct {
			Shards []struct {
				Indices []int64 `json:"indices"`
			} `json:"shards"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		perRank[rank] = len(out.Shards)
		for _, s := range out.Shards {
			for _, i := range s.Indices {
				count[i]++
			}
		}
	}
	for i := int64(0); i < 600; i++ {
		if count[i] != 1 {
			t.Fatalf("sample %d trained %d times, want once", i, count[i])
		}
	}
	if perRank["2"] >= perRank["0"] || perRank["2"] >= perRank["1"] {
		t.Errorf("shards per rank %v: the slow rank 2 should take fewer than each fast one", perRank)
	}
}

// TestKilledWorkerLosesNoShard crashes a Go worker while it holds a lease:
// the workers restart, the shard goes back to the queue, and every sample is
// completed exactly once over both attempts.
func TestKilledWorkerLosesNoShard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	r := runAgent(ctx, t, "--standalone", "--nproc-per-node", "2", "--max-restarts", "1", "--no-python", sdkWorker,
		"--size", "400", "--shard-size", "10", "--per-shard", "5ms", "--out", dir,
		"--crash-after-shards", "5", "--crash-marker", filepath.Join(dir, "crashed"))
	if r.err != nil {
		t.Fatalf("agent: %v\n%s", r.err, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "crashed")); err != nil {
		t.Fatal("no worker crashed")
	}
	b, err := os.ReadFile(filepath.Join(dir, "done.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	count := map[int64]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var s struct {
			Indices []int64 `json:"indices"`
		}
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("bad line %q: %v", line, err)
		}
		for _, i := range s.Indices {
			count[i]++
		}
	}
	for i := int64(0); i < 400; i++ {
		if count[i] != 1 {
			t.Fatalf("sample %d completed %d times, want once", i, count[i])
		}
	}
}

// TestShardClientStateRoundTrip saves a leased dataset's shard state after
// three shards, finishes the dataset, restores the state, and gets exactly
// the shards that were not done at the save back.
func TestShardClientStateRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	script := filepath.Join(dir, "state.py")
	err := os.WriteFile(script, []byte(`import json, os, sys
from rover.data import ShardClient
client = ShardClient("st", size=100, shard_size=10, prefetch=1)
it = iter(client)
first = []
for _ in range(3):
    s = next(it)
    first += s.indices()
    client.complete(s)
saved = client.state_dict()
rest = []
for s in it:
    rest += s.indices()
    client.complete(s)
client.load_state_dict(saved)
again = []
for s in client:
    again += s.indices()
    client.complete(s)
json.dump({"first": first, "rest": rest, "again": again}, open(os.path.join(sys.argv[1], "out.json"), "w"))
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	r := runAgent(ctx, t, "--standalone", script, dir)
	if r.err != nil {
		t.Fatalf("agent: %v\n%s", r.err, r.stderr)
	}
	b, err := os.ReadFile(filepath.Join(dir, "out.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out struct{ First, Rest, Again []int64 }
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.First) != 30 || len(out.Rest) != 70 {
		t.Fatalf("trained %d then %d samples, want 30 then 70", len(out.First), len(out.Rest))
	}
	seen := map[int64]bool{}
	for _, i := range out.Again {
		seen[i] = true
	}
	for _, i := range out.First {
		if seen[i] {
			t.Errorf("sample %d was done at the save but handed out again after the restore", i)
		}
	}
	if len(out.Again) != 70 || len(seen) != 70 {
		t.Errorf("after the restore %d samples (%d distinct) were handed out, want the 70 not done at the save", len(out.Again), len(seen))
	}
}
