// DeviceArena: the bookkeeping of one fixed range of device memory that the
// CUDA backend takes in a single cudaMalloc at start (the job's grant) and
// hands out in aligned sub-blocks, so a job can never take more than it was
// granted and never allocates from the driver mid-run. It deals in offsets
// only and touches no device, so it is tested without a GPU.
//
// Blocks come first-fit from the lowest free offset, and freed blocks merge
// with free neighbours, so the same sequence of calls always yields the same
// offsets (a resumed run lays out its buffers as the original did).
//
// Thread-safety: not thread-safe; the owning backend serializes calls.
#ifndef TRAINYARD_ENGINE_CUDA_DEVICE_ARENA_H_
#define TRAINYARD_ENGINE_CUDA_DEVICE_ARENA_H_

#include <cstdint>
#include <map>

#include "absl/status/statusor.h"

namespace trainyard::engine::cuda {

class DeviceArena {
 public:
  // REQUIRES: capacity >= 0; alignment a power of two.
  DeviceArena(int64_t capacity, int64_t alignment);

  // The offset of a free block of at least `bytes` (rounded up to the
  // alignment; a zero-byte request still gets its own block).
  // INVALID_ARGUMENT for negative sizes; RESOURCE_EXHAUSTED naming the bytes
  // asked for, the bytes free and the largest free block when none fits.
  absl::StatusOr<int64_t> Take(int64_t bytes);
  // Returns the block at `offset` (from Take, not yet given back).
  void Give(int64_t offset);

  int64_t capacity() const { return capacity_; }
  int64_t alignment() const { return alignment_; }
  // Bytes held by blocks in use, each counted at its rounded size.
  int64_t used() const { return used_bytes_; }
  int64_t free() const { return capacity_ - used_bytes_; }
  int64_t largest_free_block() const;
  int64_t RoundUp(int64_t bytes) const;

 private:
  const int64_t capacity_;
  const int64_t alignment_;
  std::map<int64_t, int64_t> free_;  // offset -> size, disjoint, merged
  std::map<int64_t, int64_t> used_;  // offset -> size
  int64_t used_bytes_ = 0;
};

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_DEVICE_ARENA_H_
