#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The SPDX licence line of every tracked source file: `// SPDX-License-Identifier: Apache-2.0`
# (C, C++, CUDA, Go, JavaScript) or `# SPDX-License-Identifier: Apache-2.0` (Python, shell, CMake,
# TOML) as the first line, or the second after a shebang (#!).
#   scripts/spdx.sh           # add the line to every tracked source file that lacks it
#   scripts/spdx.sh --check   # list the files that lack it; exit 1 when any does (test lint.spdx)
# Sources: *.c *.h *.cpp *.hpp *.ipp *.cu *.cuh *.go *.mjs (//), *.py *.pyi *.sh *.cmake
# *.cmake.in CMakeLists.txt pyproject.toml and extensionless files with a shebang (#). Not data:
# fuzz corpora, docs/data/, tests' fixtures are left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-add}
case ${mode} in add | --check) ;; *) echo "usage: $0 [--check]" >&2 && exit 2 ;; esac
spdx='SPDX-License-Identifier: Apache-2.0'

# The comment leader of a source file, or nothing for a file that is not a source.
leader() {
  case $1 in
    fuzz/corpus/* | docs/data/*) ;;
    *.c | *.h | *.cpp | *.hpp | *.ipp | *.cu | *.cuh | *.go | *.mjs) echo '//' ;;
    *.py | *.pyi | *.sh | *.cmake | *.cmake.in | */CMakeLists.txt | CMakeLists.txt | */pyproject.toml) echo '#' ;;
    *) local base=${1##*/}
       if [[ ${base} != *.* && $(head -c 2 "$1") == '#!' ]]; then echo '#'; fi ;;
  esac
}

missing=0
while IFS= read -r -d '' file; do
  [[ -f ${file} && ! -L ${file} ]] || continue
  lead=$(leader "${file}")
  [[ -n ${lead} ]] || continue
  line="${lead} ${spdx}"
  first=$(head -n 1 "${file}")
  if [[ ${first} == '#!'* ]]; then
    at=2
    have=$(sed -n 2p "${file}")
  else
    at=1
    have=${first}
  fi
  [[ ${have} == "${line}" ]] && continue
  if [[ ${mode} == --check ]]; then
    echo "${file}:${at}: missing '${line}' (scripts/spdx.sh adds it)"
    missing=1
    continue
  fi
  tmp=$(mktemp)
  if ((at == 2)); then
    { printf '%s\n%s\n' "${first}" "${line}"; tail -n +2 "${file}"; } >"${tmp}"
  else
    { printf '%s\n' "${line}"; cat "${file}"; } >"${tmp}"
  fi
  cat "${tmp}" >"${file}"  # keeps the file's mode (scripts stay executable)
  rm -f "${tmp}"
done < <(git ls-files -z)
exit ${missing}
