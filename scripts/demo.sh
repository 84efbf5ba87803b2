#!/usr/bin/env bash
# `make run`: real demos under ctrun, on this machine, 4 local workers each.
#   1. examples/comm/train: a data-parallel C++ training loop on ctrun::comm (gradients all-reduced), printing a
#      falling loss.
#   2. examples/torch_allreduce.py: real PyTorch (Debian's python3-torch) workers doing a gloo all_reduce through
#      the TCPStore that ctrun hosts for them (TORCHELASTIC_USE_AGENT_STORE=True).
set -euo pipefail
build_dir=${1:-build}
cd "$(dirname "$0")/.."

run() {
  echo
  echo "+ $*"
  "$@"
}

run "$build_dir/bin/ctrun" --standalone --nproc-per-node=4 --no-python "$build_dir/bin/example_train"

torch_python=${PYTHON_EXEC:-/usr/bin/python3}
if "$torch_python" -c 'import torch' 2>/dev/null; then
  PYTHON_EXEC=$torch_python run "$build_dir/bin/ctrun" --standalone --nproc-per-node=4 examples/torch_allreduce.py
else
  echo "(skipping the PyTorch demo: $torch_python cannot import torch; scripts/install-deps.sh installs python3-torch)"
fi
