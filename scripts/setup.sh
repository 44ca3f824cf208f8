#!/usr/bin/env bash
# scripts/setup.sh — install every Debian package the project needs, configure a Release tree and
# build what a run needs: dd-node and dd-chaos (the README's first command). With --all it
# builds every target too (tests, fuzz seeds, benchmarks, the GPU check); scripts/test.sh
# (what CI runs) builds every target itself before running the tests.
# (The clang sanitizer tree build-clang is configured and built by scripts/sanitize.sh.)
#
# Idempotent: re-running only installs what is missing and rebuilds what changed.
# Usage: scripts/setup.sh [--all] [build-dir]        (default: build)
# Environment:
#   DD_WERROR=ON     treat warnings as errors (CI sets this)
#   DD_CUDA=AUTO|ON|OFF   build the CUDA backend (AUTO: when /usr/local/cuda/bin/nvcc exists)
#   DD_JOBS=N        parallel build jobs (default: number of cores)
set -euo pipefail

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  sed -n '2,13p' "${BASH_SOURCE[0]}"
  exit 0
fi
all=0
if [[ "${1:-}" == "--all" ]]; then
  all=1
  shift
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$here/build}"

packages=(
  build-essential cmake pkg-config
  libcaf-dev                       # C++ Actor Framework 0.17.6
  capnproto libcapnp-dev           # Cap'n Proto 0.9.2 (schemas, codec)
  libopenblas-dev                  # CPU BLAS for matrix products
  libfmt-dev                       # formatting
  liblua5.4-dev                    # experiment DSL
  nlohmann-json3-dev               # JSON (summaries, safetensors headers)
  libcpp-httplib-dev               # the nodes' HTTP listener (/metrics, /status)
  prometheus                       # promtool: tests check /metrics and the example alert rules
  libgtest-dev libgmock-dev        # tests
  libssl-dev                       # OpenSSL: join token HMAC, mutual TLS (actors/link/), CAF's module
  openssl                          # trust_process_test: s_client without a certificate; docs' `openssl rand`
  zlib1g-dev                       # CRC32 for checkpoint files; gzip IDX images
  patchelf                         # tools/gpu_check/make_bundle.sh: the bundle's $ORIGIN run paths
  libsentencepiece-dev             # subword tokenizer (dd-node tokenize, data.tokenizer)
  systemd                          # systemd-analyze: systemd_units_test checks examples/systemd/
  slurm-wlm munge                  # slurm_cluster_test: a single-node Slurm started by the test
  libxxhash-dev                    # XXH3: the digest of a global value (divergence detection)
  iproute2                         # `ip netns`, veth, bridge: tests/cluster (minimal images lack it)
  python3-matplotlib               # `dd-node plot` (tools/plot/dd_plot.py, run by /usr/bin/python3)
  libjs-chart.js                   # the status page's charts, compiled into dd-node (MIT)
  chromium                         # status_page_browser_test: the page in headless Chromium
  # The sanitizer/fuzz tree (scripts/sanitize.sh) and the linters (scripts/lint.sh), clang 14:
  clang libclang-rt-14-dev         # clang++, ASan/UBSan/libFuzzer runtimes
  libomp-dev                       # OpenMP for clang (libomp)
  llvm                             # llvm-symbolizer: sanitizer stacks with file:line
  clang-format clang-tidy          # scripts/lint.sh
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

jobs="${DD_JOBS:-$(nproc)}"
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DDD_WERROR="${DD_WERROR:-OFF}" -DDD_CUDA="${DD_CUDA:-AUTO}"
if [[ "$all" == 1 ]]; then
  cmake --build "$build" -j"$jobs"
  echo "setup: built every target into $build/bin"
else
  cmake --build "$build" -j"$jobs" --target dd-node dd-chaos
  echo "setup: built dd-node and dd-chaos into $build/bin (scripts/setup.sh --all or scripts/test.sh builds the rest)"
fi
