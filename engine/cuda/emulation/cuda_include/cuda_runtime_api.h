// Shim: the CUDA emulation's stand-in for CUDA's cuda_runtime_api.h
// (engine/cuda/emulation/runtime.h). On the include path of emulation
// targets only, ahead of any real CUDA include directory.
#ifndef TRAINYARD_EMULATION_SHIM_CUDA_RUNTIME_API_H_
#define TRAINYARD_EMULATION_SHIM_CUDA_RUNTIME_API_H_
#include "engine/cuda/emulation/runtime.h"
#endif  // TRAINYARD_EMULATION_SHIM_CUDA_RUNTIME_API_H_
