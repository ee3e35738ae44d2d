#!/usr/bin/env bash
# Fails when a tracked C++/CUDA file is not formatted as .clang-format says (clang-format 14 or
# later, as Debian 12 ships). Exit 77 (CTest's skip) when clang-format is not installed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! command -v clang-format >/dev/null; then
  echo "format-check: skipped: clang-format is not installed (apt-get install clang-format)"
  exit 77
fi
git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | xargs clang-format --dry-run --Werror
