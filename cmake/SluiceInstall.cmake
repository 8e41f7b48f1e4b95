# SPDX-License-Identifier: Apache-2.0
# Install rules, the relocatable `sluice` CMake package (find_package(sluice)) and the pkg-config
# files sluice.pc (the C++ tiers) and sluice-c.pc (the C API, libsluice_c.so).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Every tier but cuda goes into sluiceTargets; the CUDA tier into sluiceCudaTargets, which the
# package loads only for find_package(sluice COMPONENTS cuda), so a consumer without the CUDA
# toolkit still finds and links the rest of an installation built with it.
get_property(_sluice_tiers GLOBAL PROPERTY SLUICE_TIERS)
set(_sluice_targets sluice)
set(_sluice_host_tiers)
foreach(tier IN LISTS _sluice_tiers)
  if(NOT tier STREQUAL "cuda")
    list(APPEND _sluice_targets sluice_${tier})
    list(APPEND _sluice_host_tiers ${tier})
  endif()
endforeach()
if(TARGET sluice_c)
  list(APPEND _sluice_targets sluice_c)
  # The installed library finds the libraries it links where they were when it was linked
  # (libcudart in the CUDA toolkit's directory), without LD_LIBRARY_PATH.
  set_target_properties(sluice_c PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
endif()

install(TARGETS ${_sluice_targets} EXPORT sluiceTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET sluice_cuda)
  install(TARGETS sluice_cuda EXPORT sluiceCudaTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT sluiceCudaTargets NAMESPACE sluice:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
endif()

# Headers of the tiers that were built; nothing outside include/sluice/.
install(DIRECTORY include/sluice DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp"
        PATTERN "s3" EXCLUDE PATTERN "fabric" EXCLUDE PATTERN "cuda" EXCLUDE PATTERN "file" EXCLUDE)
foreach(tier s3 fabric cuda file)
  if(TARGET sluice_${tier})
    set(_sluice_excluded)
    if(tier STREQUAL "cuda" AND NOT TARGET sluice_file)
      set(_sluice_excluded PATTERN "file.hpp" EXCLUDE)  # files into device memory come with the file tier
    endif()
    install(DIRECTORY include/sluice/${tier} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sluice
            FILES_MATCHING PATTERN "*.hpp" ${_sluice_excluded})
  endif()
endforeach()
if(TARGET sluice_c)
  install(FILES include/sluice/sluice.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sluice)
endif()
install(FILES LICENSE NOTICE CHANGELOG.md DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/sluice)

# pkg-config: relocatable (paths relative to the .pc file's directory).
file(RELATIVE_PATH _sluice_pc_to_prefix "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
set(SLUICE_PC_PREFIX "\${pcfiledir}/${_sluice_pc_to_prefix}")
string(REGEX REPLACE "/$" "" SLUICE_PC_PREFIX "${SLUICE_PC_PREFIX}")
# sluice.pc: the static C++ tiers but cuda (dependents first), with what they link.
set(SLUICE_PC_LIBS)
set(SLUICE_PC_REQUIRES)
set(SLUICE_PC_OTHER_LIBS)
foreach(tier fabric s3 file core)
  if(tier IN_LIST _sluice_host_tiers)
    string(APPEND SLUICE_PC_LIBS " -lsluice_${tier}")
  endif()
endforeach()
set(SLUICE_PC_REQUIRES_PRIVATE)
if("fabric" IN_LIST _sluice_host_tiers AND SLUICE_DLOPEN_FABRIC)
  # libfabric's headers only (its Cflags): sluice_fabric loads libfabric.so.1 with dlopen.
  list(APPEND SLUICE_PC_REQUIRES_PRIVATE "libfabric >= 1.17")
elseif("fabric" IN_LIST _sluice_host_tiers)
  list(APPEND SLUICE_PC_REQUIRES "libfabric >= 1.17")
endif()
if("s3" IN_LIST _sluice_host_tiers)
  list(APPEND SLUICE_PC_REQUIRES openssl libisal pugixml)
endif()
if("file" IN_LIST _sluice_host_tiers)
  list(APPEND SLUICE_PC_REQUIRES liburing)
endif()
if("file" IN_LIST _sluice_host_tiers OR SLUICE_PC_REQUIRES_PRIVATE)
  foreach(lib IN LISTS CMAKE_DL_LIBS)  # the cuFile transport's dlopen, libfabric's
    string(APPEND SLUICE_PC_OTHER_LIBS " -l${lib}")
  endforeach()
endif()
list(APPEND SLUICE_PC_REQUIRES simdjson)
list(JOIN SLUICE_PC_REQUIRES ", " SLUICE_PC_REQUIRES)
list(JOIN SLUICE_PC_REQUIRES_PRIVATE ", " SLUICE_PC_REQUIRES_PRIVATE)
configure_file(${PROJECT_SOURCE_DIR}/cmake/sluice.pc.in ${PROJECT_BINARY_DIR}/sluice.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/sluice.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(TARGET sluice_c)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/sluice-c.pc.in ${PROJECT_BINARY_DIR}/sluice-c.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/sluice-c.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()

set(SLUICE_PACKAGE_TIERS ${_sluice_host_tiers})
set(SLUICE_PACKAGE_HAS_CUDA OFF)
if(TARGET sluice_cuda)
  set(SLUICE_PACKAGE_HAS_CUDA ON)
endif()
set(SLUICE_PACKAGE_HAS_C OFF)
if(TARGET sluice_c)
  set(SLUICE_PACKAGE_HAS_C ON)
endif()
install(EXPORT sluiceTargets NAMESPACE sluice:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/sluiceConfig.cmake.in
  ${PROJECT_BINARY_DIR}/sluiceConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/sluiceConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/sluiceConfig.cmake ${PROJECT_BINARY_DIR}/sluiceConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
