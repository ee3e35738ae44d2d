#!/usr/bin/env bash
# GPU test, on a machine with a CUDA driver and device:
#   1. configure and build with Ninja (build dir: $BUILD_DIR, default build-gpu),
#   2. gpu-tests: run the gpu-labelled tests,
#   3. graphs: compile every graphs/*.yaml and run each bundle with --check (random params, so
#      the check compares real numbers), once plainly and once as a replayed CUDA graph,
#   4. twins: run every PyTorch twin (scripts/torch_twins/<graph>.py) when python3 has torch,
#   5. cpu-tests: run the rest of ctest.
# scripts/gpu-test.sh [STAGE...] runs only the named stages after the build (default: all four),
# to fit a short GPU lease; TEENY_CONFORMANCE_OPS (tests/test_gpu_conformance.cpp) narrows the
# conformance test. Every step's output goes to a log in $OUT (if set) or
# $BUILD_DIR/gpu-test-logs; a summary is printed at the end and written to summary.txt there.
# Exit status: 0 only if every step passed.
set -u -o pipefail

STAGES=("$@")
((${#STAGES[@]})) || STAGES=(gpu-tests graphs twins cpu-tests)
for stage in "${STAGES[@]}"; do
  case $stage in
    gpu-tests | graphs | twins | cpu-tests) ;;
    *) echo "gpu-test: unknown stage '$stage' (gpu-tests, graphs, twins, cpu-tests)" >&2; exit 1 ;;
  esac
done
wanted() { [[ " ${STAGES[*]} " == *" $1 "* ]]; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
LOGS=${OUT:-$BUILD/gpu-test-logs}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$LOGS" "$BUILD"

SUMMARY=()
FAILED=0

# step NAME COMMAND...: runs COMMAND with its output in $LOGS/NAME.log and records the result.
step() {
  local name=$1
  shift
  local log="$LOGS/$name.log" start status
  start=$(date +%s)
  echo "== $name: $*" | tee "$log"
  if "$@" >>"$log" 2>&1; then
    status=PASS
  else
    status="FAIL (exit $?)"
    FAILED=1
  fi
  SUMMARY+=("$(printf '%-44s %-14s %5ss' "$name" "$status" $(($(date +%s) - start)))")
  echo "   $status" 
  [[ $status == PASS ]]
}

skip() {
  SUMMARY+=("$(printf '%-44s %-14s' "$1" "SKIPPED ($2)")")
  FAILED=1
}

{
  date -u
  command -v nvidia-smi >/dev/null && nvidia-smi
  cmake --version | head -1
  ninja --version
  ${CXX:-c++} --version | head -1
} >"$LOGS/environment.log" 2>&1

if step configure cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
   step build ninja -C "$BUILD" -j "$JOBS"; then
  if wanted gpu-tests; then step ctest-gpu ctest --test-dir "$BUILD" -L gpu --output-on-failure; fi

  if wanted graphs; then
    mkdir -p "$BUILD/gpu-test-bundles"
    for graph in "$ROOT"/graphs/*.yaml; do
      name=$(basename "$graph" .yaml)
      bundle="$BUILD/gpu-test-bundles/$name.teeny"
      if step "compile-$name" "$BUILD/teeny" compile "$graph" -o "$bundle"; then
        step "run-$name-check" "$BUILD/teeny" run "$bundle" --check --init random --seed 1
        step "run-$name-check-cuda-graph" "$BUILD/teeny" run "$bundle" --check --cuda-graph \
          --iterations 3 --init random --seed 1
      else
        skip "run-$name" "compile failed"
      fi
    done
  fi
  if wanted twins; then
    if python3 -c "import torch" >/dev/null 2>&1; then
      for twin in "$ROOT"/scripts/torch_twins/*.py; do
        name=$(basename "$twin" .py)
        [[ -f "$ROOT/graphs/$name.yaml" ]] || continue  # shared modules, not twins
        step "twin-$name" env TEENY="$BUILD/teeny" python3 "$twin"
      done
      # The training twin's bf16 form (f32 master weights) as well.
      step twin-tiny_lm_train-bf16 env TEENY="$BUILD/teeny" python3 "$ROOT/scripts/torch_twins/tiny_lm_train.py" \
        --dtype bf16
    else
      skip twins "python3 has no torch"
    fi
  fi
  # Last: the CPU tests also run in CI, the steps above only here.
  if wanted cpu-tests; then step ctest-cpu ctest --test-dir "$BUILD" -LE gpu --output-on-failure -j "$JOBS"; fi
else
  skip tests "build failed"
fi

{
  echo
  echo "teeny GPU test summary ($(date -u '+%Y-%m-%d %H:%M UTC'), logs in $LOGS)"
  head -1 "$LOGS/environment.log"
  command -v nvidia-smi >/dev/null &&
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
  for line in "${SUMMARY[@]}"; do echo "$line"; done
  for suite in ctest-gpu ctest-cpu; do
    if [[ -f "$LOGS/$suite.log" ]]; then
      result=$(grep -E 'tests passed|tests failed' "$LOGS/$suite.log" | tail -1)
      skipped=$(grep -c -E '\*\*\*Skipped|Not Run' "$LOGS/$suite.log")
      echo "$suite: ${result:-no result line} ($skipped skipped)"
    fi
  done
  [[ $FAILED == 0 ]] && echo "RESULT: PASS" || echo "RESULT: FAIL"
} | tee "$LOGS/summary.txt"
exit $FAILED
