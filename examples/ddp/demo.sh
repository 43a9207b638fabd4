#!/usr/bin/env bash
# make demo: the whole system on one machine. `rover submit` runs a DDP job
# of two nodes of two workers with flash checkpoints; its embedded master
# starts each node's agent. A worker crashes at step 60: every worker
# restarts in place and resumes from the checkpoint in memory. At step 120
# one node's agent is SIGKILLed, as if its machine died: the master
# relaunches the node with the same rank, the job resumes and finishes, and
# rover submit ends with a summary.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROVER=${ROVER:-bin/rover}
PYTHON_EXEC=${PYTHON_EXEC:-$(scripts/find-python --install)}
export PYTHON_EXEC PYTHONUNBUFFERED=1

work=$(mktemp -d -t rover-demo-XXXXXX)
sub=
cleanup() {
  if [ -n "$sub" ] && kill -0 "$sub" 2>/dev/null; then
    kill -INT "$sub" 2>/dev/null || true # rover submit stops every node
    wait "$sub" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*" >&2; }

# agent_pid NODE_ID prints the pid of that node's agent (`rover run`).
agent_pid() {
  local p
  for p in $(pgrep -f "rover run" || true); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "ROVER_NODE_ID=$1"; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

# latest_step prints the newest committed checkpoint step (0 before any).
latest_step() { cat "$work/ckpt/latest" 2>/dev/null || echo 0; }

say "rover submit: 2 nodes x 2 workers, flash checkpoints every step, persisted every 20 steps"
say "global rank 3 crashes at step 60; node demo-worker-1-0 dies at step 120"
"$ROVER" submit --quiet --job-dir "$work/job" \
  --rdzv-id demo --nnodes 2 --nproc-per-node 2 --max-restarts 3 --rdzv-conf last_call_timeout=2s \
  --checkpoint-dir "$work/ckpt" \
  examples/ddp/train.py --steps 200 --flash --ckpt-every 20 --step-sleep 0.05 \
  --crash-at-step 60 --crash-rank 3 --crash-marker "$work/crashed" \
  --log-world "$work/world.log" --out "$work/final.json" &
sub=$!

while [ "$(latest_step)" -lt 120 ]; do
  kill -0 "$sub" 2>/dev/null || break
  sleep 0.2
done
if pid=$(agent_pid demo-worker-1-0); then
  say "killing the agent of node demo-worker-1-0 (pid $pid) with SIGKILL, at step $(latest_step)"
  kill -9 "$pid"
fi

status=0
wait "$sub" || status=$?
sub=
if [ "$status" -ne 0 ]; then
  say "the job failed (exit $status)"
  exit "$status"
fi

say "how each worker started (source: where it resumed from)"
sort -t= -k2,2n "$work/world.log" | sed 's/^/  /' >&2
"$PYTHON_EXEC" - "$work/final.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"\nfinal step {r['step']}, world size {r['world_size']}", file=sys.stderr)
PY
