package python

import "testing"

// TestDdpCheckpointerDLRoverSignature: DdpCheckpointer takes DLRover's
// arguments in DLRover's order (checkpoint_dir, local_shard_num,
// global_shard_num, comm_backend, deletion_strategy, save_timeout,
// replica_count), so DLRover's examples' `DdpCheckpointer(dir,
// replica_count=1)` and `DdpCheckpointer(dir, 2)` construct (the second in
// sharded mode); KeepLatestStepStrategy(n) keeps n committed steps and
// other strategies are refused; bad numbers are refused naming the
// argument.
func TestDdpCheckpointerDLRoverSignature(t *testing.T) {
	script := `
import os, sys
sys.path.insert(0, ".")
import torch
from dlrover.trainer.torch.flash_checkpoint.ddp import DdpCheckpointer, StorageType
from dlrover.python.common.storage import KeepLatestStepStrategy, KeepStepIntervalStrategy
d = sys.argv[1]

assert DdpCheckpointer(d, replica_count=1).replica_count == 1
assert DdpCheckpointer(d)._ckpt.mode == "replicated"
assert DdpCheckpointer(d, 2)._ckpt.mode == "sharded"      # local_shard_num=2
assert DdpCheckpointer(d, 1, 4)._ckpt.mode == "sharded"   # global_shard_num=4
c = DdpCheckpointer(d, 1, 1, "gloo", None, 600, 1)
assert c.replica_count == 1 and c._ckpt.mode == "replicated"

def refused(fn, *words):
    try:
        fn()
    except ValueError as e:
        for w in words:
            assert w in str(e), (w, str(e))
        return
    raise SystemExit("not refused: " + " ".join(words))
refused(lambda: DdpCheckpointer(d, replica_count=-1), "replica_count=-1", "0 or more")
refused(lambda: DdpCheckpointer(d, 0), "local_shard_num=0", "1 or more")
refused(lambda: DdpCheckpointer(d, global_shard_num="x"), "global_shard_num='x'")
refused(lambda: DdpCheckpointer(d, save_timeout=0), "save_timeout=0")
refused(lambda: DdpCheckpointer(d, deletion_strategy=KeepStepIntervalStrategy(100, d)),
        "KeepStepIntervalStrategy", "--checkpoint-keep", "leave deletion_strategy out")

# KeepLatestStepStrategy(2): the two newest committed steps stay.
keep = os.path.join(d, "keep")
c = DdpCheckpointer(keep, deletion_strategy=KeepLatestStepStrategy(2, keep))
for step in (10, 20, 30):
    c.save_checkpoint(step, {"step": step}, storage_type=StorageType.DISK)
assert sorted(n for n in os.listdir(keep) if n.startswith("step-")) == ["step-000000000020", "step-000000000030"], os.listdir(keep)
print("ok")
`
	if out := runPython(t, script, nil, t.TempDir()); string(out) != "ok\n" {
		t.Fatalf("python: %s", out)
	}
}

// TestLoadedStateKnowsItsStep: a state saved without "step" (DLRover's
// fcp_demo saves {"model", "optimizer"} to memory) loads answering
// state.get("step", 0), state["step"] and "step" in state with the step it
// was saved as, so a script that resumes with state.get("step", 0) goes on
// from there rather than from 0, while its keys stay the ones saved: a
// model's own state dict, saved whole, loads back into the model
// strictly. A "step" of the state's own wins.
func TestLoadedStateKnowsItsStep(t *testing.T) {
	script := `
import os, sys
sys.path.insert(0, ".")
import torch
from dlrover.trainer.torch.flash_checkpoint.ddp import DdpCheckpointer, StorageType
d = sys.argv[1]
m = torch.nn.Linear(3, 2)
c = DdpCheckpointer(d)
c.save_checkpoint(50, {"model": m.state_dict()}, storage_type=StorageType.MEMORY)
got = c.load_checkpoint()
assert got.get("step", 0) == 50 and got["step"] == 50 and "step" in got and list(got) == ["model"], got
c.save_checkpoint(60, m.state_dict(), storage_type=StorageType.DISK)
got = DdpCheckpointer(d).load_checkpoint()     # from storage, in a new checkpointer
assert got.get("step", 0) == 60 and sorted(got) == ["bias", "weight"]
torch.nn.Linear(3, 2).load_state_dict(got)     # strict: no stray "step" key
c.save_checkpoint(70, {"step": 3}, storage_type=StorageType.MEMORY)
assert c.load_checkpoint()["step"] == 3        # the state's own step wins
assert DdpCheckpointer(os.path.join(d, "empty")).load_checkpoint().get("step", 0) == 0
print("ok")
`
	if out := runPython(t, script, nil, t.TempDir()); string(out) != "ok\n" {
		t.Fatalf("python: %s", out)
	}
}
