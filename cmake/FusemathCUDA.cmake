# FusemathCUDA.cmake: decide whether the CUDA backend is built.
#
# FUSEMATH_WITH_CUDA=AUTO builds it when the CUDA toolkit is found (and
# backends/cuda/*.c exist), ON requires the toolkit, OFF never builds it.
# backends/cuda/*.c and fusion/cuda/*.c (run-time compiled epilogue kernels, NVRTC
# cache) are plain C against the CUDA runtime/library headers, so the CUDA *language*
# is not enabled (no nvcc needed at build time).
# Result: FUSEMATH_HAVE_CUDA (ON/OFF), FUSEMATH_CUDA_SOURCES, and, when ON, the INTERFACE target
# fusemath_cuda_deps (CUDA headers, libraries, FM_HAVE_CUDA=1) and FM_WITH_CUDA_MODULE=1 on
# fusemath_deps. Those sources become their own shared module, libfusemath_cuda.so
# (fusemath_add_cuda_module below): libfusemath.so links no CUDA library, and core loads the
# module at run time only where a driver sees a device (core/src/cuda_module.c).

string(TOUPPER "${FUSEMATH_WITH_CUDA}" _fm_cuda_mode)
if(NOT _fm_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "FUSEMATH_WITH_CUDA must be AUTO, ON or OFF (got '${FUSEMATH_WITH_CUDA}')")
endif()

set(FUSEMATH_HAVE_CUDA OFF)
file(GLOB FUSEMATH_CUDA_BACKEND_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/backends/cuda/*.c")
file(GLOB FUSEMATH_CUDA_FUSION_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/fusion/cuda/*.c")
set(FUSEMATH_CUDA_SOURCES ${FUSEMATH_CUDA_BACKEND_SOURCES} ${FUSEMATH_CUDA_FUSION_SOURCES})

if(NOT _fm_cuda_mode STREQUAL "OFF")
  # Hint the usual toolkit location unless the user pointed elsewhere.
  if(NOT DEFINED CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT} AND EXISTS "/usr/local/cuda")
    set(CUDAToolkit_ROOT "/usr/local/cuda")
  endif()
  if(_fm_cuda_mode STREQUAL "ON")
    find_package(CUDAToolkit)
    if(NOT CUDAToolkit_FOUND)
      message(FATAL_ERROR "FUSEMATH_WITH_CUDA=ON but the CUDA toolkit was not found "
                          "(set CUDAToolkit_ROOT, or use FUSEMATH_WITH_CUDA=AUTO/OFF)")
    endif()
  else()
    find_package(CUDAToolkit QUIET)
  endif()

  if(CUDAToolkit_FOUND AND NOT FUSEMATH_CUDA_BACKEND_SOURCES)
    message(WARNING "fusemath: CUDA toolkit found but backends/cuda/*.c is empty: CUDA backend not built")
  elseif(CUDAToolkit_FOUND)
    set(FUSEMATH_HAVE_CUDA ON)
  endif()
endif()

if(FUSEMATH_HAVE_CUDA)
  message(STATUS "fusemath: CUDA backend ON (toolkit ${CUDAToolkit_VERSION} at ${CUDAToolkit_LIBRARY_DIR})")
  target_compile_definitions(fusemath_deps INTERFACE FM_WITH_CUDA_MODULE=1)
  add_library(fusemath_cuda_deps INTERFACE)
  target_compile_definitions(fusemath_cuda_deps INTERFACE FM_HAVE_CUDA=1)
  target_include_directories(fusemath_cuda_deps SYSTEM INTERFACE ${CUDAToolkit_INCLUDE_DIRS})
  # Link the library *files* of whichever of these the toolkit has, not the
  # CUDA:: targets: CUDA::nvrtc drags in CUDA::cuda_driver (stubs/libcuda.so), and
  # libcuda.so.1 exists only where an NVIDIA driver is installed, so a NEEDED entry
  # for it would keep the module from loading at all on GPU-less machines (seen
  # with -fsanitize, where GCC drops --as-needed). The driver API, if used, must be
  # reached at run time (cudaGetDriverEntryPoint / dlopen), never linked.
  foreach(_fm_cu cudart cublasLt cufft curand cusolver nvrtc nvJitLink)
    if(CUDA_${_fm_cu}_LIBRARY) # cache entry set by FindCUDAToolkit
      set(FUSEMATH_CUDA_${_fm_cu}_LIBRARY "${CUDA_${_fm_cu}_LIBRARY}")
    else() # e.g. nvJitLink: FindCUDAToolkit knows it only from CMake 3.26 on
      find_library(FUSEMATH_CUDA_${_fm_cu}_LIBRARY NAMES ${_fm_cu}
                   HINTS "${CUDAToolkit_LIBRARY_DIR}" NO_DEFAULT_PATH)
    endif()
    if(FUSEMATH_CUDA_${_fm_cu}_LIBRARY)
      target_link_libraries(fusemath_cuda_deps INTERFACE "${FUSEMATH_CUDA_${_fm_cu}_LIBRARY}")
    else()
      message(STATUS "fusemath: CUDA library ${_fm_cu} not found, not linked")
    endif()
  endforeach()
else()
  message(STATUS "fusemath: CUDA backend OFF (FUSEMATH_WITH_CUDA=${FUSEMATH_WITH_CUDA})")
endif()

# fusemath_add_cuda_module(): after the fusemath target exists. fusemath_cuda_obj (the objects,
# also linked into the C tests, whose core then uses them without dlopen) and the module
# libfusemath_cuda.so next to libfusemath.so; the module calls the internal functions that
# libfusemath.so exports as FM_INTERNAL_API (core/src/internal.h).
function(fusemath_add_cuda_module)
  add_library(fusemath_cuda_obj OBJECT ${FUSEMATH_CUDA_SOURCES})
  set_target_properties(fusemath_cuda_obj PROPERTIES POSITION_INDEPENDENT_CODE ON C_VISIBILITY_PRESET hidden)
  target_include_directories(fusemath_cuda_obj PUBLIC "${PROJECT_SOURCE_DIR}/core/include")
  target_link_libraries(fusemath_cuda_obj PUBLIC fusemath_deps fusemath_cuda_deps)
  target_compile_definitions(fusemath_cuda_obj PRIVATE FM_CUDA_MODULE_BUILD=1) # FM_INTERNAL_API: imported
  fusemath_warnings(fusemath_cuda_obj)
  add_library(fusemath_cuda MODULE $<TARGET_OBJECTS:fusemath_cuda_obj>)
  target_link_libraries(fusemath_cuda PRIVATE fusemath fusemath_cuda_deps OpenMP::OpenMP_C Threads::Threads m
                                              ${CMAKE_DL_LIBS}) # dl: NVTX (backends/cuda/cuda_nvtx.h)
  set_target_properties(fusemath_cuda PROPERTIES INSTALL_RPATH "$ORIGIN")
  if(NOT FUSEMATH_SANITIZE)
    target_link_options(fusemath_cuda PRIVATE -Wl,--no-undefined)
  endif()
endfunction()
