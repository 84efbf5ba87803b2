#!/bin/bash
# Builds the torch.distributed backend module ctrun_torch (comm/torch) against Debian trixie's torch 2.6, inside
# the chroot of ../shared/interop/torch2-env.sh. Same source as the torch 1.13 build; on 2.x it derives from
# c10d::Backend and registers with devices=["cpu"]. Output: build-torch2/python/ctrun_torch.cpython-313-*.so.
#
# usage (root):  tests/torch2/build_ctrun_torch26.sh [--install-deps] [BUILD_DIR]
#   --install-deps  first install trixie's build dependencies inside the chroot (`scripts/torch2_chroot.sh
#                   packages`: reads Debian's mirror, about 400 MB). Without it, missing ones are named and the
#                   script exits 77. `make test` installs them (and builds this) before ctest.
#   BUILD_DIR       default: build-torch2 at the repository root (inside the repository: the chroot only sees
#                   the bind-mounted repository).
# Only comm, store, common and the module are compiled (CTRUN_BUILD_TESTS=OFF, target ctrun_torch): about
# 3-4 minutes on a loaded 2-core machine the first time, seconds when nothing changed.
# Every use of the chroot goes through scripts/torch2_chroot.sh (its lock; several clones may build at once).
# Env: TORCH2_ENV, CHROOT_DIR as for torch2-env.sh. Exit: 0 built, 1 failed, 77 cannot (no chroot/root/deps).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
: "${TORCH2_ENV:=$repo/../shared/interop/torch2-env.sh}"
: "${CHROOT_DIR:=/opt/torch2-chroot}"
export CHROOT_DIR

install=0
if [ "${1:-}" = --install-deps ]; then install=1; shift; fi
build_dir=${1:-$repo/build-torch2}
case "$build_dir" in /*) ;; *) build_dir=$PWD/$build_dir ;; esac
case "$build_dir/" in "$repo"/*) ;; *) echo "build_ctrun_torch26: BUILD_DIR must be inside $repo" >&2; exit 1 ;; esac

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "the torch 2.6 chroot needs root (chroot, mount)"
[ -x "$TORCH2_ENV" ] || skip "$TORCH2_ENV not found"
[ -x "$CHROOT_DIR/usr/bin/python3" ] || skip "no torch 2.6 chroot at $CHROOT_DIR (build it: $TORCH2_ENV build)"

# The chroot's build dependencies (their list: scripts/torch2_chroot.sh, which `make test` runs first).
chroot_sh=$repo/scripts/torch2_chroot.sh
missing=$("$chroot_sh" missing | tr '\n' ' ')
if [ -n "${missing// /}" ]; then
  [ $install = 1 ] || skip "the chroot lacks ${missing}(install: $0 --install-deps, or make test)"
  "$chroot_sh" packages
fi

export TORCH2_BIND=$repo
cd "$repo"
# CTRUN_BOOST_EXACT=OFF: trixie has Boost 1.83 (bookworm's build pins 1.81). No NCCL, no tests, no ccache (the
# host's cache directory is not visible inside).
# Configured once: later builds let ninja re-run cmake when a CMakeLists.txt changed (saves ~15 s of a loaded
# machine on every make test).
if [ ! -f "$build_dir/build.ninja" ] || ! grep -q "ctrun_torch" "$build_dir/build.ninja"; then
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  if ! "$chroot_sh" run cmake -S "$repo" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCTRUN_BUILD_TESTS=OFF \
    -DCTRUN_WITH_NCCL=OFF -DCTRUN_BOOST_EXACT=OFF -DCTRUN_CCACHE=CTRUN_CCACHE-NOTFOUND \
    >"$log" 2>&1; then
    cat "$log"
    echo "build_ctrun_torch26: configuring $build_dir in the chroot failed" >&2
    exit 1
  fi
  grep "ctrun_torch" "$log"
  grep -q "ctrun_torch: building" "$log" || { echo "build_ctrun_torch26: the module was skipped" >&2; exit 1; }
fi
"$chroot_sh" run nice cmake --build "$build_dir" -j "${JOBS:-2}" --target ctrun_torch
ls "$build_dir"/python/ctrun_torch*.so
