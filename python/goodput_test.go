package python

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// goodputScript runs rover.checkpoint (real torch) against a fake agent that
// keeps one arena file, and prints the calls the goodput accounting needs:
// each commit's blocking time and node savers, and the restore reports of a
// load that finds nothing, one that restores from memory, and a second load
// of the same process (not reported again). The fake clock moves 5 ms while
// the agent opens the slot: the save blocked training that long.
const goodputScript = `
import json, os, sys
os.environ.update(ROVER_AGENT_SOCKET="/nonexistent", LOCAL_RANK="1", RANK="3", WORLD_SIZE="4", LOCAL_WORLD_SIZE="2")
import torch
import rover.checkpoint as rc
arena = os.path.join(sys.argv[1], "arena")
with open(arena, "wb") as f:
    f.truncate(1 << 20)
clock = [1000]
rc.time.monotonic_ns = lambda: clock[0]
calls, snaps = [], []
def call(method, req, timeout=None):
    if method == "CheckpointBegin":
        clock[0] += 5000000
        return {"path": arena, "offset": "0", "capacity": str(1 << 20)}
    if method == "CheckpointCommit":
        snaps[:] = [{"step": req["step"], "path": arena, "offset": "0", "length": req["length"]}]
        calls.append([method, {k: req[k] for k in ("step", "blockingNanos", "nodeSavers")}])
    elif method == "CheckpointSnapshots":
        return {"snapshots": snaps, "agreedStep": snaps[0]["step"] if snaps else None}
    elif method in ("ReportRestore", "ReportProgress"):
        if method == "ReportRestore":
            calls.append([method, req])
    return {}
rc._agent.call = call
rc.progress._agent.call = call
for mode in ("sharded", "replicated"):
    ck = rc.Checkpointer(mode=mode)
    ck.home = ck.local_rank  # this rank keeps the copy in both modes here
    if mode == "sharded":
        assert ck.load() is None
    ck.save(7, {"w": torch.arange(4.0)})
    if mode == "replicated":
        fresh = rc.Checkpointer(mode=mode)
        fresh.home = fresh.local_rank
        step, state = fresh.load()
        assert step == 7 and fresh.restored_from == "memory" and state["w"].tolist() == [0, 1, 2, 3], (step, state)
        assert fresh.load()[0] == 7
print(json.dumps(calls))
`

// TestGoodputReports checks what rover.checkpoint tells its agent for the
// master's goodput accounting: a save's blocking time (from save() to its
// commit) and the node's savers with each commit, and a process's first
// load reported when it begins and with what it found (nothing: step -1,
// source NONE; memory: the step).
func TestGoodputReports(t *testing.T) {
	dir := t.TempDir()
	pkg := t.TempDir()
	if _, err := Extract(pkg); err != nil {
		t.Fatal(err)
	}
	out := runPython(t, goodputScript, []string{"PYTHONPATH=" + pkg + string(os.PathListSeparator) + os.Getenv("PYTHONPATH")}, dir)
	var got []any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	restore := func(req map[string]any) []any { return []any{"ReportRestore", req} }
	commit := func(savers float64) []any {
		return []any{"CheckpointCommit", map[string]any{"step": "7", "blockingNanos": "5000000", "nodeSavers": savers}}
	}
	want := []any{
		restore(map[string]any{"localRank": 1.0}),
		restore(map[string]any{"localRank": 1.0, "finished": true, "step": "-1", "source": "CHECKPOINT_SOURCE_NONE"}),
		commit(2), // sharded: every local rank saves
		commit(1), // replicated: one copy a node
		restore(map[string]any{"localRank": 1.0}),
		restore(map[string]any{"localRank": 1.0, "finished": true, "step": "7", "source": "CHECKPOINT_SOURCE_MEMORY"}),
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("calls to the agent (-want +got):\n%s", d)
	}
}

// TestDdpCheckpointerReportsDLRoverRestore: under a (fake) agent, a
// DdpCheckpointer that finds no Rover step and loads DLRover's own files
// reports the restore as the step of those files, from storage, not as
// nothing loaded.
func TestDdpCheckpointerReportsDLRoverRestore(t *testing.T) {
	script := `
import json, os, sys
os.environ.update(ROVER_AGENT_SOCKET="/nonexistent", LOCAL_RANK="0", RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
import torch
from dlrover.trainer.torch.flash_checkpoint.ddp import DdpCheckpointer
d = sys.argv[1]
os.makedirs(os.path.join(d, "7"))
torch.save({"step": 7}, os.path.join(d, "7", "rank_0.pt"))
open(os.path.join(d, "dlrover_latest.txt"), "w").write("7")
import rover.checkpoint as rc
calls = []
def call(method, req, timeout=None):
    if method == "ReportRestore":
        calls.append(req)
    return {}
rc._agent.call = call
c = DdpCheckpointer(d)
assert c.load_checkpoint()["step"] == 7 and c.loaded_step == 7
print(json.dumps(calls))
`
	pkg := t.TempDir()
	if _, err := Extract(pkg); err != nil {
		t.Fatal(err)
	}
	out := runPython(t, script, []string{"PYTHONPATH=" + pkg}, t.TempDir())
	var got []map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := []map[string]any{{"localRank": 0.0}, {"localRank": 0.0, "finished": true, "step": "7", "source": "CHECKPOINT_SOURCE_STORAGE"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("restore reports (-want +got):\n%s", d)
	}
}
