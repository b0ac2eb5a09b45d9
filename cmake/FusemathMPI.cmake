# FusemathMPI.cmake: the distributed layer libfusemath_mpi (distributed/*.c, header
# core/include/fusemath/fusemath_mpi.h), built only where MPI (C) is found, so that libfusemath
# itself keeps no MPI dependency. Optional parts, each detected (AUTO), required (ON) or left out (OFF):
#  - FFTW-MPI (CPU ranks' FFTs): without it fm_dist_fft_plan on host data returns FM_ERR_UNAVAILABLE;
#  - ScaLAPACK (with BLACS inside it, as Debian builds it): without it the fm_dist_grid / matmul /
#    solve / cholesky functions are still built and return FM_ERR_UNAVAILABLE;
#  - GPU ranks (the CUDA toolkit, FUSEMATH_HAVE_CUDA): their own module libfusemath_mpi_cuda.so, which
#    links cudart, NVRTC and NCCL (libnccl, nccl.h, where found) and which libfusemath_mpi loads at the
#    first GPU-rank plan: docs/design.md, Distributed, GPU ranks.
# Sets FUSEMATH_HAVE_MPI, FUSEMATH_HAVE_FFTW_MPI, FUSEMATH_HAVE_SCALAPACK, FUSEMATH_HAVE_DIST_GPU,
# FUSEMATH_HAVE_NCCL and, for the tests, FUSEMATH_MPIEXEC_FLAGS (Open MPI's --oversubscribe
# --allow-run-as-root where mpiexec is Open MPI's).
set(FUSEMATH_WITH_MPI AUTO CACHE STRING "Build libfusemath_mpi: AUTO (if MPI is found), ON, OFF")
set_property(CACHE FUSEMATH_WITH_MPI PROPERTY STRINGS AUTO ON OFF)
set(FUSEMATH_WITH_FFTW_MPI AUTO CACHE STRING "FFTW-MPI (CPU ranks' FFTs) in libfusemath_mpi: AUTO (if found), ON, OFF")
set_property(CACHE FUSEMATH_WITH_FFTW_MPI PROPERTY STRINGS AUTO ON OFF)
set(FUSEMATH_WITH_SCALAPACK AUTO CACHE STRING "ScaLAPACK in libfusemath_mpi: AUTO (if found), ON, OFF")
set_property(CACHE FUSEMATH_WITH_SCALAPACK PROPERTY STRINGS AUTO ON OFF)
set(FUSEMATH_WITH_DIST_GPU AUTO CACHE STRING "GPU ranks (libfusemath_mpi_cuda.so): AUTO (with the CUDA toolkit), ON, OFF")
set_property(CACHE FUSEMATH_WITH_DIST_GPU PROPERTY STRINGS AUTO ON OFF)
set(FUSEMATH_WITH_NCCL AUTO CACHE STRING "NCCL exchanges for GPU ranks: AUTO (if found), ON, OFF")
set_property(CACHE FUSEMATH_WITH_NCCL PROPERTY STRINGS AUTO ON OFF)
set(FUSEMATH_HAVE_MPI OFF)
set(FUSEMATH_HAVE_FFTW_MPI OFF)
set(FUSEMATH_HAVE_SCALAPACK OFF)
set(FUSEMATH_HAVE_DIST_GPU OFF)
set(FUSEMATH_HAVE_NCCL OFF)
if(FUSEMATH_WITH_MPI STREQUAL "OFF")
  message(STATUS "fusemath: distributed layer OFF (FUSEMATH_WITH_MPI=OFF)")
  return()
endif()

find_package(MPI QUIET COMPONENTS C)
if(NOT MPI_C_FOUND)
  if(FUSEMATH_WITH_MPI STREQUAL "ON")
    message(FATAL_ERROR "fusemath: FUSEMATH_WITH_MPI=ON but MPI for C was not found (apt-get install libopenmpi-dev openmpi-bin)")
  endif()
  message(STATUS "fusemath: distributed layer OFF (not found: MPI for C: apt-get install libopenmpi-dev openmpi-bin)")
  return()
