// Shim: the CUDA emulation's stand-in for CUDA's cuda_bf16.h
// (engine/cuda/emulation/bf16.h). On the include path of emulation targets
// only, ahead of any real CUDA include directory.
#ifndef TRAINYARD_EMULATION_SHIM_CUDA_BF16_H_
#define TRAINYARD_EMULATION_SHIM_CUDA_BF16_H_
#include "engine/cuda/emulation/bf16.h"
#endif  // TRAINYARD_EMULATION_SHIM_CUDA_BF16_H_
