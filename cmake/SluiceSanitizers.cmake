# SPDX-License-Identifier: Apache-2.0
# Clang with -shared-libsan (the asan preset): every program and shared library links the shared
# ASan+UBSan runtime, libclang_rt.asan-<arch>.so. Shared, because libsluice_c.so is linked with
# --no-undefined and a shared library never gets clang's static runtime; one runtime for the
# whole process also lets the C test load the instrumented libsluice_c.so.
#
# clang leaves the runtime's folder off the run path, so the programs name it: <build>/libasan/,
# which holds a link to the runtime. The folder is named so that `ldd` of an instrumented binary
# shows "libasan", as it does for GCC's sanitizer builds (libasan.so), which is how the
# integration tests tell a sanitizer build (tests/integration/rdma_test.py, sanitized()).
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang" OR NOT CMAKE_CXX_FLAGS MATCHES "-shared-libsan")
  return()
endif()
set(_sluice_asan_rt libclang_rt.asan-${CMAKE_SYSTEM_PROCESSOR}.so)
execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=${_sluice_asan_rt}
                OUTPUT_VARIABLE _sluice_asan_rt_path OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT IS_ABSOLUTE "${_sluice_asan_rt_path}" OR NOT EXISTS "${_sluice_asan_rt_path}")
  message(FATAL_ERROR "sluice: ${CMAKE_CXX_COMPILER} has no ${_sluice_asan_rt} for -shared-libsan "
                      "(Debian: libclang-rt-<version>-dev; scripts/deps.sh installs it)")
endif()
file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/libasan)
file(CREATE_LINK ${_sluice_asan_rt_path} ${PROJECT_BINARY_DIR}/libasan/${_sluice_asan_rt} SYMBOLIC)
# In the linker flags (not add_link_options), so that tests/install's consumer, which is given
# CMAKE_EXE_LINKER_FLAGS, finds the runtime too.
foreach(kind EXE SHARED MODULE)
  string(APPEND CMAKE_${kind}_LINKER_FLAGS " -Wl,-rpath,${PROJECT_BINARY_DIR}/libasan")
endforeach()
message(STATUS "sluice: shared sanitizer runtime ${_sluice_asan_rt_path} (run path ${PROJECT_BINARY_DIR}/libasan)")