endif()
set(FUSEMATH_HAVE_MPI ON)
if(NOT FUSEMATH_WITH_FFTW_MPI STREQUAL "OFF")
  find_path(FUSEMATH_FFTW3_MPI_INCLUDE_DIR fftw3-mpi.h HINTS ${FM_FFTW3_INCLUDE_DIRS})
  foreach(_fm_lib fftw3_mpi fftw3f_mpi)
    string(TOUPPER "${_fm_lib}" _fm_var)
    find_library(FUSEMATH_${_fm_var}_LIBRARY NAMES ${_fm_lib} HINTS ${FM_FFTW3_LIBRARY_DIRS} ${FM_FFTW3F_LIBRARY_DIRS})
  endforeach()
  if(FUSEMATH_FFTW3_MPI_INCLUDE_DIR AND FUSEMATH_FFTW3_MPI_LIBRARY AND FUSEMATH_FFTW3F_MPI_LIBRARY)
    set(FUSEMATH_HAVE_FFTW_MPI ON)
  elseif(FUSEMATH_WITH_FFTW_MPI STREQUAL "ON")
    message(FATAL_ERROR "fusemath: FUSEMATH_WITH_FFTW_MPI=ON but FFTW-MPI was not found (apt-get install libfftw3-mpi-dev)")
  endif()
endif()

