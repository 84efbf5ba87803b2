#!/bin/bash
# torch2_chroot.sh - the torch 2.6 chroot of ../shared/interop/torch2-env.sh (Debian trixie, python3-torch 2.6),
# made safe for several clones of this repository using it at once (CI runs `make test` as root, up to three
# clones side by side). torch2-env.sh itself counts concurrent `run`s for its /proc and /dev mounts but has no
# lock around `build`, and its `umount` unmounts under everyone. This wrapper adds ONE lock, a file next to the
# chroot (${CHROOT_DIR}.lock, flock):
#   exclusive  building the chroot, installing packages in it, unmounting leftovers, removing it;
#   shared     every `run` (so every mount), held by the run's processes until they end.
# It deletes the chroot only through `remove` and when `prepare` finds a partial one (a build killed half-way, which
# debootstrap and apt do not resume), both with the exclusive lock, and never while anything is mounted inside.
#
# usage (root):
#   torch2_chroot.sh prepare STATUS_FILE  the `make test` step: build or reuse the chroot and the packages the
#                                         tests need, then build ctrun_torch against torch 2.6 (build-torch2/).
#                                         Writes "ready: ..." or "SKIP: <reason>" to STATUS_FILE, which the
#                                         ctests read. Exit 0 when ready or skipped for an environment reason
#                                         (no root, no torch2-env.sh, no mirror, debootstrap or apt failed),
#                                         1 when the module does not build (a defect of this repository).
#   torch2_chroot.sh packages             install the chroot packages that are missing (exclusive lock)
#   torch2_chroot.sh missing              print the chroot packages that are missing, one a line
#   torch2_chroot.sh run CMD [ARG...]     torch2-env.sh run CMD under the shared lock
#   torch2_chroot.sh reclaim              unmount what a killed run left behind, only when nothing uses the chroot
#   torch2_chroot.sh remove               delete the chroot (exclusive lock; refuses while anything is mounted)
#   torch2_chroot.sh status               torch2-env.sh status
# Env: CHROOT_DIR (default /opt/torch2-chroot), TORCH2_ENV (default ../shared/interop/torch2-env.sh from the
# repository root), CTRUN_TORCH2=0 (prepare: skip on purpose), TORCH2_LOCK_WAIT (seconds, default 1800).
set -Eeuo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
: "${TORCH2_ENV:=$(cd "$repo/.." && pwd)/shared/interop/torch2-env.sh}"
: "${CHROOT_DIR:=/opt/torch2-chroot}"
CHROOT_DIR=${CHROOT_DIR%/}
export CHROOT_DIR TORCH2_ENV
LOCK=$CHROOT_DIR.lock
LOCK_WAIT=${TORCH2_LOCK_WAIT:-1800}

# What the module's build (build_ctrun_torch26.sh) and the tests need inside the chroot besides python3-torch.
# python3-setuptools: torch's test utilities (distributed_test.py) import it.
PACKAGES=(cmake ninja-build g++ libtorch-dev pybind11-dev python3-dev libboost-dev libfmt-dev libspdlog-dev
          nlohmann-json3-dev libcli11-dev libssl-dev python3-setuptools)

say() { echo "torch2: $*" >&2; }

