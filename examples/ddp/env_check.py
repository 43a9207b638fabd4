#!/usr/bin/env python3
"""Dump the launcher environment contract of this worker and exit 0.

Usage: env_check.py DIR

Writes DIR/env-<RANK>.json (atomically) with every torchrun variable that is
set in this process (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME,
MASTER_ADDR, MASTER_PORT, TORCHELASTIC_*), plus OMP_NUM_THREADS,
TORCH_NCCL_ASYNC_ERROR_HANDLING and ROVER_*. The JSON is a flat object of
variable name -> string value; a variable that is not set is absent. RANK
defaults to "unset" in the file name when it is missing.

Needs only the standard library (no torch), so it starts fast. Used by the
integration test that checks the env contract of `rover run`.
"""

import json
import os
import sys
import tempfile

NAMES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMP_NUM_THREADS",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
)
PREFIXES = ("TORCHELASTIC_", "ROVER_")


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out_dir = argv[1]
    env = {k: v for k, v in sorted(os.environ.items()) if k in NAMES or k.startswith(PREFIXES)}
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "env-%s.json" % os.environ.get("RANK", "unset"))
    fd, tmp = tempfile.mkstemp(prefix=".env-", suffix=".tmp", dir=out_dir)
    with os.fdopen(fd, "w") as f:
        json.dump(env, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
