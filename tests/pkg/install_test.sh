#!/bin/bash
# Issue 16: ctrun used from outside the repository. Installs the already-built tree into a temporary prefix, checks
# the layout (programs, SONAMEs, public headers only, no CUDA in comm, exported symbols), then builds a tiny
# project with find_package(ctrun) and one with pkg-config, and runs each under `ctrun --nproc-per-node=2`,
# checking their all_reduce. Everything lives in a temporary directory removed on exit.
# usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(realpath "$1"); src=$(realpath "$2")
tmp=$(mktemp -d /tmp/ctrun-install-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "--- $*"; }

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "install"; }
for f in bin/ctrun bin/ctstore lib/libctrun_comm.so lib/libctrun_comm.so.0 lib/libctrun_store.so.0 \
         include/ctrun/comm/process_group.hpp include/ctrun/store/tcp_store.hpp \
         lib/cmake/ctrun/ctrunConfig.cmake lib/cmake/ctrun/ctrunConfigVersion.cmake lib/pkgconfig/ctrun.pc \
         lib/pkgconfig/ctrun-store.pc share/doc/ctrun/install.md; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done
# Only the public API: no internal headers (cpu backend, transports, algorithms, server keyspace).
for f in include/ctrun/comm/cpu include/ctrun/comm/transport include/ctrun/comm/algorithms \
         include/ctrun/store/keyspace.hpp include/ctrun/common; do
  [ ! -e "$prefix/$f" ] || fail "internal header installed: $f"
done
readelf -d "$prefix/lib/libctrun_comm.so" | grep -q 'SONAME.*\[libctrun_comm\.so\.0\]' || fail "SONAME of libctrun_comm"
readelf -d "$prefix/lib/libctrun_store.so" | grep -q 'SONAME.*\[libctrun_store\.so\.0\]' || fail "SONAME of libctrun_store"
if readelf -d "$prefix/lib/libctrun_comm.so" | grep -Eq 'NEEDED.*(cuda|nccl)'; then fail "libctrun_comm needs CUDA"; fi
# Visibility: the API is exported, internals are not.
nm -DC --defined-only "$prefix/lib/libctrun_comm.so" | cut -d' ' -f3- >"$tmp/comm.syms"
grep -q 'ctrun::comm::ProcessGroup::init' "$tmp/comm.syms" || fail "ProcessGroup::init not exported"
internal='^(ctrun::comm::(cpu|transport|algorithms|reduce|init)::|ctrun::log::|spdlog::|fmt::|ctrun::store::)'
if grep -Eq "$internal" "$tmp/comm.syms"; then
  grep -E "$internal" "$tmp/comm.syms" | head
  fail "libctrun_comm exports internal symbols"
fi
echo "libctrun_comm exports $(wc -l <"$tmp/comm.syms") symbols"
if [ -e "$prefix/lib/libctrun_comm_nccl.so" ]; then
  [ -e "$prefix/lib/cmake/ctrun/ctrun-nccl-targets.cmake" ] || fail "nccl targets not installed"
  [ -e "$prefix/include/ctrun/comm/nccl/nccl_backend.hpp" ] || fail "nccl header not installed"
fi
"$prefix/bin/ctrun" --version | tee "$tmp/version"
grep -Eq '^ctrun [0-9]+\.[0-9]+\.[0-9]+ \(git [0-9a-f]{7,}' "$tmp/version" || fail "ctrun --version: $(cat "$tmp/version")"
"$prefix/bin/ctstore" --version | grep -Eq '^ctstore [0-9.]+ \(git ' || fail "ctstore --version"
# After SCRIPT, --version belongs to the script (torchrun's REMAINDER semantics), not to ctrun.
remainder=$(timeout 60 "$prefix/bin/ctrun" --standalone --no-python sh -c 'echo "worker got: $1"' sh --version 2>&1)
grep -q 'worker got: --version' <<<"$remainder" || fail "ctrun SCRIPT --version: $remainder"
help=$("$prefix/bin/ctrun" --help)
for word in --version --nproc-per-node --standalone 'Exit status' PET_; do
  grep -q -- "$word" <<<"$help" || fail "ctrun --help does not mention $word"
done

run_job() {  # run_job NAME PROGRAM: 2 ranks under the installed ctrun; each rank must report a correct sum
  local name=$1 program=$2
  step "ctrun --nproc-per-node=2 --no-python $name"
  if ! timeout 120 "$prefix/bin/ctrun" --nproc-per-node=2 --no-python "$program" >"$tmp/$name.out" 2>&1; then
    cat "$tmp/$name.out"; fail "$name under ctrun"
  fi
  [ "$(grep -c 'all_reduce ok (3)' "$tmp/$name.out")" = 2 ] || { cat "$tmp/$name.out"; fail "$name: all_reduce"; }
  echo "$name: both ranks all_reduce ok"
}

step "find_package(ctrun): configure and build tests/pkg/consumer_cmake"
cmake -S "$src/tests/pkg/consumer_cmake" -B "$tmp/consumer_cmake" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release >"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; fail "consumer configure"; }
cmake --build "$tmp/consumer_cmake" >>"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; fail "consumer build"; }
run_job consumer_cmake "$tmp/consumer_cmake/consumer_cmake"
if [ -e "$prefix/lib/libctrun_comm_nccl.so" ]; then
  step "ctrun::comm_nccl registers the nccl backend by being linked"
  "$tmp/consumer_cmake/consumer_nccl_registered" || fail "linking ctrun::comm_nccl did not register nccl"
  readelf -d "$tmp/consumer_cmake/consumer_cmake" | grep -Eq 'NEEDED.*(cuda|nccl)' && fail "consumer_cmake needs CUDA"
fi

step "pkg-config ctrun: build tests/pkg/consumer_make"
mkdir -p "$tmp/consumer_make"
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" make -s -C "$tmp/consumer_make" \
  -f "$src/tests/pkg/consumer_make/Makefile" SRC="$src/tests/pkg/consumer_all_reduce.cpp" \
  >"$tmp/make.log" 2>&1 || { cat "$tmp/make.log"; fail "pkg-config consumer build"; }
run_job consumer_make "$tmp/consumer_make/consumer_make"
if [ -e "$prefix/lib/pkgconfig/ctrun-comm-nccl.pc" ]; then
  step "pkg-config ctrun-comm-nccl registers the nccl backend by being linked"
  export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
  # shellcheck disable=SC2046
  c++ -std=c++20 $(pkg-config --cflags ctrun-comm-nccl) -o "$tmp/nccl_pc" "$src/tests/pkg/consumer_nccl_registered.cpp" \
      $(pkg-config --libs ctrun-comm-nccl) -Wl,-rpath,"$prefix/lib" || fail "pkg-config ctrun-comm-nccl build"
  "$tmp/nccl_pc" || fail "linking ctrun-comm-nccl by pkg-config did not register nccl"
fi
echo "PASS"
