# FusemathInstall.cmake: `cmake --install` layout for a regular (non-wheel) build:
#   lib/libfusemath.so*, lib/libfusemath_cuda.so (CUDA builds), lib/libfusemath_mpi.so and
#   lib/libfusemath_mpi_cuda.so (MPI builds), include/fusemath/*.h,
#   lib/cmake/fusemath/ (find_package(fusemath) -> fusemath::fusemath),
#   lib/pkgconfig/fusemath.pc
include(CMakePackageConfigHelpers)

set(FUSEMATH_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/fusemath")

install(TARGETS fusemath EXPORT fusemathTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET fusemath_cuda) # loaded at run time from libfusemath.so's directory, never linked against
  install(TARGETS fusemath_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
if(TARGET fusemath_mpi) # the distributed layer (fusemath_mpi.h), where MPI was found
  install(TARGETS fusemath_mpi LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}) # not exported: find_package(MPI) is the user's
endif()
if(TARGET fusemath_mpi_cuda) # its GPU ranks, loaded at run time from libfusemath_mpi.so's directory
  install(TARGETS fusemath_mpi_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
# The whole public include dir, so later public headers are installed too.
install(DIRECTORY "${PROJECT_SOURCE_DIR}/core/include/fusemath"
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")

install(EXPORT fusemathTargets NAMESPACE fusemath:: DESTINATION ${FUSEMATH_CMAKE_DIR})
configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/fusemathConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/fusemathConfig.cmake"
  INSTALL_DESTINATION ${FUSEMATH_CMAKE_DIR})
# 0.x: a minor bump may break the API.
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/fusemathConfigVersion.cmake"
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/fusemathConfig.cmake"
              "${PROJECT_BINARY_DIR}/fusemathConfigVersion.cmake"
        DESTINATION ${FUSEMATH_CMAKE_DIR})

# pkg-config: relocatable, prefix found from the .pc file's own place (${pcfiledir}),
# so `cmake --install build --prefix DIR` gives a correct file for any DIR.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(FUSEMATH_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _fm_up "/_/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/_")
  string(REGEX REPLACE "/$" "" _fm_up "${_fm_up}")
  set(FUSEMATH_PC_PREFIX "\${pcfiledir}/${_fm_up}")
endif()
foreach(_fm_dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_fm_dir}}")
    set(FUSEMATH_PC_${_fm_dir} "${CMAKE_INSTALL_${_fm_dir}}")
  else()
    set(FUSEMATH_PC_${_fm_dir} "\${prefix}/${CMAKE_INSTALL_${_fm_dir}}")
  endif()
endforeach()
configure_file("${PROJECT_SOURCE_DIR}/cmake/fusemath.pc.in" "${PROJECT_BINARY_DIR}/fusemath.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/fusemath.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
