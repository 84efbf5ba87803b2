# Thin wrapper around CMake/CTest. The two contract commands are `make run` and `make test`.
#   make run                 install missing deps, build (Release), run the demo under ctrun
#   make test                install missing deps; build, and build or reuse the torch 2.6 chroot (make torch2)
#                            side by side; run every test through ctest
#   make torch2              the torch 2.6 chroot (scripts/torch2_chroot.sh prepare: root, ~1.3 GB, 3-10 min the
#                            first time, seconds after) and ctrun_torch built against torch 2.6 (build-torch2/);
#                            where it cannot be made it says why and the torch2.* tests skip. CTRUN_TORCH2=0: skip.
#   make BUILD_TYPE=Debug test       other build types: Debug, RelWithDebInfo
#   make asan | tsan         the tests under ASan+UBSan / TSan (build-asan/, build-tsan/)
#   make fuzz                build and briefly run the store codec fuzzer (clang + libFuzzer)
#   make bench               build the benchmarks (see docs/benchmarks.md for how each is run)
#   make bench-drift         launch of 8 no-op workers and a restart against their bounds (LAUNCH_MAX_MS=15,
#                            RESTART_MAX_MS=4): exits 1 when either median drifts past; meaningful on a quiet machine
#   make bench-kill9         kill -9 of an active agent to the next round's first collective on the survivor and a
#                            spare: ctrun (c10d, etcd) vs torch 2.6's torchrun (chroot); KILL9_REPEATS=3, ~6 min
#   make torch-dist-suite    PyTorch's whole distributed_test.py on backend "ctrun" (TORCH_SUITE_BACKEND=gloo for
#                            the reference run; about 20 s per test on a loaded 2-core machine: see docs/comm.md)
#   make torch2-dist-parity  one-off: PyTorch 2.6's distributed_test.py collective/p2p subset on gloo and on
#                            "ctrun" (torch 2.6 chroot); lists what passes with gloo and not with ctrun (docs/comm.md)
#   make teardown-soak       issue 42's program (DDP, fp16 hook, torch's gloo, 3 ranks) TEARDOWN_RUNS=20 times under
#                            ctrun on torch 1.13 and on torch 2.6 (chroot): each run exits 0, each abort in native
#                            teardown said so (`make test` runs 4 of each: agent.teardown.fp16_*); ~2 + ~6 min

BUILD_TYPE ?= Release
BUILD_DIR  ?= build
JOBS       ?= $(shell nproc)
CTEST_JOBS ?= 2
CMAKE_ARGS ?=
PYTHON     ?= /usr/bin/python3

.PHONY: all deps configure build run test asan tsan fuzz bench bench-drift bench-kill9 format clean torch-dist-suite \
        torch2 torch2-dist-parity teardown-soak

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	@bash scripts/demo.sh $(BUILD_DIR)

# The build and the torch 2.6 chroot side by side: making the chroot the first time is mostly waiting for Debian's
# mirror and the disk (debootstrap, apt), which the compiler's minutes hide.
test:
	@$(MAKE) --no-print-directory -j2 build torch2
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(CTEST_JOBS) --timeout 600

# A make step, not a test: the first build of the chroot takes minutes (ctest's limits are for tests). One lock
# (/opt/torch2-chroot.lock) serialises building and mounting across clones; see scripts/torch2_chroot.sh. It needs
# nothing of the host build (build-torch2/ is its own), only the host's packages.
torch2: deps
	@bash scripts/torch2_chroot.sh prepare $(BUILD_DIR)/torch2-status

asan:
	@$(MAKE) test BUILD_DIR=build-asan BUILD_TYPE=Debug CMAKE_ARGS="-DCTRUN_SANITIZE=address,undefined $(CMAKE_ARGS)"

tsan:
	@TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp $(TSAN_OPTIONS)" $(MAKE) test BUILD_DIR=build-tsan BUILD_TYPE=Debug CMAKE_ARGS="-DCTRUN_SANITIZE=thread $(CMAKE_ARGS)"

fuzz: deps
	@cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_C_COMPILER=clang -DCTRUN_BUILD_FUZZERS=ON -DCTRUN_BUILD_TESTS=OFF >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target store_codec_fuzzer
	@mkdir -p fuzz-corpus && ./build-fuzz/bin/store_codec_fuzzer -max_total_time=60 fuzz-corpus

bench: build

LAUNCH_MAX_MS  ?= 15
RESTART_MAX_MS ?= 4
bench-drift: build
	@$(BUILD_DIR)/bin/launch_bench --runs 60 --no-torchrun --max-ms $(LAUNCH_MAX_MS)
	@$(BUILD_DIR)/bin/restart_bench --restarts 10 --repeat 6 --no-torchrun --max-ms $(RESTART_MAX_MS)

KILL9_REPEATS ?= 3
bench-kill9: build
	@$(PYTHON) apps/bench/kill9_bench/kill9_bench.py --ctrun $(BUILD_DIR)/bin/ctrun --repeats $(KILL9_REPEATS)

TORCH_SUITE_BACKEND ?= ctrun
torch-dist-suite: build
	@PYTHONPATH=$(CURDIR)/$(BUILD_DIR)/python $(PYTHON) tests/comm/torch/run_dist_suite.py \
	  --backend $(TORCH_SUITE_BACKEND) --subset all --json $(BUILD_DIR)/torch-dist-suite-$(TORCH_SUITE_BACKEND).json

torch2-dist-parity: torch2
	@$(PYTHON) tests/torch2/dist_suite_parity26.py

TEARDOWN_RUNS ?= 20
teardown-soak: build torch2
	@# 77: skipped (no torch, no chroot: it says why)
	@CTRUN_BIN=$(BUILD_DIR)/bin/ctrun CTRUN_TORCH_PYTHON=$(PYTHON) \
	  $(PYTHON) tests/agent/teardown/teardown_torch_test.py torch113 $(TEARDOWN_RUNS) || [ $$? = 77 ]
	@TORCH2_STATUS=$(BUILD_DIR)/torch2-status \
	  $(PYTHON) tests/agent/teardown/teardown_torch_test.py torch26 $(TEARDOWN_RUNS) --ctrun $(BUILD_DIR)/bin/ctrun \
	  || [ $$? = 77 ]

format:
	@git ls-files '*.cpp' '*.hpp' | xargs clang-format -i

clean:
	@rm -rf build build-asan build-tsan build-fuzz build-torch2

# Debian packages from the build directory (cmake/package.cmake): build/ctrun_<version>-1_<arch>.deb
# (+ ctrun-nccl_... in CUDA builds). make install PREFIX=DIR installs into DIR (default /usr/local).
PREFIX ?= /usr/local
.PHONY: install deb
install: build
	@cmake --install $(BUILD_DIR) --prefix $(PREFIX)

deb: build
	@cd $(BUILD_DIR) && cpack -G DEB
