#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# clang-format check and clang-tidy over sluice's own sources, using the dev build's
# compile_commands.json. Run by the test suite (format, and tidy one source per test).
#   scripts/lint.sh format      # exit 1 when a file is not formatted
#   scripts/lint.sh tidy [DIR [FILE...]]  # clang-tidy on src/ and examples/, or on FILEs (DIR: a
#                                         # configured build, default build/dev)
#   scripts/lint.sh sizes     # exit 1 when a file in include/ or src/ has more than 800 lines
#                             # (no function over 150 lines: readability-function-size in .clang-tidy)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-format}
mapfile -t files < <(git ls-files '*.hpp' '*.cpp' '*.cuh' '*.cu' | grep -v '^tests/compile_fail/')
case "$mode" in
  format) clang-format --dry-run -Werror "${files[@]}" ;;
  fix) clang-format -i "${files[@]}" ;;
  tidy)
    if (($# > 2)); then
      sources=("${@:3}")
    else
      mapfile -t sources < <(git ls-files 'src/*.cpp' 'examples/*.cpp' | grep -v '/unity\.cpp$')
    fi
    # A source that passed before with the same input is not checked again (scripts/tidy.py).
    exec scripts/tidy.py "${2:-build/dev}" "${sources[@]}" ;;
  sizes)
    max_lines=800
    mapfile -t tracked < <(git ls-files include src)
    over=0
    for file in "${tracked[@]}"; do
      lines=$(awk 'END { print NR }' "$file")  # NR: a last line without its newline counts too
      if ((lines > max_lines)); then
        echo "$file: $lines lines, more than $max_lines: split it into translation units (or headers) by topic"
        over=1
      fi
    done
    exit $over ;;
  *) echo "usage: $0 format|fix|tidy|sizes" >&2; exit 2 ;;
esac
