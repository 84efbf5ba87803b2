#!/usr/bin/env bash
# `make run`: a real demo under ctrun — 4 local workers of a gloo all_reduce with the real PyTorch.
set -euo pipefail
build_dir=${1:-build}
cd "$(dirname "$0")/.."
echo "+ $build_dir/bin/ctrun --standalone --nproc-per-node=4 examples/torch_allreduce.py"
PYTHON_EXEC=${PYTHON_EXEC:-/usr/bin/python3} exec "$build_dir/bin/ctrun" --standalone --nproc-per-node=4 examples/torch_allreduce.py
