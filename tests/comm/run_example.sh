#!/bin/sh
# Runs one comm example as a 4-rank job: under build/bin/ctrun when it exists (the product), else under the
# tests' comm_launch. CTRUN_COMM_TEST_LAUNCHER=self forces comm_launch. Bounded by `timeout`.
# usage: run_example.sh BIN_DIR NPROC EXAMPLE [ARGS...]
bin="$1"; nproc="$2"; example="$3"; shift 3
if [ "${CTRUN_COMM_TEST_LAUNCHER:-auto}" != self ] && [ -x "$bin/ctrun" ]; then
  exec timeout 120 "$bin/ctrun" --standalone --nproc-per-node="$nproc" --no-python "$bin/$example" "$@"
fi
exec timeout 120 "$bin/comm_launch" "$nproc" "$bin/$example" "$@"