is_built() {
  [ -x "$CHROOT_DIR/usr/bin/python3" ] && [ ! -d "$CHROOT_DIR/debootstrap" ] &&
    [ "$(chroot "$CHROOT_DIR" dpkg-query -W -f='${Status}' python3-torch 2>/dev/null)" = "install ok installed" ]
}
missing_packages() {
  local p
  for p in "${PACKAGES[@]}"; do
    [ "$(chroot "$CHROOT_DIR" dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || echo "$p"
  done
}
mounted_inside() { grep -F " $CHROOT_DIR/" /proc/self/mounts | awk '{print $2}' || true; }
live_runs() {  # pids of `torch2-env.sh run` processes on this chroot, whoever started them (with or without this wrapper)
  local d dir
  for d in /proc/[0-9]*; do
    tr '\0' ' ' 2>/dev/null <"$d/cmdline" | grep -qE '^(/bin/bash |bash )?[^ ]*torch2-env\.sh run ' || continue
    dir=$(tr '\0' '\n' 2>/dev/null <"$d/environ" | sed -n 's/^CHROOT_DIR=//p')
    dir=${dir:-/opt/torch2-chroot}
    [ "${dir%/}" != "$CHROOT_DIR" ] || echo "${d#/proc/}"
  done
  return 0
}

# fd 8 holds the lock. Children inherit it, so a build or a run that outlives this script keeps the lock held
# until it ends.
lock() {  # lock -x|-s [-n]
  mkdir -p "$(dirname "$LOCK")"
  exec 8>>"$LOCK"
  if [ "${2:-}" = -n ]; then flock "$1" -n 8; else flock "$1" -w "$LOCK_WAIT" 8; fi
}
unlock() { flock -u 8; exec 8>&-; }

# With the exclusive lock held: no run of this wrapper is active. A run of torch2-env.sh started without it is
# seen in /proc; when there is none, whatever is still mounted (or counted as active) is a leftover of a killed
# run and is unmounted.
reclaim_locked() {
  local users
  users=$(cat "$CHROOT_DIR/.torch2-env/users" 2>/dev/null || echo 0)
  if [ "${users:-0}" -le 0 ] && [ -z "$(mounted_inside)" ]; then return 0; fi
  if [ -n "$(live_runs)" ]; then
    say "chroot in use by torch2-env.sh run (pids $(live_runs | tr '\n' ' ')): leaving its mounts"
    return 0
  fi
  say "unmounting leftovers of a killed run (count $users): $(mounted_inside | tr '\n' ' ')"
  "$TORCH2_ENV" umount >/dev/null || true
  if [ -n "$(mounted_inside)" ]; then say "still mounted: $(mounted_inside | tr '\n' ' ')"; return 0; fi
  # torch2-env.sh umount stops before it resets the count when nothing but its own /proc and /dev was mounted (its
  # `findmnt | grep` finds nothing, which ends it under pipefail). A count left above 0 would make the next run
  # skip mounting /proc and /dev: reset it, under torch2-env.sh's own state lock.
  if [ "$(cat "$CHROOT_DIR/.torch2-env/users" 2>/dev/null || echo 0)" != 0 ]; then
    (flock 7 && echo 0 >"$CHROOT_DIR/.torch2-env/users") 7>"$CHROOT_DIR/.torch2-env/lock"
  fi
}

# Long steps run in their own session so that SIGINT/SIGTERM reaches all of them (apt, dpkg, debootstrap, chroot)
# through the trap below, which then waits for them: torch2-env.sh undoes its own mounts when its child ends.
CHILD=
run_child() {
  setsid "$@" &
  CHILD=$!
  local rc=0
  wait "$CHILD" || rc=$?
  CHILD=
  return $rc
}
on_signal() {
  trap '' INT TERM
  if [ -n "$CHILD" ]; then
    kill -TERM -- "-$CHILD" 2>/dev/null || true
    local i
    # the whole group, not only CHILD: torch2-env.sh undoes its mounts after its chroot'd child has ended
    for i in $(seq 1 300); do kill -0 -- "-$CHILD" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$CHILD" 2>/dev/null || true
    wait "$CHILD" 2>/dev/null || true
  fi
  # With the exclusive lock (building) we are the only user; otherwise another's run may be active: reclaim
  # only if nobody holds the lock.
  if [ "$HOLD" = x ]; then reclaim_locked; else { unlock 2>/dev/null || true; lock -x -n && reclaim_locked; } || true; fi
  exit "$1"
}
HOLD=
trap 'say "unexpected failure (exit $?) at line $LINENO of $0"' ERR
trap 'on_signal 130' INT
trap 'on_signal 143' TERM

cmd_packages() {  # the lock is held exclusively by the caller
  local missing
  missing=$(missing_packages | tr '\n' ' ')
  [ -n "${missing// /}" ] || return 0
  say "installing in the chroot: $missing"
  run_child "$TORCH2_ENV" run env DEBIAN_FRONTEND=noninteractive sh -c \
    "apt-get update && apt-get -o Dpkg::Use-Pty=0 install -y --no-install-recommends $missing && apt-get clean"
}

# Prints the reason the chroot cannot be had on this machine, or nothing.
environment_reason() {
  [ "${CTRUN_TORCH2:-1}" != 0 ] || { echo "CTRUN_TORCH2=0"; return; }
  [ "$(id -u)" = 0 ] || { echo "the torch 2.6 chroot needs root (chroot, mount); run make test as root"; return; }
  [ -x "$TORCH2_ENV" ] || { echo "$TORCH2_ENV not found (the tests need ../shared/interop beside the clone)"; return; }
  command -v flock >/dev/null || { echo "flock (util-linux) not found"; return; }
  command -v debootstrap >/dev/null || command -v apt-get >/dev/null || is_built ||
    { echo "neither debootstrap nor apt-get to install it"; return; }
}

cmd_prepare() {
  local status=${1:?usage: torch2_chroot.sh prepare STATUS_FILE} reason t0 log
  mkdir -p "$(dirname "$status")"
  status=$(cd "$(dirname "$status")" && pwd)/$(basename "$status")
  log=${status%.*}-chroot.log
  skip() { say "SKIP: $* (the tests/torch2 ctests will skip)"; echo "SKIP: $*" >"$status"; exit 0; }
  rm -f "$status"
  reason=$(environment_reason)
  [ -z "$reason" ] || skip "$reason"
  t0=$(date +%s.%N)
  # leftovers of a run or build killed with SIGKILL, when nobody uses the chroot
  if lock -x -n; then HOLD=x; reclaim_locked; HOLD=; unlock; fi
  # The common case (built, nothing missing) takes no lock: waiting for the exclusive lock while other clones'
  # tests hold it shared would stall this step for as long as their tests run.
  if ! is_built || [ -n "$(missing_packages)" ]; then
    say "taking $LOCK (exclusive) to build or complete $CHROOT_DIR"
    lock -x || skip "$LOCK stayed locked for ${LOCK_WAIT} s (another build of the chroot?)"
    HOLD=x
    reclaim_locked  # a killed build (debootstrap mounts /proc too) is resumed with nothing mounted
    if ! is_built; then
      say "building $CHROOT_DIR with $TORCH2_ENV build (3-10 min, ~1.3 GB; log: $log)"
      : >"$log"
      build_locked "$log" || skip "building the chroot failed: $(grep -v '^\s*$' "$log" | tail -n 1) (log: $log)"
      say "chroot built in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.0f", b-a}') s"
    fi
    cmd_packages >>"$log" 2>&1 || skip "installing $(missing_packages | tr '\n' ' ')in the chroot failed: $(tail -n 1 "$log") (log: $log)"
    HOLD=
    unlock
  fi
  local t1 torch_v
  t1=$(date +%s.%N)
  torch_v=$(chroot "$CHROOT_DIR" dpkg-query -W -f='${Version}' python3-torch)
  say "chroot ready ($CHROOT_DIR, python3-torch $torch_v) after $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s"
  if ! run_child "$repo/tests/torch2/build_ctrun_torch26.sh"; then
    echo "FAIL: building ctrun_torch against torch 2.6 failed (make test output above)" >"$status"
    say "building ctrun_torch against torch 2.6 failed"
    exit 1
  fi
  say "ctrun_torch for torch 2.6 built in $(awk -v a="$t1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"
  echo "ready: $CHROOT_DIR python3-torch $torch_v, module in $repo/build-torch2/python" >"$status"
}

