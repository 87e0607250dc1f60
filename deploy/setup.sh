#!/usr/bin/env bash
# Installs every Debian package that hetflow's build, tests and benchmarks need.
# Idempotent: packages already present are not reinstalled; apt-get update runs
# only when something is missing. Needs root (or sudo).
#
#   deploy/setup.sh            build + test dependencies
#   deploy/setup.sh --bench    also the benchmark peers (PyTorch, OpenMPI, pandas, iperf3)
set -euo pipefail

build_pkgs=(
  g++ cmake ninja-build pkg-config git
  libcaf-dev                      # CAF 0.17: actors, io middleman, openssl
  libcapnp-dev capnproto          # Cap'n Proto 0.9 wire format + compiler
  libtbb-dev                      # oneTBB 2021
  libboost-test-dev               # Boost.Test 1.74
  libtomlplusplus-dev             # topology files
  nlohmann-json3-dev              # planner profile files (JSON)
  libedit-dev                     # the actor shell's line editing
  libssl-dev                      # HMAC of the cluster secret (OpenSSL)
  libdnnl-dev                     # oneDNN 2.6 (CPU kernels)
  libucx-dev ucx-utils            # data plane (+ ucx_perftest)
  dataset-fashion-mnist           # IDX files under /usr/share/datasets/fashion-mnist
  procps psmisc iproute2 python3  # pgrep/ip and JSON checks in integration tests
  python3-yaml tmux               # deploy manifest checks; the shell's terminal test
  systemd                         # systemd-analyze verify of deploy/systemd's unit
)
bench_pkgs=(
  iperf3
  python3-torch libopenblas0-pthread python3-pandas
  libopenmpi-dev openmpi-bin
)

want=("${build_pkgs[@]}")
if [[ "${1:-}" == "--bench" ]]; then want+=("${bench_pkgs[@]}"); fi

missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#want[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
