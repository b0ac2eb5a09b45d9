# FusemathBlas.cmake: the OpenBLAS the CPU matmul calls, as the INTERFACE target fusemath_blas.
#
# FUSEMATH_BLAS:
#   system          the distribution's OpenBLAS (pkg-config openblas; Debian/Ubuntu ship 0.3.21-0.3.26)
#   scipy-openblas  the scipy-openblas32 Python package (the OpenBLAS build NumPy and SciPy ship;
#                   0.3.28 and later, every symbol prefixed scipy_). It has OpenBLAS's threads
#                   callback, through which fusemath's own pool runs a threaded GEMM, so the
#                   epilogue pass that follows finds the cores free (the system OpenBLAS's workers
#                   spin for ~0.1 s after each call and slow that pass down: docs/design.md).
#   auto (default)  scipy-openblas when the Python interpreter imports scipy_openblas32, else system.
# SCIPY_OPENBLAS_DIR: the package directory (holding lib/ and include/); found through Python when
# empty. The interpreter is Python_EXECUTABLE / Python3_EXECUTABLE (scikit-build-core and the
# Makefile pass them), else python3 on PATH.
set(FUSEMATH_BLAS auto CACHE STRING "BLAS of the CPU matmul: auto, system, scipy-openblas")
set_property(CACHE FUSEMATH_BLAS PROPERTY STRINGS auto system scipy-openblas)
set(SCIPY_OPENBLAS_DIR "" CACHE PATH "scipy_openblas32 package directory (lib/, include/); empty: ask Python")

add_library(fusemath_blas INTERFACE)
set(FUSEMATH_BLAS_USED system)

if(NOT FUSEMATH_BLAS MATCHES "^(auto|system|scipy-openblas)$")
  message(FATAL_ERROR "fusemath: FUSEMATH_BLAS is '${FUSEMATH_BLAS}', expected auto, system or scipy-openblas")
endif()

if(NOT FUSEMATH_BLAS STREQUAL "system")
  set(_fm_sob_dir "${SCIPY_OPENBLAS_DIR}")
  if(NOT _fm_sob_dir)
    if(Python_EXECUTABLE)
      set(_fm_py "${Python_EXECUTABLE}")
    elseif(Python3_EXECUTABLE)
      set(_fm_py "${Python3_EXECUTABLE}")
    else()
      find_program(_fm_py NAMES python3 python)
    endif()
    if(_fm_py)
      execute_process(COMMAND "${_fm_py}" -c "import os, scipy_openblas32 as s; print(os.path.dirname(s.__file__))"
                      OUTPUT_VARIABLE _fm_sob_dir OUTPUT_STRIP_TRAILING_WHITESPACE
                      ERROR_QUIET RESULT_VARIABLE _fm_rc)
      if(NOT _fm_rc EQUAL 0)
        set(_fm_sob_dir "")
      endif()
    endif()
  endif()
  set(_fm_sob_lib "${_fm_sob_dir}/lib/libscipy_openblas.so")
  if(_fm_sob_dir AND EXISTS "${_fm_sob_lib}" AND EXISTS "${_fm_sob_dir}/include/cblas.h")
    target_include_directories(fusemath_blas BEFORE INTERFACE "${_fm_sob_dir}/include")
    target_compile_definitions(fusemath_blas INTERFACE FM_BLAS_SCIPY=1)
    target_link_libraries(fusemath_blas INTERFACE "${_fm_sob_lib}")
    set(FUSEMATH_BLAS_USED "scipy-openblas (${_fm_sob_lib})")
    # a wheel finds it in the same site-packages: fusemath/ and scipy_openblas32/lib/ are siblings
    set(FUSEMATH_BLAS_RPATH "$ORIGIN/../scipy_openblas32/lib")
  elseif(FUSEMATH_BLAS STREQUAL "scipy-openblas")
    message(FATAL_ERROR "fusemath: FUSEMATH_BLAS=scipy-openblas, but no scipy_openblas32 package was found "
                        "(looked in '${_fm_sob_dir}'; pip install scipy-openblas32, or set SCIPY_OPENBLAS_DIR)")
  endif()
endif()

if(FUSEMATH_BLAS_USED STREQUAL "system")
  target_link_libraries(fusemath_blas INTERFACE PkgConfig::FM_OPENBLAS)
endif()
message(STATUS "fusemath: BLAS of the CPU matmul: ${FUSEMATH_BLAS_USED}")
