#!/usr/bin/env bash
# Installs the Debian packages ctrun needs to build and test, and only those that are missing.
# Idempotent: a second run finds everything present and does nothing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  ccache                    # CMakeLists.txt uses it when present: rebuilds across clones and worktrees are cheap
  libboost1.81-dev          # Asio, Process v2
  libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev
  clang libclang-rt-14-dev  # libFuzzer target for the store codec
  python3-torch             # the real PyTorch peer for interop tests (torch 1.13)
  libtorch-dev pybind11-dev python3-dev  # comm/torch: the torch.distributed backend "ctrun" (ctrun_torch module)
  python3-venv python3-pip python3-setuptools python3-wheel  # `pip install .` (setup.py) and its test in a venv
  procps iproute2
  openssh-server openssh-client  # ctrun --hostfile fan-out; its tests run sshd in network namespaces
  slurm-wlm munge openmpi-bin    # the Slurm (slurmctld/slurmd/munged) and mpirun tests of agent/cluster/
  help2man                  # man pages of ctrun and ctstore from their --help (make deb, make install)
  etcd-server etcd-client   # the etcd rendezvous backend's tests and benchmark (client: debugging)
  libssl-dev openssl        # etcd over https (Asio ssl), test certificates; the job secret's HMAC
  zlib1g-dev                # checkpoint digests (CRC-32, in ctrun's crypto module)
  prometheus                # promtool and a real Prometheus server for the metrics tests
  chromium                  # the job's page opened in a real (headless) browser by its tests
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
