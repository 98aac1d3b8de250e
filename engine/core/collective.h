// Collective: how the ranks of a data-parallel job agree. Each rank trains a
// full copy of the model on its share of every global batch; after backward
// the ranks sum their gradients, so every rank applies the same update and
// the copies stay equal.
//
// Two forms of the same sum. AllReduceSum blocks. StartAllReduceSum queues
// one all-reduce behind those already started and returns at once; WaitAll
// waits for every started one. The trainer starts a bucket of gradients as
// soon as backward has finished them, so the sums overlap the rest of
// backward.
//
// Memory: the tensors live where the training backend keeps them. Host
// collectives (SocketCollective) read them on their own thread and need a
// backend whose ops are done when they return (the CPU backend); the NCCL
// collective orders itself after the work already queued on the backend's
// stream.
//
// Implementations: SocketCollective (engine/dist, TCP, for CPU ranks in one
// or several processes) and NcclCollective (engine/dist, GPU ranks). The
// trainer runs without one (world size 1) unchanged.
//
// Thread-safety: a Collective serves one rank's training loop; calls must not
// overlap, and every rank must make the same calls in the same order with the
// same sizes.
#ifndef TRAINYARD_ENGINE_CORE_COLLECTIVE_H_
#define TRAINYARD_ENGINE_CORE_COLLECTIVE_H_

#include <cstdint>
#include <span>
#include <vector>

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

  // Replaces every element of `tensors` with its sum over all ranks. Every
  // rank ends with bitwise the same values (SocketCollective sums in rank
  // order, ((r0 + r1) + r2) + ..., so how the elements are split into calls
  // does not change a bit). Errors (a peer gone, a timeout, a mismatch in
  // sizes between ranks) are UNAVAILABLE, DEADLINE_EXCEEDED,
  // FAILED_PRECONDITION or INTERNAL; after one the collective is broken for
  // good and every later call fails with FAILED_PRECONDITION.
  virtual absl::Status AllReduceSum(std::span<const FloatSpan> tensors) = 0;

  // Queues AllReduceSum(tensors) behind the all-reduces already started.
  // The memory must stay valid, and the caller must neither read nor write
  // it, until WaitAll returns. Errors surface at WaitAll.
  // The default runs the all-reduce at once.
  virtual void StartAllReduceSum(std::vector<FloatSpan> tensors) {
    if (started_error_.ok()) started_error_ = AllReduceSum(tensors);
  }

  // Waits until every started all-reduce is done; returns the first error
  // among them. After it the tensors hold their sums (in the backend's
  // order, for device memory: later backend work sees them).
  virtual absl::Status WaitAll() {
    absl::Status s = started_error_;
    started_error_ = absl::OkStatus();
    return s;
  }

 private:
  absl::Status started_error_;
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_COLLECTIVE_H_
