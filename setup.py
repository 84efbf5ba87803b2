"""`pip install .`: ctrun built by the project's CMake, installed into the environment pip runs in (pyproject.toml).

The wheel holds what a Python user of ctrun needs, laid out as `cmake --install` lays it out under a prefix, so the
programs find their companions relative to themselves (docs/install.md):
  bin/ctrun, bin/ctstore                      the launcher and the TCPStore daemon
  share/ctrun/python/sitecustomize.py         the workers' half of ctrun's stack dumps (docs/hang.md)
  share/ctrun/python/ctrun_store_relay.py     what it imports to use the node's store relay (docs/cli.md)
  share/ctrun/python/ctrun_warm.py            the warm process of --preload (docs/preload.md)
  share/ctrun/python/libctrun_exit_note.so    the workers' exit note (docs/cli.md "A finished program ...")
  <site-packages>/ctrun_torch*.so             `import ctrun_torch`: torch.distributed backend "ctrun"
  <site-packages>/ctrun_torch/checkpoint/     `import ctrun_torch.checkpoint`: in-memory checkpoints
ctrun_torch is built against the torch of the python that runs this build (sys.executable, -DCTRUN_TORCH_PYTHON):
the environment's own, whose ABI it must match. ctrun in an environment's bin/ starts its workers with that
environment's python (agent/launch/worker_python.hpp).

Cheap to repeat: only those targets are built (no tests, benchmarks or man pages), in build-pip/ of the source tree,
reused by the next `pip install .` (pip builds in place), and through ccache when it is installed.
Environment: CTRUN_PIP_BUILD_DIR (another build directory), CMAKE_BUILD_PARALLEL_LEVEL (jobs; default: all cores),
CTRUN_PIP_NO_TORCH=1 (install without ctrun_torch when the environment has no torch).
"""

import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("CTRUN_PIP_BUILD_DIR") or os.path.join(HERE, "build-pip")
TARGETS = ["ctrun", "ctstore", "ctrun_crypto", "ctrun_torch"]


def project_version():
    with open(os.path.join(HERE, "CMakeLists.txt"), encoding="utf-8") as f:
        return re.search(r"project\(ctrun VERSION ([0-9.]+)", f.read()).group(1)


def run(cmd):
    print("ctrun:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


class CMakeBuild(build_ext):
    """Builds the targets with CMake, then puts each file where the wheel wants it."""

    def run(self):
        configure = ["cmake", "-S", HERE, "-B", BUILD, "-DCMAKE_BUILD_TYPE=Release", "-DCTRUN_BUILD_TESTS=OFF",
                     "-DCTRUN_TORCH_PYTHON=" + sys.executable]
        if not os.path.exists(os.path.join(BUILD, "CMakeCache.txt")) and shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        print("ctrun:", " ".join(configure), flush=True)
        said = subprocess.run(configure, check=True, stdout=subprocess.PIPE, text=True).stdout
        print(said, flush=True)
        module = self._module_wanted(said)
        targets = TARGETS if module else [t for t in TARGETS if t != "ctrun_torch"]
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        run(["cmake", "--build", BUILD, "-j", jobs, "--target"] + targets)
        # Programs and Python files: install_data copies them from here (data_files below).
        for name in ("ctrun", "ctstore"):
            self._stage(os.path.join(BUILD, "bin", name), os.path.join(BUILD, "pip-data", "bin"))
        # ctrun's crypto module (a job secret, checkpoint digests), where ctrun looks for it: <prefix>/lib/ctrun/.
        self._stage(os.path.join(BUILD, "lib", "ctrun", "libctrun_crypto.so"),
                    os.path.join(BUILD, "pip-data", "lib", "ctrun"))
        for name in ("sitecustomize.py", "ctrun_store_relay.py", "ctrun_warm.py", "libctrun_exit_note.so"):
            self._stage(os.path.join(BUILD, "python", name), os.path.join(BUILD, "pip-data", "share", "ctrun", "python"))
        if not module:
            self.extensions = []
            return
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        self._stage(os.path.join(BUILD, "python", "ctrun_torch" + suffix),
                    os.path.dirname(os.path.abspath(self.get_ext_fullpath("ctrun_torch"))),
                    os.path.basename(self.get_ext_fullpath("ctrun_torch")))
        # ctrun_torch.checkpoint: the package folder the module names as its path (docs/checkpoint.md).
        shutil.copytree(os.path.join(BUILD, "python", "ctrun_torch"),
                        os.path.join(os.path.dirname(os.path.abspath(self.get_ext_fullpath("ctrun_torch"))),
                                     "ctrun_torch"), dirs_exist_ok=True)

    @staticmethod
    def _module_wanted(configure_output):
        # comm/torch/CMakeLists.txt says in one line whether it builds ctrun_torch, and if not, why.
        if "ctrun_torch: building against torch" in configure_output:
            return True
        if os.environ.get("CTRUN_PIP_NO_TORCH") == "1":
            print("ctrun: installing without ctrun_torch (CTRUN_PIP_NO_TORCH=1)", flush=True)
            return False
        raise SystemExit(
            "ctrun: the ctrun_torch module cannot be built for " + sys.executable + " (CMake's `ctrun_torch: "
            "skipped (...)` above says why). Install torch into this environment (or make the environment with "
            "--system-site-packages to use Debian's python3-torch), or set CTRUN_PIP_NO_TORCH=1 to install ctrun "
            "without the torch.distributed backend \"ctrun\".")

    @staticmethod
    def _stage(src, dest_dir, name=None):
        os.makedirs(dest_dir, exist_ok=True)
        shutil.copy2(src, os.path.join(dest_dir, name or os.path.basename(src)))


def staged(*parts):
    """A path under the build directory, relative to this file (setuptools wants data_files relative)."""
    return os.path.relpath(os.path.join(BUILD, "pip-data", *parts), HERE)


setup(
    version=project_version(),
    packages=[],  # no Python package: the repository's directories are C++ components
    py_modules=[],
    ext_modules=[Extension("ctrun_torch", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    data_files=[
        ("bin", [staged("bin", "ctrun"), staged("bin", "ctstore")]),
        ("lib/ctrun", [staged("lib", "ctrun", "libctrun_crypto.so")]),
        ("share/ctrun/python", [staged("share", "ctrun", "python", "sitecustomize.py"),
                                staged("share", "ctrun", "python", "ctrun_store_relay.py"),
                                staged("share", "ctrun", "python", "ctrun_warm.py"),
                                staged("share", "ctrun", "python", "libctrun_exit_note.so")]),
    ],
    # setuptools' own build/ would land in the CMake build directory of `make` (build/): keep it with ours.
    options={"build": {"build_base": os.path.relpath(os.path.join(BUILD, "setuptools"), HERE)}},
    zip_safe=False,
)