file(GLOB _fm_mpi_sources CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/distributed/*.c")
# the GPU ranks' own files: their module, libfusemath_mpi_cuda.so (below), not libfusemath_mpi
set(_fm_dist_gpu_sources dist_fft_gpu.c dist_exchange.c dist_gpu_kernel.c dist_pencil_gpu.c) # + dist_pencil.c, included
list(TRANSFORM _fm_dist_gpu_sources PREPEND "${PROJECT_SOURCE_DIR}/distributed/")
list(REMOVE_ITEM _fm_mpi_sources ${_fm_dist_gpu_sources})
add_library(fusemath_mpi SHARED ${_fm_mpi_sources})
add_library(fusemath::fusemath_mpi ALIAS fusemath_mpi)
set_target_properties(fusemath_mpi PROPERTIES C_VISIBILITY_PRESET hidden) # FM_API only
target_include_directories(fusemath_mpi PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/core/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_include_directories(fusemath_mpi PRIVATE "${PROJECT_SOURCE_DIR}/core/src")
# core's internal functions (fm_fail, the FFTW planner lock) are imported from libfusemath.so
target_compile_definitions(fusemath_mpi PRIVATE FM_MPI_MODULE_BUILD=1)
target_link_libraries(fusemath_mpi PUBLIC fusemath MPI::MPI_C)
if(FUSEMATH_HAVE_FFTW_MPI)
  target_include_directories(fusemath_mpi PRIVATE "${FUSEMATH_FFTW3_MPI_INCLUDE_DIR}")
  target_compile_definitions(fusemath_mpi PRIVATE FM_HAVE_FFTW_MPI=1)
  target_link_libraries(fusemath_mpi PRIVATE ${FUSEMATH_FFTW3_MPI_LIBRARY} ${FUSEMATH_FFTW3F_MPI_LIBRARY})
else()
  target_compile_definitions(fusemath_mpi PRIVATE FM_HAVE_FFTW_MPI=0)
endif()
target_link_libraries(fusemath_mpi PRIVATE
  ${FUSEMATH_FFTW3_OMP_LIBRARY} ${FUSEMATH_FFTW3F_OMP_LIBRARY} # fftw_plan_with_nthreads: core's OpenMP flavour
  PkgConfig::FM_FFTW3 PkgConfig::FM_FFTW3F Threads::Threads m)
if(NOT FUSEMATH_SANITIZE)
  target_link_options(fusemath_mpi PRIVATE -Wl,--no-undefined)
endif()
fusemath_warnings(fusemath_mpi)
if(FUSEMATH_HAVE_VECT_COST_MODEL) # the chains' copy loops, vectorized as fusion/'s chain passes are
  set_source_files_properties("${PROJECT_SOURCE_DIR}/distributed/dist_chain.c"
                              PROPERTIES COMPILE_OPTIONS "-ftree-vectorize;-fvect-cost-model=dynamic")
endif()
# the fusion epilogue passes (fusion/cpu_epilogue.h) applied to each rank's block of D
target_include_directories(fusemath_mpi PRIVATE "${PROJECT_SOURCE_DIR}/fusion")

# ScaLAPACK: the build for this MPI (Debian: libscalapack-openmpi.so / libscalapack-mpich.so; BLACS
# inside it); it has no header, distributed/dist_scalapack.h declares what is called.
set(_fm_sl_off 1) # FUSEMATH_WITH_SCALAPACK=OFF (else: not found), for the C message
if(NOT FUSEMATH_WITH_SCALAPACK STREQUAL "OFF")
  if(MPI_C_LIBRARY_VERSION_STRING MATCHES "MPICH")
    set(_fm_sl_names scalapack-mpich scalapack)
  else()
    set(_fm_sl_names scalapack-openmpi scalapack)
  endif()
  find_library(FUSEMATH_SCALAPACK_LIBRARY NAMES ${_fm_sl_names})
  set(_fm_sl_off 0)
  if(FUSEMATH_SCALAPACK_LIBRARY)
    set(FUSEMATH_HAVE_SCALAPACK ON)
  elseif(FUSEMATH_WITH_SCALAPACK STREQUAL "ON")
    message(FATAL_ERROR "fusemath: FUSEMATH_WITH_SCALAPACK=ON but ScaLAPACK (${_fm_sl_names}) was not found "
                        "(apt-get install libscalapack-openmpi-dev)")
  endif()
endif()
if(FUSEMATH_HAVE_SCALAPACK)
  target_compile_definitions(fusemath_mpi PRIVATE FM_HAVE_SCALAPACK=1)
  target_link_libraries(fusemath_mpi PRIVATE ${FUSEMATH_SCALAPACK_LIBRARY})
else()
  target_compile_definitions(fusemath_mpi PRIVATE FM_HAVE_SCALAPACK=0 FM_SCALAPACK_OFF_BY_OPTION=${_fm_sl_off})
endif()

# GPU ranks: the CUDA runtime and NVRTC (the pack / unpack kernels, compiled at planning), NCCL where
# found. Library files, not the CUDA:: targets (which drag in the driver stub: FusemathCUDA.cmake).
if(FUSEMATH_WITH_DIST_GPU STREQUAL "ON" AND NOT (FUSEMATH_HAVE_CUDA AND FUSEMATH_CUDA_cudart_LIBRARY AND
                                                  FUSEMATH_CUDA_nvrtc_LIBRARY))
  message(FATAL_ERROR "fusemath: FUSEMATH_WITH_DIST_GPU=ON but the CUDA toolkit (cudart, NVRTC) was not found")
endif()
if(NOT FUSEMATH_WITH_DIST_GPU STREQUAL "OFF" AND FUSEMATH_HAVE_CUDA AND FUSEMATH_CUDA_cudart_LIBRARY AND
   FUSEMATH_CUDA_nvrtc_LIBRARY)
  set(FUSEMATH_HAVE_DIST_GPU ON)
  # a module of its own, loaded by libfusemath_mpi at the first GPU-rank plan (dist_gpu_load.c), so that
  # libfusemath_mpi.so links no CUDA library and loads on machines without CUDA
  add_library(fusemath_mpi_cuda MODULE ${_fm_dist_gpu_sources} "${PROJECT_SOURCE_DIR}/distributed/dist_xgeom.c"
              "${PROJECT_SOURCE_DIR}/distributed/dist_agree.c" "${PROJECT_SOURCE_DIR}/distributed/dist_alltoallv.c")
  set_target_properties(fusemath_mpi_cuda PROPERTIES C_VISIBILITY_PRESET hidden) # its entry only
  target_include_directories(fusemath_mpi_cuda PRIVATE "${PROJECT_SOURCE_DIR}/core/include"
                             "${PROJECT_SOURCE_DIR}/core/src")
  target_include_directories(fusemath_mpi_cuda SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_compile_definitions(fusemath_mpi_cuda PRIVATE FM_MPI_MODULE_BUILD=1 FM_DIST_HAVE_CUDA=1)
  target_link_libraries(fusemath_mpi_cuda PRIVATE fusemath MPI::MPI_C "${FUSEMATH_CUDA_cudart_LIBRARY}"
                        "${FUSEMATH_CUDA_nvrtc_LIBRARY}" Threads::Threads m)
  if(NOT FUSEMATH_SANITIZE)
    target_link_options(fusemath_mpi_cuda PRIVATE -Wl,--no-undefined)
  endif()
  fusemath_warnings(fusemath_mpi_cuda)
  target_compile_definitions(fusemath_mpi PRIVATE FM_DIST_HAVE_GPU_MODULE=1)
  target_link_libraries(fusemath_mpi PRIVATE ${CMAKE_DL_LIBS})
  add_dependencies(fusemath_mpi fusemath_mpi_cuda) # built with it: what loads it expects it beside it
  # the move kernel's body: the header the host test compiles, its text compiled by NVRTC at planning
  fusemath_embed_text("${PROJECT_SOURCE_DIR}/distributed/dist_move_body.h" fm_dist_move_body_src _fm_move_src)
  target_sources(fusemath_mpi_cuda PRIVATE "${_fm_move_src}")
  if(NOT FUSEMATH_WITH_NCCL STREQUAL "OFF")
    # the toolkit's, FUSEMATH_NCCL_ROOT / NCCL_ROOT / NCCL_HOME, or a PyPI nvidia-nccl wheel's (torch brings one)
    set(FUSEMATH_NCCL_ROOT "" CACHE PATH "where NCCL's include/ and lib/ are (optional)")
    file(GLOB _fm_nccl_wheels "${PROJECT_SOURCE_DIR}/.venv/lib/python3*/site-packages/nvidia/nccl"
         "/usr/local/lib/python3*/dist-packages/nvidia/nccl" "/usr/lib/python3/dist-packages/nvidia/nccl"
         "$ENV{VIRTUAL_ENV}/lib/python3*/site-packages/nvidia/nccl")
    set(_fm_nccl_roots ${FUSEMATH_NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME} ${_fm_nccl_wheels})
    find_path(FUSEMATH_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${_fm_nccl_roots} PATH_SUFFIXES include)
    find_library(FUSEMATH_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS "${CUDAToolkit_LIBRARY_DIR}" ${_fm_nccl_roots}
                 PATH_SUFFIXES lib lib64)
    if(FUSEMATH_NCCL_INCLUDE_DIR AND FUSEMATH_NCCL_LIBRARY)
      set(FUSEMATH_HAVE_NCCL ON)
      target_include_directories(fusemath_mpi_cuda SYSTEM PRIVATE "${FUSEMATH_NCCL_INCLUDE_DIR}")
      target_compile_definitions(fusemath_mpi_cuda PRIVATE FM_DIST_HAVE_NCCL=1)
      target_link_libraries(fusemath_mpi_cuda PRIVATE "${FUSEMATH_NCCL_LIBRARY}")
    elseif(FUSEMATH_WITH_NCCL STREQUAL "ON")
      message(FATAL_ERROR "fusemath: FUSEMATH_WITH_NCCL=ON but NCCL (nccl.h, libnccl) was not found")
    endif()
  endif()
  if(NOT FUSEMATH_HAVE_NCCL)
    target_compile_definitions(fusemath_mpi_cuda PRIVATE FM_DIST_HAVE_NCCL=0)
  endif()