cmd_run() {
  [ $# -gt 0 ] || { echo "usage: torch2_chroot.sh run CMD [ARG...]" >&2; exit 2; }
  trap - INT TERM  # torch2-env.sh run has its own traps; exec keeps the lock on fd 8 for it and its children
  lock -s || { say "$LOCK stayed locked for ${LOCK_WAIT} s (a build of the chroot?)"; exit 1; }
  exec "$TORCH2_ENV" run "$@"
}

# With the exclusive lock held. Refuses while anything is mounted inside and anything that does not look like a
# debootstrap'ed tree (a directory someone else owns).
remove_locked() {
  local m
  reclaim_locked
  m=$(mounted_inside)
  [ -z "$m" ] || { say "refusing to remove $CHROOT_DIR: still mounted: $m"; return 1; }
  [ -d "$CHROOT_DIR" ] || return 0
  case "$CHROOT_DIR" in /|/opt|/usr|/var|/tmp|/home|/root|"") say "refusing to remove $CHROOT_DIR"; return 1 ;; esac
  [ -d "$CHROOT_DIR/debootstrap" ] || [ -x "$CHROOT_DIR/usr/bin/apt-get" ] ||
    { say "refusing to remove $CHROOT_DIR: not a debootstrap'ed tree"; return 1; }
  # --one-file-system: even a mount that appeared since would not be followed
  rm -rf --one-file-system "$CHROOT_DIR"
  say "removed $CHROOT_DIR"
}

cmd_remove() {
  lock -x || { say "$LOCK stayed locked for ${LOCK_WAIT} s"; exit 1; }
  HOLD=x
  remove_locked
}

# With the exclusive lock held. debootstrap does not resume a run killed while it extracted or installed ("Tried
# to extract package, but file already exists"), nor apt an interrupted dpkg: a partial chroot is removed and
# built once more from nothing.
build_locked() {
  local log=$1
  if [ -d "$CHROOT_DIR/debootstrap" ]; then
    say "$CHROOT_DIR holds an interrupted debootstrap: starting over"
    remove_locked || return 1
  fi
  run_child "$TORCH2_ENV" build >>"$log" 2>&1 && return 0
  is_built && return 0
  [ -d "$CHROOT_DIR/debootstrap" ] || [ -x "$CHROOT_DIR/usr/bin/apt-get" ] || return 1
  say "building on the partial chroot failed ($(grep -v '^\s*$' "$log" | tail -n 1)): once more from nothing"
  remove_locked || return 1
  run_child "$TORCH2_ENV" build >>"$log" 2>&1
}

case "${1:-}" in
  prepare) shift; cmd_prepare "$@" ;;
  packages) lock -x; HOLD=x; cmd_packages ;;
  missing) missing_packages ;;
  run) shift; cmd_run "$@" ;;
  reclaim) if lock -x -n; then HOLD=x; reclaim_locked; else say "chroot in use (lock held): nothing reclaimed"; fi ;;
  remove) cmd_remove ;;
  status) "$TORCH2_ENV" status ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
