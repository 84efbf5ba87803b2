#!/bin/bash
# ctrun::comm vs torch gloo vs the bare TCP ring floor between two network namespaces joined by a veth pair,
# optionally shaped with tc tbf (e.g. RATE=1gbit). Half of the ranks run in each namespace; nothing leaves the
# two namespaces this script creates, and it deletes them (and kills what it started, by PID) on exit.
#   sudo scripts/bench/netns_compare.sh [BUILD_DIR]      env: NPROC=4 RATE= OPS=all_reduce,broadcast
#                                                        SIZES=1M,16M,64M SCALE=0.2
# Exit 77 when namespaces cannot be created (not root, no iproute2, no CAP_NET_ADMIN).
set -u
build=${1:-build}
nproc=${NPROC:-4}; rate=${RATE:-}; ops=${OPS:-all_reduce,broadcast}; sizes=${SIZES:-1M,16M,64M}; scale=${SCALE:-0.2}
here=$(cd "$(dirname "$0")/../.." && pwd)
bench=$(readlink -f "$build/bin/ctbench")
[ -x "$bench" ] || { echo "no $bench (make bench)"; exit 2; }
a=ctA$$; b=ctB$$; va=vA$$; vb=vB$$
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null
}
trap cleanup EXIT
if ! ip netns add "$a" 2>/dev/null || ! ip netns add "$b" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces (need root and iproute2)"; exit 77
fi
ip link add "$va" type veth peer name "$vb" || { echo "SKIP: cannot create a veth pair"; exit 77; }
ip link set "$va" netns "$a"; ip link set "$vb" netns "$b"
ip -n "$a" addr add 10.77.0.1/24 dev "$va"; ip -n "$b" addr add 10.77.0.2/24 dev "$vb"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "$va" up; ip -n "$b" link set "$vb" up
if [ -n "$rate" ]; then
  ip netns exec "$a" tc qdisc add dev "$va" root tbf rate "$rate" burst 256kb latency 50ms || exit 1
  ip netns exec "$b" tc qdisc add dev "$vb" root tbf rate "$rate" burst 256kb latency 50ms || exit 1
fi
shape=unshaped; [ -n "$rate" ] && shape="shaped to $rate (tc tbf)"
echo "# two namespaces, veth $shape; $nproc ranks (half per namespace); load $(cut -d' ' -f1-3 /proc/loadavg)"

# run_job PORT CMD...: starts rank r in namespace A (r < nproc/2) or B, waits for all, prints rank 0's output.
run_job() {
  local port=$1; shift
  local out; out=$(mktemp); pids=()
  for ((r = 0; r < nproc; r++)); do
    local ns=$a addr=10.77.0.1 dev=$va
    if ((r >= nproc / 2)); then ns=$b; addr=10.77.0.2; dev=$vb; fi
    local dest=/dev/null; ((r == 0)) && dest=$out
    ip netns exec "$ns" env RANK=$r LOCAL_RANK=$r WORLD_SIZE=$nproc MASTER_ADDR=10.77.0.1 MASTER_PORT=$port \
      CTRUN_COMM_TRANSPORT=tcp CTRUN_COMM_IFADDR=$addr GLOO_SOCKET_IFNAME=$dev OMP_NUM_THREADS=1 \
      timeout -k 10 "${JOB_TIMEOUT:-300}" "$@" >"$dest" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  pids=()
  cat "$out"; rm -f "$out"
}

echo "## ctrun::comm (tcp) with the bare TCP ring floor (tcp_floor_us: same bytes per rank, same processes)"
run_job 29611 "$bench" --transport tcp --no-gloo --ops "$ops" --sizes "$sizes" --iters-scale "$scale"
echo "## torch gloo"
bytes=$(echo "$sizes" | tr ',' '\n' | sed -e 's/K$/*1024/' -e 's/M$/*1048576/' | bc | paste -sd,)
run_job 29612 /usr/bin/python3 "$here/apps/bench/ctbench/torch_gloo_bench.py" "$ops" "$bytes" \
  "$(python3 -c "print(int(67108864*$scale))")"
