#!/usr/bin/env bash
# clang-format check and clang-tidy over sluice's own sources, using the dev build's
# compile_commands.json. Run by the test suite (format) and by hand (tidy: slow).
#   scripts/lint.sh format      # exit 1 when a file is not formatted
#   scripts/lint.sh tidy [DIR [FILE...]]  # clang-tidy on src/ and examples/, or on FILEs (DIR: a
#                                         # configured build, default build/dev)
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
      mapfile -t sources < <(git ls-files 'src/*.cpp' 'examples/*.cpp')
    fi
    # The dev build is GCC's; Asio 1.18 detects coroutines on GCC only, so tell clang-tidy.
    clang-tidy -p "${2:-build/dev}" --quiet --extra-arg=-DBOOST_ASIO_HAS_CO_AWAIT=1 \
      --extra-arg=-DBOOST_ASIO_HAS_STD_COROUTINE=1 "${sources[@]}" ;;
  *) echo "usage: $0 format|fix|tidy" >&2; exit 2 ;;
esac
