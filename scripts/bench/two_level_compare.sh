#!/bin/bash
# comm's two levels between namespaced hosts: HOSTS network namespaces joined by a bridge (links shaped with tc
# tbf at RATE, egress of every host), RANKS ranks per host sharing one IPC + mount namespace (own /dev/shm).
# Runs ctbench with comm's choice (cost model), each cross-host all_reduce algorithm forced, comm flat over tcp
# (one level, as before), and torch gloo. Before them, comm's own timing of the link between two hosts (a two-level
# group's creation, 2 ranks per host: a group of one rank per host runs flat and times nothing); beside every comm
# row, comm_sim's prediction for the same op, algorithm and shape at that link, and measured / predicted.
# Deletes what it creates; exit 77 when namespaces cannot be made.
#   sudo scripts/bench/two_level_compare.sh [BUILD_DIR]   env: HOSTS=2 RANKS=2 RATE=1gbit (RATE= unshaped) OPS=all_reduce
#                                                         SIZES=8,64K,1M,16M SCALE=0.1
#   GLOO_PRELOAD=1: the gloo ranks under one `ctrun --preload torch` agent per host (8 x 8 ranks fit in memory);
#   ALGOS=choice,all_reduce=ring,...: the comm rows to run (default: the choice and each all_reduce algorithm);
#   SKIP_FLAT=1: no flat-tcp row (RANKS=1 runs flat anyway); SKIP_GLOO=1: no gloo row; SKIP_COMM=1: the gloo row only; AGENT_LOG=PATH: each agent's log in PATH.<host>.
set -u
build=${1:-build}
hosts=${HOSTS:-2}; ranks=${RANKS:-2}; rate=${RATE-1gbit}; ops=${OPS:-all_reduce}; sizes=${SIZES:-8,64K,1M,16M}
scale=${SCALE:-0.1}
here=$(cd "$(dirname "$0")/../.." && pwd)
bench=$(readlink -f "$build/bin/ctbench")
[ -x "$bench" ] || { echo "no $bench (make bench)"; exit 2; }
tag=tlb$$; sw=${tag}sw
cleanup() {
  for ((h = 0; h < hosts; h++)); do ip netns del "${tag}h$h" 2>/dev/null; done
  ip netns del "$sw" 2>/dev/null
}
trap cleanup EXIT
ip netns add "$sw" 2>/dev/null || { echo "SKIP: cannot create network namespaces (need root)"; exit 77; }
ip -n "$sw" link add br0 type bridge && ip -n "$sw" link set br0 up || exit 77
for ((h = 0; h < hosts; h++)); do
  ns=${tag}h$h
  ip netns add "$ns"; ip link add "${tag}a$h" type veth peer name "${tag}b$h" || exit 77
  ip link set "${tag}a$h" netns "$ns"; ip link set "${tag}b$h" netns "$sw"
  ip -n "$sw" link set "${tag}b$h" master br0; ip -n "$sw" link set "${tag}b$h" up
  ip -n "$ns" addr add "10.79.0.$((h + 1))/24" dev "${tag}a$h"; ip -n "$ns" link set "${tag}a$h" up
  ip -n "$ns" link set lo up
  [ -n "$rate" ] && ip netns exec "$ns" tc qdisc add dev "${tag}a$h" root tbf rate "$rate" burst 256kb latency 50ms
done
echo "# $hosts namespaced hosts x $ranks ranks, links ${rate:-unshaped} (tc tbf); load $(cut -d' ' -f1-3 /proc/loadavg)"

