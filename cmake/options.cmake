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
# 90a: the H100/H200's own instruction set, sm_90 and the arch-specific
# instructions such as Hopper's warpgroup products (wgmma).
set(YARD_CUDA_ARCHITECTURES "90a" CACHE STRING "CUDA architectures to compile for")

if(YARD_CUDA)
  set(CMAKE_CUDA_ARCHITECTURES ${YARD_CUDA_ARCHITECTURES})
  # The kernels built on wgmma (engine/cuda/warpgroup_mma.h) exist when every
  # architecture built is 90a; otherwise their launchers refuse them.
  set(_yard_not_90a ${YARD_CUDA_ARCHITECTURES})
  list(FILTER _yard_not_90a EXCLUDE REGEX "^90a(-real|-virtual)?$")
  if(_yard_not_90a STREQUAL "")
    set(YARD_SM90A ON)
  else()
    set(YARD_SM90A OFF)
  endif()
  # nvcc 13 with CMake 3.25 has no CUDA20 dialect mapping; device code is C++17.
  set(CMAKE_CUDA_STANDARD 17)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
endif()
message(STATUS "Trainyard: CUDA backend ${YARD_CUDA}")
# The CUDA kernels on the CPU (engine/cuda/emulation), with or without
# YARD_CUDA. Off under ThreadSanitizer, which its fibers do not work with.
option(YARD_CUDA_EMULATION "Build the host emulation of the CUDA kernels" ON)

# Sanitized builds (scripts/run-sanitized-tests.sh) run the tests several
# times slower; their ctest timeouts, and the deadlines the integration
# tests set themselves (YARD_TEST_TIMEOUT_SCALE in their environment), are
# multiplied by this.
set(YARD_TEST_TIMEOUT_SCALE 1 CACHE STRING "Multiplier of every test's ctest timeout")

# A ThreadSanitizer build (scripts/run-sanitized-tests.sh thread): every
# binary and test also links common/tsan_absl_sync.cc, which tells the
# sanitizer what Debian's (uninstrumented) absl::Mutex, CondVar and
# Notification order.
option(YARD_TSAN "Build for ThreadSanitizer (the flags come from CMAKE_CXX_FLAGS)" OFF)
