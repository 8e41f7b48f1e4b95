# SPDX-License-Identifier: Apache-2.0
# ccache as the compiler launcher (SLUICE_CCACHE, on by default for the top-level project) when it
# is installed and the user set no launcher of their own (CMAKE_<LANG>_COMPILER_LAUNCHER, as a
# cache variable or an environment variable).
#
# The cache is shared between clones in different folders (CI's fresh checkouts, worktrees):
# - CCACHE_BASEDIR = the source folder, so ccache rewrites the absolute paths under it (sources,
#   -I, -MF) into paths relative to the build folder before hashing; build trees inside the
#   source folder (build/<preset>) then give the same relative paths in every clone.
# - -fdebug-prefix-map=<source>=. , so the debug info does not name the clone's folder; with it
#   (and base_dir matching the build folder) ccache leaves the working directory out of the hash
#   (ccache(1), hash_dir), which it otherwise includes whenever -g is given.
# ccache 4.7 (Debian 12) reads its settings from the environment or its config file only, hence
# `cmake -E env` in front of it.
if(NOT SLUICE_CCACHE)
  return()
endif()
find_program(SLUICE_CCACHE_PROGRAM ccache)
mark_as_advanced(SLUICE_CCACHE_PROGRAM)
if(NOT SLUICE_CCACHE_PROGRAM)
  return()
endif()

set(_sluice_ccache_launcher ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} ${SLUICE_CCACHE_PROGRAM})
set(_sluice_ccache_languages)
foreach(lang CXX C CUDA)
  if(NOT DEFINED CMAKE_${lang}_COMPILER_LAUNCHER AND NOT DEFINED ENV{CMAKE_${lang}_COMPILER_LAUNCHER})
    # A plain variable (not a cache entry): it sets the target property of every target made
    # after this point, C and CUDA ones too once tests/capi or the CUDA example enable them.
    set(CMAKE_${lang}_COMPILER_LAUNCHER ${_sluice_ccache_launcher})
    list(APPEND _sluice_ccache_languages ${lang})
  endif()
endforeach()
if(_sluice_ccache_languages)
  # nvcc takes no -fdebug-prefix-map (its host compiler would get it through -Xcompiler).
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-fdebug-prefix-map=${PROJECT_SOURCE_DIR}=.>)
  message(STATUS "sluice: compiling through ${SLUICE_CCACHE_PROGRAM} (${_sluice_ccache_languages}; -DSLUICE_CCACHE=OFF to not)")
endif()
