#!/bin/bash
# Issue 16: a comm C++ worker launched by torch 1.13's own torchrun (Debian bookworm's python3-torch, through
# ../shared/interop/torchrun_py311.py) works with nothing set: torchrun's agent store is torch 1.13's TCPStore,
# which speaks the legacy wire dialect, and comm's store client must detect that by itself (store/tcp_store.cpp).
# Runs example_train (all_reduce, broadcast, checks its own result) as 2 ranks; skips without torch.
# usage: torchrun113_comm.sh BIN_DIR TORCHRUN_PY311 PYTHON
set -euo pipefail
bin=$1; torchrun=$2; python=${3:-python3}
[ -f "$torchrun" ] || { echo "SKIP: $torchrun not found (the shared interop folder)"; exit 77; }
"$python" -c 'import torch.distributed.run' 2>/dev/null || { echo "SKIP: $python has no torch"; exit 77; }
out=$(mktemp /tmp/ctrun-torchrun113.XXXXXX)
trap 'rm -f "$out"' EXIT
# torchrun's default static rendezvous: the workers use the agent's store (TORCHELASTIC_USE_AGENT_STORE=True),
# torch 1.13's own TCPStore server, on a port reserved for this run instead of 29500 (other tests run at the same
# time): $reserve holds it bound but not listening (as tests/common/ports.py) while torchrun, which binds it with
# SO_REUSEADDR, runs; nothing else can take it in between, as it could a port found free and released.
reserve="import os, socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', 0))
os.set_inheritable(s.fileno(), True)
port = str(s.getsockname()[1])
os.execvp(sys.argv[1], [a.replace('@PORT@', port) for a in sys.argv[1:]])"
# No CTRUN_* variable: the dialect must be found, not told. Bounded: comm would otherwise wait for its timeout.
unset_ctrun=$(env | sed -n 's/^\(CTRUN_[A-Za-z0-9_]*\)=.*/-u \1/p')
# shellcheck disable=SC2086
env $unset_ctrun timeout -k 5 150 "$python" -c "$reserve" "$python" "$torchrun" --nproc_per_node=2 \
  --master_addr=127.0.0.1 --master_port=@PORT@ --no_python sh -c 'echo "agent store: $TORCHELASTIC_USE_AGENT_STORE"; exec "$0"' \
  "$bin/example_train" >"$out" 2>&1 && rc=0 || rc=$?
cat "$out"
[ "$rc" = 0 ] || { echo "FAIL: torchrun 1.13 + example_train exited $rc"; exit 1; }
[ "$(grep -c '^agent store: True$' "$out")" = 2 ] || { echo "FAIL: the workers did not use torchrun's agent store"; exit 1; }
grep -q 'trained on 2 ranks' "$out" || { echo "FAIL: example_train did not report its result"; exit 1; }
echo PASS
