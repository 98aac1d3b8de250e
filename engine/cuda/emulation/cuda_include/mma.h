// Shim: the CUDA emulation's stand-in for CUDA's mma.h
// (engine/cuda/emulation/wmma.h). On the include path of emulation targets
// only, ahead of any real CUDA include directory.
#ifndef TRAINYARD_EMULATION_SHIM_MMA_H_
#define TRAINYARD_EMULATION_SHIM_MMA_H_
#include "engine/cuda/emulation/wmma.h"
#endif  // TRAINYARD_EMULATION_SHIM_MMA_H_
