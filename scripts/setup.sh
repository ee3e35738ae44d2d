#!/usr/bin/env bash
# Set-up on a fresh machine: installs the Debian packages teeny builds with (only those that
# are missing; clang, its sanitizer and libFuzzer runtimes and llvm-symbolizer are for
# scripts/sanitize-test.sh and scripts/fuzz.sh), checks for the CUDA toolkit (NVRTC, CUPTI,
# cuda.h; the driver itself is loaded at run time and is not needed to build), then configures
# and builds into build/ with g++.
#   scripts/setup.sh              build everything (teeny and the tests)
#   scripts/setup.sh teeny        build only the named Ninja targets
# Environment: BUILD_DIR (default build), JOBS (default: number of cores), TEENY_WERROR=ON
# (warnings are errors, as in CI).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
JOBS=${JOBS:-$(nproc)}

PACKAGES=(g++ cmake ninja-build libyaml-cpp-dev libcli11-dev libfmt-dev nlohmann-json3-dev
          libssl-dev libgtest-dev clang-format clang libclang-rt-dev llvm)
missing=()
for package in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo=sudo
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
fi

if ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc && -z ${CUDAToolkit_ROOT:-} ]]; then
  echo "setup: error: no CUDA toolkit found (nvcc on PATH, /usr/local/cuda, or CUDAToolkit_ROOT);" >&2
  echo "setup: teeny needs its NVRTC, CUPTI and cuda.h to build" >&2
  exit 1
fi

cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTEENY_WERROR="${TEENY_WERROR:-OFF}"
targets=()
(($#)) && targets=(--target "$@")
cmake --build "$BUILD" -j "$JOBS" "${targets[@]}"
