# FusemathDeps.cmake: find the CPU-side third-party libraries and collect them,
# with the private include dirs, in the INTERFACE target `fusemath_deps`.
# fusemath_deps is linked PRIVATE into the shared library, so it never appears in
# the exported package (consumers only need libfusemath.so itself).

find_package(PkgConfig QUIET)
if(NOT PKG_CONFIG_FOUND)
  message(FATAL_ERROR "fusemath: pkg-config not found. On Debian/Ubuntu: apt-get install pkg-config")
endif()

# fusemath_require_pc(<prefix> <pkg-config module> <Debian package>)
# A macro (not a function) so the <prefix>_* result variables stay visible.
macro(fusemath_require_pc prefix module debpkg)
  pkg_check_modules(${prefix} QUIET IMPORTED_TARGET GLOBAL ${module})
  if(NOT ${prefix}_FOUND)
    message(FATAL_ERROR "fusemath: pkg-config module '${module}' not found. "
                        "On Debian/Ubuntu: apt-get install ${debpkg}")
  endif()
  message(STATUS "Found ${module} ${${prefix}_VERSION}")
endmacro()

fusemath_require_pc(FM_OPENBLAS openblas libopenblas-dev) # CBLAS, cblas.h
# LAPACKE (the dense solvers' CPU backend, backends/cpu/lapack_solve.c): optional. Without it the
# solvers use the LAPACKE an offered OpenBLAS exports (scipy-openblas32's), else they are unavailable.
pkg_check_modules(FM_LAPACKE QUIET IMPORTED_TARGET GLOBAL lapacke)
if(FM_LAPACKE_FOUND)
  message(STATUS "Found lapacke ${FM_LAPACKE_VERSION}")
else()
  message(STATUS "lapacke not found: the CPU solvers need an OpenBLAS with LAPACKE at run time "
                 "(apt-get install liblapacke-dev, or pip install scipy-openblas32)")
endif()
fusemath_require_pc(FM_FFTW3 fftw3 libfftw3-dev)
fusemath_require_pc(FM_FFTW3F fftw3f libfftw3-dev)

# FFTW's threads libraries have no pkg-config module of their own. The OpenMP flavour, not
# the pthreads one: the chain passes and the batched chunks run on OpenMP (libgomp) threads,
# and with two pools on the same cores (FFTW's pthreads workers, libgomp's spin-waiting ones)
# each phase of a fused FFT starts while the other pool still holds the cores.
foreach(_fm_lib fftw3_omp fftw3f_omp)
  string(TOUPPER "${_fm_lib}" _fm_var)
  find_library(FUSEMATH_${_fm_var}_LIBRARY NAMES ${_fm_lib}
               HINTS ${FM_FFTW3_LIBRARY_DIRS} ${FM_FFTW3F_LIBRARY_DIRS})
  if(NOT FUSEMATH_${_fm_var}_LIBRARY)
    message(FATAL_ERROR "fusemath: lib${_fm_lib} not found. On Debian/Ubuntu: apt-get install libfftw3-dev")
  endif()
endforeach()

find_package(OpenMP QUIET COMPONENTS C)
if(NOT OpenMP_C_FOUND)
  message(FATAL_ERROR "fusemath: OpenMP for C not found (GCC ships it as libgomp; "
                      "On Debian/Ubuntu: apt-get install gcc)")
endif()
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)

add_library(fusemath_deps INTERFACE)
target_include_directories(fusemath_deps INTERFACE
  "${PROJECT_SOURCE_DIR}/core/src"
  "${PROJECT_SOURCE_DIR}/fusion"
  "${PROJECT_SOURCE_DIR}/backends")
target_link_libraries(fusemath_deps INTERFACE
  PkgConfig::FM_OPENBLAS
  ${FUSEMATH_FFTW3_OMP_LIBRARY} ${FUSEMATH_FFTW3F_OMP_LIBRARY}
  PkgConfig::FM_FFTW3 PkgConfig::FM_FFTW3F
  OpenMP::OpenMP_C
  Threads::Threads
  ${CMAKE_DL_LIBS} # dlopen: another OpenBLAS (backends/cpu/blas_provider.c)
  m)

if(FM_LAPACKE_FOUND)
  target_link_libraries(fusemath_deps INTERFACE PkgConfig::FM_LAPACKE)
  target_compile_definitions(fusemath_deps INTERFACE FM_HAVE_LAPACKE=1)
endif()

# FFTW's long-double library, for longdouble / clongdouble FFTs (backends/cpu/fftwl_fft.c):
# optional (a machine's FFTW may lack it); without it such a transform is a NotSupported error.
option(FUSEMATH_WITH_FFTW3L "Long-double FFTs through libfftw3l when it is found" ON)
if(FUSEMATH_WITH_FFTW3L)
  find_library(FUSEMATH_FFTW3L_LIBRARY NAMES fftw3l HINTS ${FM_FFTW3_LIBRARY_DIRS})
endif()
if(FUSEMATH_WITH_FFTW3L AND FUSEMATH_FFTW3L_LIBRARY)
  message(STATUS "Found libfftw3l (long-double FFTs): ${FUSEMATH_FFTW3L_LIBRARY}")
  target_compile_definitions(fusemath_deps INTERFACE FM_HAVE_FFTW3L=1)
  target_link_libraries(fusemath_deps INTERFACE ${FUSEMATH_FFTW3L_LIBRARY})
else()
  message(STATUS "libfftw3l not used: long-double FFTs are refused (NotSupported)")
endif()

# glibc's vector math library (glibc >= 2.35 has tanhf/tanh): the CPU gelu loops
# call it through `omp declare simd` (fusion/cpu_epilogue.c). Optional.
include(CheckLibraryExists)
check_library_exists(mvec _ZGVbN4v_tanhf "" FUSEMATH_HAVE_LIBMVEC)
if(FUSEMATH_HAVE_LIBMVEC AND NOT FUSEMATH_SANITIZE AND NOT FUSEMATH_FUZZ) # ASan builds: no libmvec
  target_compile_definitions(fusemath_deps INTERFACE FM_HAVE_LIBMVEC=1)
  target_link_libraries(fusemath_deps INTERFACE mvec)
endif()
