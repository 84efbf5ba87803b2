#!/bin/bash
# Issue 25: `pip install .` as a Python user does it. A venv made with `python3 -m venv --system-site-packages`
# (Debian's torch), `pip install --no-build-isolation .` from a clean clone of the repository's HEAD, then the
# venv's ctrun runs a 2-rank torch job on backend "ctrun" while python3 on PATH has no torch and nothing else is
# set (no PYTHON_EXEC, no PYTHONPATH, no activated venv): ctrun must start its workers with the venv's python,
# which finds the venv's ctrun_torch. Skips (77) without venv/pip/setuptools/wheel or torch.
# It is a second build of ctrun, ctstore and ctrun_torch (only those: setup.py), in $tmp/src/build-pip: through
# ccache it reuses the objects of the build this test belongs to (make test builds it just before), since the
# project's compiler launcher makes paths under each source tree relative to the build directory, at the same depth
# here (CMakeLists.txt). Prints how long pip took and ccache's hits and misses during it.
# usage: pip_venv_test.sh SOURCE_DIR TORCH_PYTHON
set -euo pipefail
src=$(realpath "$1"); py=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
step() { echo "--- $*"; }

"$py" -c 'import torch' 2>/dev/null || skip "$py has no torch (apt-get install python3-torch)"
git -C "$src" rev-parse --verify -q HEAD >/dev/null || skip "$src is not a git checkout"
tmp=$(mktemp -d /tmp/ctrun-pip-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

step "venv --system-site-packages, and a python3 without torch for PATH"
"$py" -m venv --system-site-packages --without-pip "$tmp/venv" || skip "$py -m venv failed (apt-get install python3-venv)"
{ "$tmp/venv/bin/python3" -c 'import setuptools, wheel' && "$tmp/venv/bin/python3" -c 'import pip'; } 2>/dev/null ||
  skip "no pip/setuptools/wheel for $py (apt-get install python3-pip python3-setuptools python3-wheel)"
"$py" -m venv --without-pip "$tmp/bare" || skip "$py -m venv failed"
bare_path="$tmp/bare/bin:$PATH"
if PATH=$bare_path python3 -c 'import torch' 2>/dev/null; then fail "python3 on the test's PATH has torch"; fi

step "git clone $src (HEAD $(git -C "$src" rev-parse --short HEAD)); pip install --no-build-isolation ."
git clone -q "$src" "$tmp/src"
start=$(date +%s%N)
# ccache's counters for this build alone: a statistics log of its own (ccache >= 4.5; ignored where older)
if ! (cd "$tmp/src" && env -u PYTHONPATH -u PYTHON_EXEC CCACHE_STATSLOG="$tmp/ccache.stats" \
      "$tmp/venv/bin/python3" -m pip install --no-build-isolation --no-index -v . >"$tmp/pip.log" 2>&1); then
  tail -60 "$tmp/pip.log"; fail "pip install"
fi
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "pip install took $((ms / 1000)).$(( ms % 1000 / 100 )) s"
if [ -s "$tmp/ccache.stats" ]; then
  echo "ccache during pip install: $(grep -cE '^(direct|preprocessed)_cache_hit$' "$tmp/ccache.stats") hits," \
       "$(grep -cx cache_miss "$tmp/ccache.stats") misses"
fi
grep -E '^ctrun: |ctrun_torch: ' "$tmp/pip.log" | head -5 || true
for f in bin/ctrun bin/ctstore share/ctrun/python/sitecustomize.py share/ctrun/python/ctrun_warm.py; do
  [ -e "$tmp/venv/$f" ] || fail "not installed: $f"
done
[ -x "$tmp/venv/bin/ctrun" ] && [ -x "$tmp/venv/bin/ctstore" ] || fail "bin/ctrun, bin/ctstore not executable"
module=$("$tmp/venv/bin/python3" -c 'import ctrun_torch; print(ctrun_torch.__file__)') || fail "import ctrun_torch"
case $module in "$tmp/venv/"*) ;; *) fail "ctrun_torch is not the venv's: $module" ;; esac
"$tmp/venv/bin/ctstore" --version | grep -q '^ctstore ' || fail "ctstore --version"

step "the venv's ctrun, PATH's python3 without torch, nothing set"
# (Which python ctrun chose, and that it says so, is checked by agent.Torch.MissingTorchNamesThePythonThatHasIt and
# agent.WorkerPython*; here the workers print their sys.executable and where ctrun_torch came from.)
if ! env -u PYTHONPATH -u PYTHON_EXEC -u VIRTUAL_ENV PATH="$bare_path" \
     timeout 180 "$tmp/venv/bin/ctrun" --nproc-per-node=2 "$src/tests/pkg/pip_worker.py" >"$tmp/job.out" 2>&1; then
  cat "$tmp/job.out"; fail "the job failed"
fi
cat "$tmp/job.out"
[ "$(grep -c "all_reduce ok (3) python $tmp/venv/bin/python3 module $tmp/venv/.*ctrun_torch.* PYTHON_EXEC=None" \
     "$tmp/job.out")" = 2 ] || fail "both ranks: all_reduce on backend ctrun with the venv's python and module"
echo "PASS"
