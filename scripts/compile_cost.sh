#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What an embedder pays to compile against sluice: wall seconds and peak memory of one
# translation unit per public entry header, and of a translation unit that serves its own store
# type with s3::server (tests/compile_cost/own_store_server.cpp), each at -O2 with g++ (or $CXX).
# Prints a Markdown table (HACKING.md, "What a translation unit costs").
#   scripts/compile_cost.sh            # uses the source tree's include/
set -euo pipefail
cd "$(dirname "$0")/.."
cxx=${CXX:-g++}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

flags=(-std=c++20 -O2 -Iinclude -DBOOST_ALL_NO_LIB -c)
measure() {  # measure LABEL SOURCE
  /usr/bin/time -f "%e %M" -o "$work/time" "$cxx" "${flags[@]}" "$2" -o "$work/out.o"
  read -r seconds kib <"$work/time"
  printf '| %s | %s | %d |\n' "$1" "$seconds" $((kib / 1024))
}

echo "| translation unit ($cxx -O2) | seconds | peak MiB |"
echo "|---|---:|---:|"
for header in sluice/sluice.hpp sluice/s3/server.hpp sluice/s3/client.hpp sluice/s3/any_store.hpp \
  sluice/s3/gateway_store.hpp sluice/fabric/s3_plane.hpp sluice/cuda/s3.hpp sluice/file/transport.hpp; do
  [[ -f include/$header ]] || continue
  echo "#include <$header>" >"$work/tu.cpp"
  measure "\`#include <$header>\`" "$work/tu.cpp"
done
measure "a store of its own served by \`s3::server\` (tests/compile_cost/own_store_server.cpp)" \
  tests/compile_cost/own_store_server.cpp
