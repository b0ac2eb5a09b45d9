# FusemathPython.cmake: wheel build under scikit-build-core (SKBUILD defined).
# Builds python/src/_fusemath.c as a limited-API (abi3, Python >= 3.11) extension
# and installs it with libfusemath.so into the wheel's fusemath/ package dir; both
# carry RUNPATH $ORIGIN so the extension finds the library next to it.
# (The pure-Python files come from python/fusemath via wheel.packages.)

set(_fm_ext_source "${PROJECT_SOURCE_DIR}/python/src/_fusemath.c")
set(_fm_pkg_dir fusemath) # relative to the wheel's platlib (CMAKE_INSTALL_PREFIX)

set_target_properties(fusemath PROPERTIES INSTALL_RPATH "$ORIGIN")
install(TARGETS fusemath LIBRARY DESTINATION ${_fm_pkg_dir})

if(NOT EXISTS "${_fm_ext_source}")
  message(WARNING "fusemath: ${_fm_ext_source} does not exist: the wheel has no _fusemath extension")
  return()
endif()

# Development.SABIModule / USE_SABI need CMake >= 3.26; scikit-build-core
# back-ports that FindPython to older CMake and then says so through
# SKBUILD_SABI_COMPONENT. Otherwise: a regular module with the abi3 suffix and
# Py_LIMITED_API set by hand.
if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.26 OR SKBUILD_SABI_COMPONENT STREQUAL "Development.SABIModule")
  find_package(Python 3.11 REQUIRED COMPONENTS Interpreter Development.SABIModule)
  Python_add_library(_fusemath MODULE USE_SABI 3.11 WITH_SOABI "${_fm_ext_source}")
else()
  find_package(Python 3.11 REQUIRED COMPONENTS Interpreter Development.Module)
  Python_add_library(_fusemath MODULE "${_fm_ext_source}")
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
