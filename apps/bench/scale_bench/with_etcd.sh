#!/usr/bin/env bash
# Runs a command next to a fresh 3-member etcd cluster on 127.0.0.1 (free ports, data in a temp dir), with
# ETCD_ENDPOINTS set to its client endpoints; stops every member by PID afterwards, also on failure or Ctrl-C.
#   apps/bench/scale_bench/with_etcd.sh sh -c 'build/bin/scale_bench --sizes 4,64,256 --torch-sizes 0 --etcd-endpoints $ETCD_ENDPOINTS'
set -euo pipefail
ETCD=${ETCD:-etcd}
command -v "$ETCD" >/dev/null || { echo "with_etcd.sh: etcd not found (Debian package etcd-server)" >&2; exit 77; }
dir=$(mktemp -d "${ETCD_DATA_PARENT:-/tmp}/ctrun-etcd-bench.XXXXXX")  # /dev/shm: no fsync cost
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM
read -r -a ports <<<"$(python3 -c '
import socket
ss = [socket.socket() for _ in range(6)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')"
initial="m0=http://127.0.0.1:${ports[3]},m1=http://127.0.0.1:${ports[4]},m2=http://127.0.0.1:${ports[5]}"
endpoints=""
for i in 0 1 2; do
  c="http://127.0.0.1:${ports[$i]}" p="http://127.0.0.1:${ports[$((i + 3))]}"
  "$ETCD" --name "m$i" --data-dir "$dir/m$i" --listen-client-urls "$c" --advertise-client-urls "$c" \
    --listen-peer-urls "$p" --initial-advertise-peer-urls "$p" --initial-cluster "$initial" \
    --initial-cluster-state new --log-level error >"$dir/m$i.log" 2>&1 &
  pids+=($!)
  endpoints+="${endpoints:+,}127.0.0.1:${ports[$i]}"
done
for i in $(seq 1 300); do  # up to 30 s for a leader: a linearizable read answers
  if python3 - "${ports[0]}" <<'PY' 2>/dev/null; then break; fi
import sys, urllib.request
urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v3/kv/range", data=b'{"key":"eA=="}'), timeout=1)
PY
  sleep 0.1
done
export ETCD_ENDPOINTS=$endpoints
"$@"
