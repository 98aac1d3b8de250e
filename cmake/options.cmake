# Build options. The CUDA backend is on when nvcc is found; everything else
# builds and is tested without a GPU.
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  set(_yard_cuda_default ON)
else()
  set(_yard_cuda_default OFF)
endif()
option(YARD_CUDA "Build the CUDA engine backend (needs nvcc)" ${_yard_cuda_default})
set(YARD_CUDA_ARCHITECTURES "90" CACHE STRING "CUDA architectures to compile for")

if(YARD_CUDA)
  set(CMAKE_CUDA_ARCHITECTURES ${YARD_CUDA_ARCHITECTURES})
  # nvcc 13 with CMake 3.25 has no CUDA20 dialect mapping; device code is C++17.
  set(CMAKE_CUDA_STANDARD 17)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
endif()
message(STATUS "Trainyard: CUDA backend ${YARD_CUDA}")
