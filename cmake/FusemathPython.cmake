# FusemathPython.cmake: wheel build under scikit-build-core (SKBUILD defined).
# Builds python/src/fmpy_*.c as the limited-API (abi3, Python >= 3.11) extension
# _fusemath and installs it with libfusemath.so (and the CUDA module libfusemath_cuda.so) into the
# wheel's fusemath/ package dir; all carry RUNPATH $ORIGIN so the extension finds the library next to it.
# (The pure-Python files come from python/fusemath via wheel.packages.)

# The extension's sources, one topic per file (fmpy.h lists them). Every .c file under
# python/src must be listed: a missing one only shows at import, as an undefined symbol.
set(_fm_ext_dir "${PROJECT_SOURCE_DIR}/python/src")
set(_fm_ext_sources
    "${_fm_ext_dir}/fmpy_module.c"
    "${_fm_ext_dir}/fmpy_args.c"
    "${_fm_ext_dir}/fmpy_tensor.c"
    "${_fm_ext_dir}/fmpy_dlpack.c"
    "${_fm_ext_dir}/fmpy_plan.c"
    "${_fm_ext_dir}/fmpy_call.c"
    "${_fm_ext_dir}/fmpy_array_matmul.c"
    "${_fm_ext_dir}/fmpy_fft.c"
    "${_fm_ext_dir}/fmpy_rng.c"
    "${_fm_ext_dir}/fmpy_solve.c"
    "${_fm_ext_dir}/fmpy_libs.c")
set(_fm_pkg_dir fusemath) # relative to the wheel's platlib (CMAKE_INSTALL_PREFIX)

set_target_properties(fusemath PROPERTIES INSTALL_RPATH "$ORIGIN")
install(TARGETS fusemath LIBRARY DESTINATION ${_fm_pkg_dir})
if(TARGET fusemath_cuda) # next to libfusemath.so, where core looks for it (core/src/cuda_module.c)
  install(TARGETS fusemath_cuda LIBRARY DESTINATION ${_fm_pkg_dir})
endif()

if(TARGET fusemath_mpi) # fusemath.distributed loads it with ctypes
  set_target_properties(fusemath_mpi PROPERTIES INSTALL_RPATH "$ORIGIN")
  install(TARGETS fusemath_mpi LIBRARY DESTINATION ${_fm_pkg_dir})
endif()
if(TARGET fusemath_mpi_cuda) # the GPU ranks: next to libfusemath_mpi.so, where it looks (dist_gpu_load.c)
  set_target_properties(fusemath_mpi_cuda PROPERTIES INSTALL_RPATH "$ORIGIN")
  install(TARGETS fusemath_mpi_cuda LIBRARY DESTINATION ${_fm_pkg_dir})
endif()

if(NOT EXISTS "${_fm_ext_dir}/fmpy_module.c")
  message(WARNING "fusemath: ${_fm_ext_dir}/fmpy_module.c does not exist: the wheel has no _fusemath extension")
  return()
endif()
set(_fm_ext_missing "")
foreach(_fm_f IN LISTS _fm_ext_sources)
  if(NOT EXISTS "${_fm_f}")
    list(APPEND _fm_ext_missing "${_fm_f}")
  endif()
endforeach()
file(GLOB _fm_ext_found CONFIGURE_DEPENDS "${_fm_ext_dir}/*.c")
list(REMOVE_ITEM _fm_ext_found ${_fm_ext_sources})
if(_fm_ext_missing OR _fm_ext_found)
  message(FATAL_ERROR "fusemath: the _fusemath sources in cmake/FusemathPython.cmake do not match "
                      "${_fm_ext_dir}: missing [${_fm_ext_missing}], not listed [${_fm_ext_found}]")
endif()

# Development.SABIModule / USE_SABI need CMake >= 3.26; scikit-build-core
# back-ports that FindPython to older CMake and then says so through
# SKBUILD_SABI_COMPONENT. Otherwise: a regular module with the abi3 suffix and
# Py_LIMITED_API set by hand.
if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.26 OR SKBUILD_SABI_COMPONENT STREQUAL "Development.SABIModule")
  find_package(Python 3.11 REQUIRED COMPONENTS Interpreter Development.SABIModule)
  Python_add_library(_fusemath MODULE USE_SABI 3.11 WITH_SOABI ${_fm_ext_sources})
else()
  find_package(Python 3.11 REQUIRED COMPONENTS Interpreter Development.Module)
  Python_add_library(_fusemath MODULE ${_fm_ext_sources})
  set_target_properties(_fusemath PROPERTIES PREFIX "" SUFFIX ".abi3.so")
  target_compile_definitions(_fusemath PRIVATE Py_LIMITED_API=0x030B0000)
endif()
target_link_libraries(_fusemath PRIVATE fusemath)
set_target_properties(_fusemath PROPERTIES
  C_VISIBILITY_PRESET hidden # only PyInit__fusemath (PyMODINIT_FUNC) is exported
  INSTALL_RPATH "$ORIGIN")
fusemath_warnings(_fusemath)
install(TARGETS _fusemath LIBRARY DESTINATION ${_fm_pkg_dir})
message(STATUS "fusemath: Python ${Python_VERSION} extension _fusemath (abi3) -> wheel ${_fm_pkg_dir}/")
