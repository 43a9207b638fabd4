"""dump.py FILE END: writes what a worker sees of its start to FILE (JSON;
{rank} and {restart} in it are replaced by $RANK and
$TORCHELASTIC_RESTART_COUNT), then ends as END says: "ok", "exit:N",
"raise", "interrupt", "record" (an exception under torch's @record), "kill"
(SIGKILL to itself), or, under rover run, "first:END2" (END2 on rank 0 of
restart 0 once a file "go" exists beside FILE, the others waiting to be stopped;
"ok" on later restarts), or "every:END2" (the same on every restart). Used by internal/agent's and test/e2e's standby
tests."""

import json
import os
import signal
import sys
import threading

import torch  # a training script's first import

from torch.distributed.elastic.multiprocessing.errors import record


def fds():
    out = {}
    for fd in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own descriptor
        out[fd] = target.split(":")[0] if ":[" in target else target
    return out


main = sys.modules["__main__"]
state = {
    "environ": dict(os.environ),
    "argv": sys.argv,
    "orig_argv": sys.orig_argv,
    # What ps and pgrep read; a standby's may end in more NULs.
    "cmdline": open("/proc/self/cmdline", "rb").read().rstrip(b"\0").decode(errors="replace").split("\0"),
    "path": sys.path,
    "name": __name__,
    "file": __file__,
    "doc": repr(__doc__)[:20],
    "cached": repr(globals().get("__cached__")),
    "spec": repr(__spec__),
    "loader": type(__loader__).__name__ + ":" + getattr(__loader__, "path", ""),
    "main_keys": sorted(vars(main)),
    "cwd": os.getcwd(),
    "modules": sorted(sys.modules),
    "signals": {s.name: repr(signal.getsignal(s)) for s in signal.valid_signals() if isinstance(s, signal.Signals)},
    "stdio": [[os.isatty(fd), oct(os.fstat(fd).st_mode >> 12)] for fd in (0, 1, 2)],
    "stdout": [sys.stdout.line_buffering, sys.stdout.write_through, sys.stdout.encoding, sys.stdout.errors],
    "stderr": [sys.stderr.line_buffering, sys.stderr.write_through, sys.stderr.encoding, sys.stderr.errors],
    "flags": repr(sys.flags),
    "excepthook": sys.excepthook is sys.__excepthook__,
    "threads": threading.active_count(),
    "tasks": len(os.listdir("/proc/self/task")),
    "nice": os.getpriority(os.PRIO_PROCESS, 0),
    "pgid": os.getpgid(0) == os.getpid(),
    "fds": fds(),
}
out = sys.argv[1].format(rank=os.environ.get("RANK"), restart=os.environ.get("TORCHELASTIC_RESTART_COUNT"))
state["environ_order"] = list(os.environ)
with open(out + ".tmp", "w") as f:
    json.dump(state, f, indent=1, sort_keys=True)
os.rename(out + ".tmp", out)
print("dumped", flush=True)


@record
def fail():
    raise ValueError("boom under record")


end = sys.argv[2]
if end.startswith(("first:", "every:")):
    if end.startswith("first:") and os.environ["TORCHELASTIC_RESTART_COUNT"] != "0":
        sys.exit(0)
    if os.environ["RANK"] != "0":
        signal.pause()  # until the agent stops this worker
    import time

    while not os.path.exists(os.path.join(os.path.dirname(sys.argv[1]), "go")):
        time.sleep(0.01)
    end = end[len("first:") :]  # as long as "every:"
if end.startswith("exit:"):
    sys.exit(int(end[5:]))
if end == "raise":
    raise RuntimeError("boom")
if end == "interrupt":
    raise KeyboardInterrupt
if end == "record":
    fail()
if end == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
