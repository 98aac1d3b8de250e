// Collective: how the ranks of a data-parallel job agree. Each rank trains a
// full copy of the model on its share of every global batch; after backward
// the ranks sum their gradients with AllReduceSum, so every rank applies the
// same update and the copies stay bitwise equal.
//
// Implementations: SocketCollective (engine/dist, TCP, for CPU ranks in one
// or several processes) and, on GPUs, NCCL. The trainer runs without one
// (world size 1) unchanged.
//
// Thread-safety: a Collective serves one rank's training loop; calls must not
// overlap, and every rank must make the same calls in the same order with the
// same sizes.
#ifndef TRAINYARD_ENGINE_CORE_COLLECTIVE_H_
#define TRAINYARD_ENGINE_CORE_COLLECTIVE_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace trainyard::engine {

// A run of floats in memory the collective can read and write.
struct FloatSpan {
  float* data = nullptr;
  int64_t size = 0;
};

class Collective {
 public:
  virtual ~Collective() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Replaces every element of `tensors` with its sum over all ranks. The sum
  // is taken in rank order (((r0 + r1) + r2) + ...), the same on every rank,
  // so all ranks end with bitwise the same values. Errors (a peer gone, a
  // timeout, a mismatch in sizes between ranks) are UNAVAILABLE or
  // FAILED_PRECONDITION; after one the collective is broken for good.
  virtual absl::Status AllReduceSum(std::span<const FloatSpan> tensors) = 0;
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_COLLECTIVE_H_
