#!/usr/bin/env bash
# make demo: a real elastic DDP job on two local nodes of two workers each.
# A worker crashes part way; the master stops every worker on both nodes,
# restarts them in a new round, and the script resumes from its checkpoint.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROVER=${ROVER:-bin/rover}
PYTHON_EXEC=${PYTHON_EXEC:-$(scripts/find-python --install)}
export PYTHON_EXEC PYTHONUNBUFFERED=1

work=$(mktemp -d -t rover-demo-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "starting the job master (rover master)"
"$ROVER" master --listen 127.0.0.1:0 --job demo --addr-file "$work/addr" --token-file "$work/token" 2>&1 | sed 's/^/[master] /' &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/addr" ] && break; sleep 0.1; done
addr=$(cat "$work/addr")

say "starting two node agents (rover run), two workers each; global rank 3 crashes at step 40"
common=(--nnodes 2 --nproc-per-node 2 --rdzv-endpoint "$addr" --token-file "$work/token" --rdzv-id demo
        --max-restarts 3 --rdzv-conf last_call_timeout=2s
        examples/ddp/train.py --steps 120 --ckpt-every 10 --ckpt "$work/ckpt.pt" --step-sleep 0.05
        --crash-at-step 40 --crash-rank 3 --crash-marker "$work/crashed" --out "$work/final.json")
"$ROVER" run --node-id node-a "${common[@]}" 2>&1 | sed 's/^/[node-a] /' &
a=$!; pids+=($a)
"$ROVER" run --node-id node-b "${common[@]}" 2>&1 | sed 's/^/[node-b] /' &
b=$!; pids+=($b)

status=0
wait "$a" || status=$?
wait "$b" || status=$?
if [ "$status" -ne 0 ]; then
  say "the job failed (exit $status)"
  exit "$status"
fi
say "the job finished after recovering from the crash"
"$PYTHON_EXEC" - "$work/final.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"final step {r['step']}, world size {r['world_size']}, restarts {r['restart_count']}")
PY
