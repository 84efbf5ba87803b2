#!/usr/bin/env bash
# Repeated: Ctrl-C (SIGINT to the launcher) of a 4-rank torch job on backend "ctrun" looping over
# barrier + all_reduce on shm, under ctrun and under torch 1.13's torchrun (which reaps its workers late, so an
# exited rank stays a zombie for a while). Prints per launcher: runs, worst and median seconds from the signal
# to the launcher's exit, and how many runs printed "lost sys.stderr" (an error surfacing at interpreter exit).
#   scripts/stress/ctrl_c_ctrun_backend.sh BUILD_DIR [RUNS=20]
set -u
build=${1:?usage: $0 BUILD_DIR [RUNS]}
runs=${2:-20}
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/loop.py" <<'PY'
import time, torch, torch.distributed as dist
import ctrun_torch
dist.init_process_group("ctrun")
t = torch.ones(4)
open(__import__("os").environ["READY_FILE"] + __import__("os").environ["RANK"], "w").close()
while True:
    dist.barrier()
    dist.all_reduce(t)
PY
export PYTHON_EXEC=/usr/bin/python3 PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" READY_FILE="$tmp/ready"
one() {  # launcher command...
  rm -f "$tmp"/ready*
  "$@" > "$tmp/out" 2>&1 &
  local pid=$! i
  for i in $(seq 600); do [ "$(ls "$tmp"/ready* 2>/dev/null | wc -l)" -ge 4 ] && break; sleep 0.1; done
  sleep 1
  local t0; t0=$(date +%s.%N)
  kill -INT "$pid"
  for i in $(seq 1200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  local t1; t1=$(date +%s.%N)
  kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  echo "$(echo "$t1 - $t0" | bc) $(grep -c 'lost sys.stderr' "$tmp/out")"
}
report() {  # name file
  sort -n "$2" | awk -v name="$1" '{t[NR]=$1; if ($2 > 0) lost++} END {printf "%-10s runs %d  median %.2f s  worst %.2f s  lost-stderr runs %d\n", name, NR, t[int((NR+1)/2)], t[NR], lost+0}'
}
for r in $(seq "$runs"); do
  one "$build/bin/ctrun" --standalone --nproc-per-node=4 "$tmp/loop.py" >> "$tmp/ctrun.txt"
  one /usr/bin/python3 "$here/../shared/interop/torchrun_py311.py" --standalone --nproc_per_node=4 "$tmp/loop.py" >> "$tmp/torchrun.txt"
done
report ctrun "$tmp/ctrun.txt"
report torchrun "$tmp/torchrun.txt"