# run_job PORT ENV... -- CMD...: every host's ranks in one IPC + mount namespace; prints rank 0's output.
run_job() {
  local port=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local out; out=$(mktemp); local pids=()
  for ((h = 0; h < hosts; h++)); do
    local first=$((h * ranks))
    ip netns exec "${tag}h$h" unshare --ipc --mount --propagation private bash -c '
      mount -t tmpfs tmpfs /dev/shm; out=$1; first=$2; n=$3; shift 3; pids=()
      for ((l = 0; l < n; l++)); do
        r=$((first + l)); dest=/dev/null; ((r == 0)) && dest=$out
        env RANK=$r LOCAL_RANK=$l "$@" >"$dest" 2>&1 & pids+=($!)
      done
      for p in "${pids[@]}"; do wait "$p"; done' bash "$out" "$first" "$ranks" \
      WORLD_SIZE=$((hosts * ranks)) MASTER_ADDR=10.79.0.1 MASTER_PORT=$port CTRUN_COMM_IFADDR=10.79.0.$((h + 1)) \
      GLOO_SOCKET_IFNAME=${tag}a$h OMP_NUM_THREADS=1 "${envs[@]}" timeout -k 10 "${JOB_TIMEOUT:-600}" "$@" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  grep -v '^#' "$out" | grep . ; rm -f "$out"
}
# run_agents PORT -- SCRIPT ARGS...: one `ctrun --preload torch` agent per host (static rendezvous on host 0), each
# forking its host's RANKS torch workers from one warm process, so that 64 gloo ranks fit in this machine's memory
# (a cold torch process holds ~350 MB); prints rank 0's lines.
run_agents() {
  local port=$1; shift 2
  local out; out=$(mktemp); local pids=()
  for ((h = 0; h < hosts; h++)); do
    ip netns exec "${tag}h$h" unshare --ipc --mount --propagation private bash -c '
      mount -t tmpfs tmpfs /dev/shm; out=$1; h=$2; shift 2
      err=/dev/null; [ -n "${AGENT_LOG:-}" ] && err=$AGENT_LOG.$h
      if ((h == 0)); then exec "$@" >"$out" 2>"$err"; else exec "$@" >/dev/null 2>"$err"; fi' bash "$out" "$h" \
      env GLOO_SOCKET_IFNAME=${tag}a$h OMP_NUM_THREADS=1 PYTHON_EXEC=/usr/bin/python3 \
      timeout -k 10 "${JOB_TIMEOUT:-600}" "$ctrun" --nnodes "$hosts" --node-rank "$h" --nproc-per-node "$ranks" \
      --master-addr 10.79.0.1 --master-port "$port" --local-addr "10.79.0.$((h + 1))" --preload torch "$@" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  grep -v '^#' "$out" | grep . ; rm -f "$out"
}
ctrun=$(readlink -f "$build/bin/ctrun")
sim=$(dirname "$bench")/comm_sim
port=29620
lat=""
# The link as comm times it when a two-level group is created (8-byte round trips, 1 MiB exchanges), read from the
# debug line "in two levels: ... between hosts X us Y MB/s"; the predictions below use it.
[ "${SKIP_COMM:-0}" != 1 ] && read -r lat mbps < <( (ranks=2; run_job $((port++)) CTRUN_LOG_LEVEL=debug -- "$bench" --no-gloo --ops barrier \
  --sizes 8 --iters-scale 0.01) | sed -n 's/.*between hosts \([0-9.]*\) us \([0-9.]*\) MB\/s.*/\1 \2/p' | head -n1)
port=$((port + 1))
[ "${SKIP_COMM:-0}" != 1 ] && echo "# comm timed the link between hosts: ${lat:-?} us, ${mbps:-?} MB/s"
# predict ALGO: ctbench's rows (op bytes time_us ...) from stdin, each with comm_sim's prediction for ALGO (a
# CTRUN_COMM_ALGO value; empty: the choice) at the timed link, and measured / predicted.
predict() {
  local algo=$1 op bytes us rest name m p
  echo "| op | bytes | measured us | predicted us (algorithm) | measured / predicted |"
  echo "|---|---|---|---|---|"
  while read -r op bytes us rest; do
    name=choice
    case ",$algo," in *",$op="*) name=${algo#*"$op="}; name=${name%%,*} ;; esac
    m=$bytes  # ctbench's gathers count the whole output; the model takes one rank's block
    case $op in all_gather | reduce_scatter) m=$((bytes / (hosts * ranks))) ;; esac
    p=$("$sim" --op "$op" --ranks $((hosts * ranks)) --ranks-per-node "$ranks" --latency-us "$lat" \
      --gbps "$(echo "$mbps * 8 / 1000" | bc -l)" --bytes "$m" --algorithm "$name" 2>&1 | awk '{print $6, $5}')
    echo "| $op | $bytes | $us | ${p% *} (${p#* }) | $(echo "$us / ${p% *}" | bc -l | xargs printf %.2f) |"
  done
}
if [ "${SKIP_COMM:-0}" != 1 ]; then
algos=${ALGOS:-choice,all_reduce=ring,all_reduce=recursive_doubling,all_reduce=halving_doubling,all_reduce=tree,all_reduce=double_binary_tree}
for algo in ${algos//,/ }; do
  [ "$algo" = choice ] && algo=""
  echo "## comm (two levels when a host has several ranks), cross-host algorithm: ${algo:-(the choice: cost model or size table)}"
  rows=$(run_job $((port++)) CTRUN_COMM_ALGO=$algo -- "$bench" --no-gloo --ops "$ops" --sizes "$sizes" \
    --iters-scale "$scale" 2>&1 | grep -E "^($(echo "$ops" | tr ',' '|')) +[0-9]+ +[0-9.]+ ")
  echo "$rows"
  [ -n "${lat:-}" ] && [ -n "$rows" ] && predict "$algo" <<<"$rows"
done
if [ "${SKIP_FLAT:-0}" != 1 ]; then
  echo "## comm flat over tcp (one level)"
  run_job $((port++)) CTRUN_COMM_TRANSPORT=tcp -- "$bench" --transport tcp --no-gloo --ops "$ops" --sizes "$sizes" \
    --iters-scale "$scale"
fi
fi
if [ "${SKIP_GLOO:-0}" != 1 ]; then
echo "## torch gloo"
bytes=$(echo "$sizes" | tr ',' '\n' | sed -e 's/K$/*1024/' -e 's/M$/*1048576/' | bc | paste -sd,)
budget=$(python3 -c "print(int(67108864*$scale))")
if [ "${GLOO_PRELOAD:-0}" = 1 ]; then
  run_agents $((port++)) -- "$here/apps/bench/ctbench/torch_gloo_bench.py" "$ops" "$bytes" "$budget"
else
  run_job $((port++)) -- /usr/bin/python3 "$here/apps/bench/ctbench/torch_gloo_bench.py" "$ops" "$bytes" "$budget"
fi
fi
