#!/usr/bin/env bash
# The hardening build (docs/hardening.md): configures and builds build-clang/ with clang,
# AddressSanitizer + UndefinedBehaviorSanitizer and the libFuzzer targets (TEENY_SANITIZE,
# TEENY_FUZZ), then runs the CPU tests under the sanitizers; any sanitizer report fails its test.
# scripts/fuzz.sh then runs the fuzz targets from the same build. Run scripts/setup.sh once first
# on a fresh machine (it installs clang and its runtimes).
# Environment: BUILD_DIR (default build-clang), JOBS (default: number of cores), TEENY_WERROR=ON
# (warnings are errors, as in CI).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-clang}
JOBS=${JOBS:-$(nproc)}

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTEENY_SANITIZE=ON -DTEENY_FUZZ=ON -DTEENY_WERROR="${TEENY_WERROR:-OFF}" "${launcher[@]}"
# Not `all`: kernel_check (nvcc) and the PTX snapshot tool gain nothing from the sanitizers.
cmake --build "$BUILD" -j "$JOBS" --target teeny teeny_tests fuzz

echo "== CPU tests under ASan+UBSan ($BUILD)"
# halt_on_error: the first report fails the test (UBSan already aborts: -fno-sanitize-recover).
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$BUILD" -LE gpu --output-on-failure -j "$JOBS"
