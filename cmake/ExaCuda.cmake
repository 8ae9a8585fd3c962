# EXASERVE_CUDA=AUTO builds kernels/ when nvcc is found; ON requires it; OFF skips it. CUDA is
# optional at build time and at run time (docs/architecture.md#module-map rule 3).
set(EXASERVE_CUDA_ENABLED OFF)
if(NOT EXASERVE_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER)
    find_program(_exa_nvcc nvcc PATHS /usr/local/cuda/bin NO_CACHE)
    if(_exa_nvcc)
      set(CMAKE_CUDA_COMPILER ${_exa_nvcc})
    endif()
  endif()
  if(CMAKE_CUDA_COMPILER)
    set(EXASERVE_CUDA_ENABLED ON)
  elseif(EXASERVE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "EXASERVE_CUDA=ON but nvcc was not found (PATH or /usr/local/cuda/bin)")
  endif()
endif()
message(STATUS "ExaServe CUDA backend: ${EXASERVE_CUDA_ENABLED} (EXASERVE_CUDA=${EXASERVE_CUDA})")

if(EXASERVE_CUDA_ENABLED)
  # A100 (sm_80) and H100/H200 (sm_90) machine code, plus sm_90 PTX that newer GPUs JIT-compile.
  # Two targets keep a cold build of kernels/ short on the 2-core CI machine.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "80-real;90")
  endif()
  # The CUDA runtime is linked statically (kernels/ links CUDA::cudart_static): it loads the
  # driver (libcuda.so.1) with dlopen on first use, so binaries start, and the CPU backend serves,
  # on machines without an NVIDIA driver. "None" here stops CMake from adding its own
  # -lcudart_static -lcudadevrt (without a -L) to every C++ link that reaches a .cu object.
  set(CMAKE_CUDA_RUNTIME_LIBRARY None)
  # -lineinfo: compute-sanitizer and profilers map kernel addresses to source lines.
  set(CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS} -lineinfo")
  enable_language(CUDA)
  # .cu files are C++20 like the rest (CUDA_STANDARD follows CXX_STANDARD). CMake 3.25 predates
  # nvcc's C++20 support and knows no flag for it; nvcc 12+ takes -std=c++20.
  if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  # Debian's packages export /usr/include as an include directory; passed to nvcc as -isystem it
  # breaks libstdc++'s #include_next <math.h>. It is searched anyway: mark it implicit.
  list(APPEND CMAKE_CUDA_IMPLICIT_INCLUDE_DIRECTORIES /usr/include)
  find_package(CUDAToolkit REQUIRED)
endif()
