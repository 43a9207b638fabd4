package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
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

// leasedRun is what the sdkworker processes of one agent run trained.
type leasedRun struct {
	count   map[int64]int  // times each sample was trained
	perRank map[string]int // shards each rank trained
	// span is from the first worker's first lease to the last completion.
	span time.Duration
}

// leasedArgs is the command line of a standalone agent that runs the
// sdkworker on nproc workers, writing to dir.
func leasedArgs(dir string, nproc int, args ...string) []string {
	return append([]string{"--standalone", "--nproc-per-node", fmt.Sprint(nproc), "--no-python", sdkWorker, "--out", dir}, args...)
}

// readLeased reads what the nproc workers of r wrote to dir.
func readLeased(t *testing.T, dir string, nproc int, r agentRun) leasedRun {
	t.Helper()
	if r.err != nil {
		t.Fatalf("agent: %v\n%s", r.err, r.stderr)
	}
	run := leasedRun{count: map[int64]int{}, perRank: map[string]int{}}
	var first, last int64
	for rank := range nproc {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("out-%d.json", rank)))
		if err != nil {
			t.Fatalf("rank %d: %v\n%s", rank, err, r.stderr)
		}
		var out struct {
			Shards []struct {
				Indices []int64 `json:"indices"`
			} `json:"shards"`
			Start int64 `json:"start_unix_nano"`
			Last  int64 `json:"last_complete_unix_nano"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		run.perRank[fmt.Sprint(rank)] = len(out.Shards)
		for _, s := range out.Shards {
			for _, i := range s.Indices {
				run.count[i]++
			}
		}
		if first == 0 || out.Start < first {
			first = out.Start
		}
		last = max(last, out.Last)
	}
	run.span = time.Duration(last - first)
	return run
}

// TestGoSDKLeasedWorkers runs three Go workers that lease shards through the
// Go SDK, one of them twenty times slower than the others: every sample is
// trained once, the slow worker takes fewer shards, and the job takes about
// as long as the two fast workers alone take for the same data, not the
// time the slow worker would need for a third of it.
func TestGoSDKLeasedWorkers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const (
		size, shardSize = 600, 10
		shards          = size / shardSize
		fast, slow      = 30 * time.Millisecond, 600 * time.Millisecond
	)
	data := []string{"--size", fmt.Sprint(size), "--shard-size", fmt.Sprint(shardSize), "--per-shard", fast.String()}
	// The two jobs run at the same time, so that both see the same load.
	fastDir, mixedDir := t.TempDir(), t.TempDir()
	runs := runAgents(ctx, t,
		leasedArgs(fastDir, 2, data...),
		leasedArgs(mixedDir, 3, append(data, "--slow-rank", "2", "--slow-per-shard", slow.String())...))
	fastOnly, mixed := readLeased(t, fastDir, 2, runs[0]), readLeased(t, mixedDir, 3, runs[1])
	for i := int64(0); i < size; i++ {
		if mixed.count[i] != 1 || fastOnly.count[i] != 1 {
			t.Fatalf("sample %d trained %d times with the slow worker, %d without; want once", i, mixed.count[i], fastOnly.count[i])
		}
	}
	if mixed.perRank["2"] >= mixed.perRank["0"] || mixed.perRank["2"] >= mixed.perRank["1"] {
		t.Errorf("shards per rank %v: the slow rank 2 should take fewer than each fast one", mixed.perRank)
	}
	// With leases, the slow worker costs the job at most the one shard it may
	// still hold when the fast ones have done the rest. A static split would
	// give it a third of the shards, and the job would last at least as long
	// as it sleeps on those: 20 x 600ms = 12s, against 30 x 30ms = 0.9s (plus
	// the calls, a few ms each, more on a loaded machine) for the fast
	// workers alone. The margin, half the fast run and at least 300ms, is
	// wide enough for a loaded machine, and the bound stays far below a
	// static split.
	static := time.Duration((shards+2)/3) * slow
	limit := fastOnly.span + slow + max(fastOnly.span/2, 300*time.Millisecond)
	t.Logf("job time: fast workers alone %v, with the slow one %v (shards per rank %v), bound %v; a static split would take at least %v",
		fastOnly.span, mixed.span, mixed.perRank, limit, static)
	if mixed.span > limit {
		t.Errorf("with the slow worker the job took %v, more than the %v of the fast workers alone plus one slow shard (%v) and a margin", mixed.span, fastOnly.span, slow)
	}
	if mixed.span > static/2 {
		t.Errorf("with the slow worker the job took %v, not well below the %v of a static split", mixed.span, static)
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
