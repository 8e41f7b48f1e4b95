# SPDX-License-Identifier: Apache-2.0
# Every public header compiles on its own: one generated translation unit per header,
# including only that header, built into one object library per tier. Headers under a detail/
# folder are implementation, compiled through the public header that includes them, and get no
# translation unit of their own.
# (Included from tests/CMakeLists.txt; the library targets exist by then.)
# Part of the developer build (SLUICE_DEVELOPER, the dev preset) only: whether a header is
# self-contained does not depend on the sanitizers, so the asan tree does not compile them again.
if(NOT SLUICE_DEVELOPER)
  return()
endif()

function(sluice_header_check tier glob_dir target)
  file(GLOB_RECURSE headers RELATIVE ${PROJECT_SOURCE_DIR}/include CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/include/${glob_dir}/*.hpp)
  set(sources)
  list(FILTER headers EXCLUDE REGEX "(^|/)detail/")
  foreach(header IN LISTS headers)
    if(NOT tier STREQUAL "core")
      # tier folders are checked by their own tier
    elseif(header MATCHES "^sluice/(s3|fabric|cuda|file)/")
      continue()
    endif()
    if(header STREQUAL "sluice/fabric/s3_plane.hpp" AND NOT TARGET sluice::s3)
      continue()  # the S3 glue of the fabric tier exists only with the S3 tier
    endif()
    if(header STREQUAL "sluice/cuda/file.hpp" AND NOT TARGET sluice::file)
      continue()  # files into device memory exist only with the file tier
    endif()
    string(MAKE_C_IDENTIFIER ${header} id)
    set(src ${CMAKE_CURRENT_BINARY_DIR}/header_check/${id}.cpp)
    file(CONFIGURE OUTPUT ${src} CONTENT "#include <${header}>\n")
    list(APPEND sources ${src})
  endforeach()
  if(sources)
    add_library(sluice_header_check_${tier} OBJECT ${sources})
    target_link_libraries(sluice_header_check_${tier} PRIVATE ${target})
    sluice_set_warnings(sluice_header_check_${tier})
  endif()
endfunction()

sluice_header_check(core sluice sluice::core)
foreach(tier s3 fabric cuda file)
  if(TARGET sluice::${tier})
    sluice_header_check(${tier} sluice/${tier} sluice::${tier})
  endif()
endforeach()

# Visible in the suite as a test: rebuilding the checks is a no-op when they are up to date,
# and fails with the compiler's message when a header stopped being self-contained.
set(_sluice_header_targets)
foreach(tier core s3 fabric cuda file)
  if(TARGET sluice_header_check_${tier})
    list(APPEND _sluice_header_targets --target sluice_header_check_${tier})
  endif()
endforeach()
add_test(NAME headers.self_contained COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} ${_sluice_header_targets})
set_tests_properties(headers.self_contained PROPERTIES LABELS headers)
