#!/bin/sh
# python3 of the torch 2.6 chroot, with this process's environment (torch2-env.sh `run` passes it through and only
# sets PATH). The repository is bind-mounted at its own path, so absolute script paths work inside. It runs
# through scripts/torch2_chroot.sh, which holds the chroot's lock (shared) while it runs.
# ctrun starts it as a worker:  ctrun --no-python ... tests/torch2/chroot_python.sh tests/torch2/gloo_worker26.py
# Env: TORCH2_ENV (default ../shared/interop/torch2-env.sh from the repo root), CHROOT_DIR, TORCH2_BIND
# (default: the repository root).
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
: "${TORCH2_ENV:=$repo/../shared/interop/torch2-env.sh}"
: "${TORCH2_BIND:=$repo}"
export TORCH2_BIND
export TORCH2_ENV
exec "$repo/scripts/torch2_chroot.sh" run python3 "$@"
