#!/bin/bash
# Every "against the floor" figure of docs/benchmarks.md in one run, for a quiet machine (each step prints the
# load average first; figures taken under load mean little):
#   - shm collectives, 2/4/8 ranks, comm vs gloo vs the memcpy-derived floor (ctbench %floor)
#   - tcp over loopback, 4 ranks, comm vs gloo vs the bare socket ring floor
#   - tcp between two network namespaces (veth), unshaped and shaped to 1 Gbit (needs root; skipped otherwise)
#   - rendezvous of 64 ... 4096 agents (rdzv_bench)
# Usage: scripts/bench/floors.sh [BUILD_DIR] > floors.log      env: SCALE=0.2 SIZES=8,64K,1M,16M,64M PARTS="shm tcp netns rdzv"
set -u
build=${1:-build}
scale=${SCALE:-0.2}
sizes=${SIZES:-8,64K,1M,16M,64M}
parts=${PARTS:-shm tcp netns rdzv}
here=$(cd "$(dirname "$0")/../.." && pwd)
bin="$build/bin"
[ -x "$bin/ctbench" ] && [ -x "$bin/rdzv_bench" ] || { echo "no $bin/ctbench or rdzv_bench (make bench)"; exit 2; }
step() { echo; echo "## $* — $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"; }

for part in $parts; do
  case $part in
    shm)
      for n in 2 4 8; do
        step "shm, $n ranks"
        timeout 600 "$bin/ctbench" --nproc "$n" --transport shm --sizes "$sizes" --iters-scale "$scale" 2>&1 |
          sed -n '/ctbench summary/,$p'
      done ;;
    tcp)
      step "tcp over loopback, 4 ranks"
      timeout 600 "$bin/ctbench" --nproc 4 --transport tcp --ops all_reduce,broadcast --sizes "$sizes" \
        --iters-scale "$scale" 2>&1 | sed -n '/ctbench summary/,$p' ;;
    netns)
      step "tcp between two namespaces, unshaped"
      SIZES=1M,16M,64M SCALE=$scale "$here/scripts/bench/netns_compare.sh" "$build" 2>&1
      step "tcp between two namespaces, 1 Gbit"
      RATE=1gbit SIZES=1M,16M SCALE=0.1 "$here/scripts/bench/netns_compare.sh" "$build" 2>&1 ;;
    rdzv)
      step "rendezvous, 64 ... 4096 agents"
      timeout 600 "$bin/rdzv_bench" --sizes 64,256,1024,2048,4096 --torch-sizes "" --repeats 3 2>&1 | tail -8 ;;
    *) echo "unknown part '$part' (shm tcp netns rdzv)"; exit 2 ;;
  esac
done
