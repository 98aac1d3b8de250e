// How much memory a CPU job may still take on this host, so that a model
// too big for it is refused at start instead of thrashing or being killed
// hours in: MemAvailable of /proc/meminfo, or what the process's cgroup
// (v2 memory.max, v1 memory.limit_in_bytes) leaves above its usage when
// that is lower. YARD_HOST_MEMORY_BYTES in the environment replaces both
// (tests; an operator keeping jobs under a cap). Thread-safe (reads files).
#ifndef TRAINYARD_ENGINE_HOST_MEMORY_H_
#define TRAINYARD_ENGINE_HOST_MEMORY_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainyard::engine {

struct HostMemory {
  int64_t available = 0;  // bytes
  std::string source;     // where `available` was read, for messages
};

// INVALID_ARGUMENT for a YARD_HOST_MEMORY_BYTES that is not a positive byte
// count; NOT_FOUND when neither /proc/meminfo nor a cgroup says anything
// (the caller then has nothing to check against).
absl::StatusOr<HostMemory> AvailableHostMemory();

// MemAvailable of a /proc/meminfo text, in bytes.
std::optional<int64_t> MemAvailableBytes(absl::string_view meminfo);
// What a cgroup's limit leaves above its usage (0 when past it); nullopt
// for no limit ("max", or v1's page-rounded 2^63) or text that is not one.
std::optional<int64_t> CgroupRoomBytes(absl::string_view limit,
                                       absl::string_view usage);

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_HOST_MEMORY_H_
