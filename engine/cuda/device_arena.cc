// First-fit offsets over a free list. See device_arena.h.
#include "engine/cuda/device_arena.h"

#include <algorithm>
#include <iterator>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace trainyard::engine::cuda {

DeviceArena::DeviceArena(int64_t capacity, int64_t alignment)
    : capacity_(capacity / alignment * alignment), alignment_(alignment) {
  if (capacity_ > 0) free_[0] = capacity_;
}

int64_t DeviceArena::RoundUp(int64_t bytes) const {
  return (std::max<int64_t>(bytes, 1) + alignment_ - 1) / alignment_ *
         alignment_;
}

int64_t DeviceArena::largest_free_block() const {
  int64_t largest = 0;
  for (const auto& [offset, size] : free_) largest = std::max(largest, size);
  return largest;
}

absl::StatusOr<int64_t> DeviceArena::Take(int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device arena: negative allocation of ", bytes, " bytes"));
  }
  // Sizes past the capacity are refused before rounding can overflow.
  const int64_t size = bytes > capacity_ ? capacity_ + 1 : RoundUp(bytes);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    const int64_t offset = it->first;
    const int64_t rest = it->second - size;
    free_.erase(it);
    if (rest > 0) free_[offset + size] = rest;
    used_[offset] = size;
    used_bytes_ += size;
    return offset;
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "device arena: cannot allocate ", bytes, " bytes: ", free(), " of ",
      capacity_, " bytes are free and the largest free block holds ",
      largest_free_block()));
}

void DeviceArena::Give(int64_t offset) {
  auto used = used_.find(offset);
  if (used == used_.end()) return;  // not ours: nothing to give back
  int64_t begin = offset, size = used->second;
  used_bytes_ -= size;
  used_.erase(used);
  // Merge with the free neighbours on either side.
  auto next = free_.lower_bound(begin);
  if (next != free_.end() && next->first == begin + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == begin) {
      begin = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_[begin] = size;
}

}  // namespace trainyard::engine::cuda
