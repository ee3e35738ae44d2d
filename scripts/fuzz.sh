#!/usr/bin/env bash
# Runs the libFuzzer targets (fuzz/, built by scripts/sanitize-test.sh) one after the other, each
# for SECONDS (default 60) over its checked-in seeds (fuzz/corpus/<target>/) and what earlier runs
# found (<build>/fuzz-corpus/<target>/), with fuzz/<target>.dict if there is one.
#   scripts/fuzz.sh                    every target, 60 s each
#   scripts/fuzz.sh 1800 spec expr     the named targets, 30 minutes each
# A crash, leak, sanitizer report, broken property, slow input (over 30 s) or a process over
# FUZZ_RSS_MB of memory (default 2048; long runs grow with their corpus) fails the target: the input is saved as <build>/fuzz-findings/<target>-<kind>-<sha1>,
# the report's first lines are printed, and the script exits 1 after running the rest.
# Replay one: <build>/fuzz/fuzz_<target> <file>. Environment: BUILD_DIR (default build-clang).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-clang}
SECONDS_EACH=${1:-60}
shift || true
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=(spec yaml expr npy safetensors bundle)

mkdir -p "$BUILD/fuzz-findings"
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
failed=()
summary=()
for target in "${TARGETS[@]}"; do
  binary="$BUILD/fuzz/fuzz_$target"
  if [[ ! -x $binary ]]; then
    echo "fuzz: error: $binary is not built (scripts/sanitize-test.sh builds it)" >&2
    exit 1
  fi
  corpus="$BUILD/fuzz-corpus/$target"
  log="$BUILD/fuzz-$target.log"
  mkdir -p "$corpus"
  dict=()
  [[ -f $ROOT/fuzz/$target.dict ]] && dict=(-dict="$ROOT/fuzz/$target.dict")
  echo "== fuzz_$target for ${SECONDS_EACH}s (log $log)"
  status=0
  "$binary" "$corpus" "$ROOT/fuzz/corpus/$target" "${dict[@]}" -max_total_time="$SECONDS_EACH" -timeout=30 \
    -rss_limit_mb="${FUZZ_RSS_MB:-2048}" -artifact_prefix="$BUILD/fuzz-findings/$target-" -print_final_stats=1 >"$log" 2>&1 ||
    status=$?
  # The last status line: "#N DONE cov: C ft: F corp: K/Sb ... exec/s: E".
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  execs=$(grep -oE '^stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
  rate=$(grep -oE '^stat::average_exec_per_sec: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
  cov=$(grep -oE 'cov: [0-9]+' <<<"$last" | tail -1 || true)
  corp=$(grep -oE 'corp: [0-9]+/[0-9]+[a-zA-Z]*' <<<"$last" | tail -1 || true)
  if ((status)); then
    failed+=("$target")
    artifact=$(grep -oE "Test unit written to .*" "$log" | sed 's/Test unit written to //' | tail -1 || true)
    summary+=("$(printf '%-12s FAILED (exit %d)  %s execs  %s/s  %s  %s\n  input: %s' "$target" "$status" \
      "$execs" "$rate" "$cov" "$corp" "${artifact:-none written; see $log}")")
    echo "fuzz_$target FAILED; the report, and its stack in teeny's sources:"
    awk '!found && /runtime error|terminate called|property failed|^==[0-9]+== ?ERROR/ { found = 1 }
         !found { next }
         /^MS: |^SUMMARY|^artifact_prefix/ { exit }
         /^ *#[0-9]+ / {  # a frame in teeny: "#N function (shortened) file:line"
           if ($NF ~ /\/(core|ops|cli|fuzz)\/[A-Za-z0-9_]+\.(cpp|h):[0-9]+/ && frames++ < 8) {
             function_name = $0; sub(/^ *#[0-9]+ 0x[0-9a-f]+ in /, "", function_name); sub(/ [^ ]+$/, "", function_name)
             printf "    %s %s %s\n", $1, substr(function_name, 1, 60), $NF
           }
           next
         }
         { if (lines++ < 6) print }' "$log"
  else
    summary+=("$(printf '%-12s ok  %s execs  %s/s  %s  %s' "$target" "$execs" "$rate" "$cov" "$corp")")
  fi
done

echo "== fuzz summary (${SECONDS_EACH}s each)"
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}; inputs in $BUILD/fuzz-findings/" >&2
  exit 1
fi
