#!/bin/sh
# Two levels across namespaced hosts: 3 "hosts", each a network namespace (own address, joined by a bridge in a
# fourth namespace) whose ranks share one IPC and mount namespace with their own /dev/shm; 6 ranks laid out
# unevenly and interleaved (host 0: ranks 0 3, host 1: rank 1, host 2: ranks 2 4 5), joined through a ctstore in
# host 0. Mode "check": every op x dtype x reduce op against the reference (two_level_worker.cpp); mode
# "kill": rank 4 dies mid-all_reduce and every other rank must fail in time naming it.
# Deletes what it creates (namespaces by name, processes by PID). Exit 77 (skip) when namespaces cannot be made.
# usage: two_level_netns.sh BIN_DIR check|kill
bin=$1; mode=$2
worker="$bin/comm_two_level_worker"
[ -x "$worker" ] && [ -x "$bin/ctstore" ] || { echo "skipped: comm_two_level_worker or ctstore not built"; exit 77; }
command -v ip >/dev/null && command -v unshare >/dev/null || { echo "skipped: needs iproute2 and unshare"; exit 77; }
tag=tl$$
sw=${tag}sw
out=$(mktemp -d)
store_pid=""
cleanup() {
  [ -n "$store_pid" ] && kill "$store_pid" 2>/dev/null
  for h in 0 1 2; do ip netns del "${tag}h$h" 2>/dev/null; done
  ip netns del "$sw" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT
if ! ip netns add "$sw" 2>/dev/null; then echo "skipped: cannot create network namespaces (need root)"; exit 77; fi
ip -n "$sw" link add br0 type bridge && ip -n "$sw" link set br0 up || { echo "skipped: no bridge"; exit 77; }
for h in 0 1 2; do
  ns=${tag}h$h
  ip netns add "$ns" || exit 1
  ip link add "${tag}a$h" type veth peer name "${tag}b$h" || { echo "skipped: cannot create veth pairs"; exit 77; }
  ip link set "${tag}a$h" netns "$ns"; ip link set "${tag}b$h" netns "$sw"
  ip -n "$sw" link set "${tag}b$h" master br0; ip -n "$sw" link set "${tag}b$h" up
  ip -n "$ns" addr add "10.78.0.$((h + 1))/24" dev "${tag}a$h"
  ip -n "$ns" link set "${tag}a$h" up; ip -n "$ns" link set lo up
done
# The store in host 0, on port 0 (read back from its log).
ip netns exec "${tag}h0" "$bin/ctstore" --host 10.78.0.1 --port 0 > "$out/store" 2>&1 &
store_pid=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on .*:\([0-9][0-9]*\).*/\1/p' "$out/store" | head -n1)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "ctstore did not start:"; cat "$out/store"; exit 1; }
# host RANKS...: the host's ranks in one IPC + mount namespace with a fresh /dev/shm.
run_host() {
  h=$1; shift
  ip netns exec "${tag}h$h" unshare --ipc --mount --propagation private sh -c '
    mount -t tmpfs tmpfs /dev/shm || exit 1
    out=$1; worker=$2; mode=$3; shift 3
    pids=""
    for r in "$@"; do
      RANK=$r "$worker" "$mode" > "$out/rank$r" 2>&1 &
      pids="$pids $!"
    done
    rc=0
    for p in $pids; do wait "$p" || rc=1; done
    exit $rc' sh "$out" "$worker" "$mode" "$@"
}
# MASTER_ADDR: the tcp transport advertises the address of its route there (the host's own).
export STORE=10.78.0.1:$port WORLD_SIZE=6 KILL_RANK=4 MASTER_ADDR=10.78.0.1
run_host 0 0 3 & h0=$!
run_host 1 1 & h1=$!
run_host 2 2 4 5 & h2=$!
wait $h0; r0=$?; wait $h1; r1=$?; wait $h2; r2=$?
cat "$out"/rank*
if [ "$mode" = kill ]; then
  # The victim's host reports it (SIGKILL); every other rank must have printed its error naming rank 4.
  fails=0
  for r in 0 1 2 3 5; do grep -q "naming the dead rank" "$out/rank$r" || fails=1; done
  [ $fails -eq 0 ] && [ $r0 -eq 0 ] && [ $r1 -eq 0 ] && echo "every surviving rank failed in time naming rank 4"
  exit $((fails || r0 || r1))
fi
[ $r0 -eq 0 ] && [ $r1 -eq 0 ] && [ $r2 -eq 0 ]
