#!/usr/bin/env bash
# `make run`: real demos under ctrun, on this machine, 4 local workers each.
#   1. examples/comm/train: a data-parallel C++ training loop on ctrun::comm (gradients all-reduced), printing a
#      falling loss.
#   2. examples/torch_allreduce.py: real PyTorch (Debian's python3-torch) workers doing a gloo all_reduce through
#      the TCPStore that ctrun hosts for them (TORCHELASTIC_USE_AGENT_STORE=True).
#   3. examples/torch_ctrun_backend.py: real PyTorch workers training with DDP on backend "ctrun" (comm through
#      the ctrun_torch module, which ctrun puts on the workers' PYTHONPATH).
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
  if ls "$build_dir"/python/ctrun_torch* >/dev/null 2>&1; then
    PYTHON_EXEC=$torch_python run "$build_dir/bin/ctrun" --standalone --nproc-per-node=4 examples/torch_ctrun_backend.py
  else
    echo "(skipping the backend \"ctrun\" demo: no ctrun_torch module in $build_dir/python; needs libtorch-dev pybind11-dev python3-dev)"
  fi
else
  echo "(skipping the PyTorch demo: $torch_python cannot import torch; scripts/install-deps.sh installs python3-torch)"
fi
