#!/bin/bash
# Issue 16: the Debian package. Builds it by CPack from the already-built tree (as `make deb`, into a temporary
# directory), inspects it (dpkg-deb -I / -c: name, version, declared dependencies, contents), lets apt resolve
# its dependencies against this machine's bookworm archive (apt-get install --simulate: nothing is installed),
# unpacks it into a throw-away root with dpkg --root and runs the installed ctrun from there. Installing it on this
# machine for real (apt install ./ctrun_*.deb) is not done: the machine is shared; apt's simulation covers the
# dependency resolution.
# usage: deb_test.sh BUILD_DIR
set -euo pipefail
build=$(realpath "$1")
tmp=$(mktemp -d /tmp/ctrun-deb-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v cpack >/dev/null && command -v dpkg-deb >/dev/null || { echo "SKIP: cpack or dpkg-deb missing"; exit 77; }

echo "--- cpack -G DEB"
cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/out" >"$tmp/cpack.log" 2>&1 || { cat "$tmp/cpack.log"; fail cpack; }
deb=$(ls "$tmp"/out/ctrun_*.deb 2>/dev/null | head -1)
[ -n "$deb" ] || { cat "$tmp/cpack.log"; fail "no ctrun_*.deb"; }
echo "built $(basename "$deb") ($(du -k "$deb" | cut -f1) KiB)"

echo "--- dpkg-deb -I"
dpkg-deb -I "$deb" | tee "$tmp/info"
grep -q '^ Package: ctrun$' "$tmp/info" || fail "package name"
grep -Eq '^ Version: [0-9]+\.[0-9]+\.[0-9]+-1$' "$tmp/info" || fail "version"
depends=$(sed -n 's/^ Depends: //p' "$tmp/info")
for lib in libc6 libstdc++6 libspdlog libfmt; do
  case "$depends" in *"$lib"*) ;; *) fail "Depends lacks $lib: $depends";; esac
done
case "$depends" in *cuda*|*nccl*) fail "ctrun must not depend on CUDA: $depends";; esac

echo "--- dpkg-deb -c"
dpkg-deb -c "$deb" >"$tmp/contents.long"
awk '{print $6}' "$tmp/contents.long" >"$tmp/contents"
for f in ./usr/bin/ctrun ./usr/bin/ctstore ./usr/lib/libctrun_comm.so.0 ./usr/lib/libctrun_store.so.0 ./usr/lib/ctrun/libctrun_etcd_tls.so ./usr/lib/ctrun/libctrun_crypto.so \
         ./usr/include/ctrun/comm/process_group.hpp ./usr/lib/cmake/ctrun/ctrunConfig.cmake \
         ./usr/lib/pkgconfig/ctrun.pc ./usr/share/doc/ctrun/install.md; do
  grep -qx -- "$f" "$tmp/contents" || fail "$f not in the package"
done
if grep -q 'libctrun_comm_nccl' "$tmp/contents"; then fail "the CUDA backend belongs to ctrun-nccl"; fi
if command -v help2man >/dev/null; then grep -qx './usr/share/man/man1/ctrun.1.gz' "$tmp/contents" || fail "man page"; fi
nccl_deb=$(ls "$tmp"/out/ctrun-nccl_*.deb 2>/dev/null | head -1 || true)
if [ -n "$nccl_deb" ]; then
  dpkg-deb -I "$nccl_deb" >"$tmp/nccl.info"
  dpkg-deb -c "$nccl_deb" >"$tmp/nccl.contents"
  grep -q '^ Depends: ctrun (= ' "$tmp/nccl.info" || fail "ctrun-nccl must depend on ctrun"
  grep -q 'libctrun_comm_nccl.so' "$tmp/nccl.contents" || fail "ctrun-nccl lacks its library"
  echo "ctrun-nccl: $(basename "$nccl_deb")"
fi

echo "--- apt-get install --simulate ./$(basename "$deb")"
if command -v apt-get >/dev/null; then
  if apt-get install --simulate -q "$deb" >"$tmp/apt.log" 2>&1; then
    grep -E '^(Inst|Conf) ' "$tmp/apt.log" || true
  else
    cat "$tmp/apt.log"; fail "apt cannot install the package's dependencies"
  fi
fi

echo "--- dpkg --root (throw-away root)"
root=$tmp/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/triggers"
: >"$root/var/lib/dpkg/status"; : >"$root/var/lib/dpkg/available"
# --unpack: the empty root has none of the dependencies (apt resolved them above) and no shell to run the
# postinst (ldconfig) in; running it outside the root would touch this machine's ld.so.cache.
dpkg --root="$root" --log=/dev/null --force-depends --unpack "$deb" \
  >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg --unpack into a throw-away root"; }
dpkg --root="$root" -s ctrun >"$tmp/status" 2>&1 || true
grep -q '^Status: install ok unpacked' "$tmp/status" || { cat "$tmp/dpkg.log" "$tmp/status"; fail "not unpacked in the throw-away root"; }
LD_LIBRARY_PATH="$root/usr/lib" "$root/usr/bin/ctrun" --version | tee "$tmp/version"
grep -Eq '^ctrun [0-9.]+ \(git ' "$tmp/version" || fail "installed ctrun --version"
readelf -d "$root/usr/lib/libctrun_comm.so.0" | grep -q 'SONAME.*libctrun_comm.so.0' || fail "installed SONAME"
echo PASS
