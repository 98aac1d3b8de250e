// Settings of the NCCL stand-in (nccl_host.cc) that tests change. The NCCL
// API itself is declared by the shim cuda_include/nccl.h.
//
// Thread-safety: safe to call from any thread; communicators read the
// bounds when they start forming or start a collective.
#ifndef TRAINYARD_ENGINE_CUDA_EMULATION_NCCL_HOST_H_
#define TRAINYARD_ENGINE_CUDA_EMULATION_NCCL_HOST_H_

#include <chrono>

namespace trainyard::cuda_emulation {

// How long a communicator may take to form (default 5 min; then every rank
// fails with ncclSystemError) and how long one collective waits to hear
// from a peer that is alive (default 60 min). A zero restores the default.
void SetEmulatedNcclBounds(std::chrono::milliseconds init,
                           std::chrono::milliseconds collective);

}  // namespace trainyard::cuda_emulation

#endif  // TRAINYARD_ENGINE_CUDA_EMULATION_NCCL_HOST_H_