endif()
if(NOT FUSEMATH_HAVE_DIST_GPU)
  target_compile_definitions(fusemath_mpi PRIVATE FM_DIST_HAVE_GPU_MODULE=0)
endif()

set(FUSEMATH_MPIEXEC_FLAGS "")
if(MPIEXEC_EXECUTABLE)
  execute_process(COMMAND "${MPIEXEC_EXECUTABLE}" --version OUTPUT_VARIABLE _fm_mpiexec_version ERROR_QUIET)
  if(_fm_mpiexec_version MATCHES "Open MPI|OpenRTE")
    # more ranks than the CI machine's 2 cores; CI runs as root
    set(FUSEMATH_MPIEXEC_FLAGS --oversubscribe --allow-run-as-root)
  endif()
endif()
message(STATUS "fusemath: distributed layer ON (libfusemath_mpi: MPI ${MPI_C_VERSION}, FFTW-MPI "
               "${FUSEMATH_HAVE_FFTW_MPI}, ScaLAPACK ${FUSEMATH_HAVE_SCALAPACK} ${FUSEMATH_SCALAPACK_LIBRARY}, "
               "GPU ranks ${FUSEMATH_HAVE_DIST_GPU}, NCCL ${FUSEMATH_HAVE_NCCL}; mpiexec ${MPIEXEC_EXECUTABLE})")
