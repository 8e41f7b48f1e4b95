# Install rules and the relocatable `sluice` CMake package (find_package(sluice)).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_property(_sluice_tiers GLOBAL PROPERTY SLUICE_TIERS)
set(_sluice_targets sluice)
foreach(tier IN LISTS _sluice_tiers)
  list(APPEND _sluice_targets sluice_${tier})
endforeach()

install(TARGETS ${_sluice_targets} EXPORT sluiceTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

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

# The C API: libsluice_c.so and its header (not in the CMake package: C callers link -lsluice_c).
if(TARGET sluice_c)
  install(TARGETS sluice_c LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(FILES include/sluice/sluice.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sluice)
endif()

set(SLUICE_PACKAGE_TIERS ${_sluice_tiers})
install(EXPORT sluiceTargets NAMESPACE sluice:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/sluiceConfig.cmake.in
  ${PROJECT_BINARY_DIR}/sluiceConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/sluiceConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/sluiceConfig.cmake ${PROJECT_BINARY_DIR}/sluiceConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
