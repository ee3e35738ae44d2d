#!/usr/bin/env bash
# Builds everything (scripts/setup.sh) and runs the test suite with CTest. Tests labelled `gpu`
# run first; without a CUDA driver and device they skip, and the reasons are printed. Then the
# CPU tests run. Exit status: non-zero if any test failed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
JOBS=${JOBS:-$(nproc)}

"$ROOT/scripts/setup.sh"

echo "== GPU tests (label gpu)"
gpu_log="$BUILD/gpu-tests.log"
gpu_status=0
ctest --test-dir "$BUILD" -L gpu --output-on-failure -V >"$gpu_log" 2>&1 || gpu_status=$?
# gtest prints "<file>:<line>: Skipped" and then the reason; count each reason once.
skips=$(grep -h -A1 ': Skipped$' "$gpu_log" | grep -v -e ': Skipped$' -e '^--$' | sed 's/^[0-9]*: //' |
        sort | uniq -c || true)
if [[ -n $skips ]]; then
  echo "skipped GPU tests (count, reason):"
  echo "$skips"
fi
grep -E 'tests passed|tests failed|No tests were found' "$gpu_log" || true
if ((gpu_status)); then
  echo "GPU tests failed; their output is in $gpu_log:"
  grep -E '\*\*\*Failed|Failure|FAILED' "$gpu_log" | head -50 || true
fi

echo "== CPU tests"
cpu_status=0
ctest --test-dir "$BUILD" -LE gpu --output-on-failure -j "$JOBS" || cpu_status=$?
exit $((gpu_status || cpu_status))
