"""dump.py FILE END: writes what a worker sees of its start to FILE (JSON),
then ends as END says: "ok", "exit:N", "raise", "interrupt", "record" (an
exception under torch's @record) or "kill" (SIGKILL to itself)."""

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
with open(sys.argv[1], "w") as f:
    json.dump(state, f, indent=1, sort_keys=True)
print("dumped", flush=True)


@record
def fail():
    raise ValueError("boom under record")


end = sys.argv[2]
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
