// See host_memory.h.
#include "engine/host_memory.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace trainyard::engine {
namespace {

// Read to the end, not by the size stat gives: /proc files have none.
// "" when it cannot be read.
std::string ReadSmall(const std::string& path) {
  std::ifstream in(path);
  std::string text, line;
  while (text.size() < (1 << 20) && std::getline(in, line)) {
    text.append(line).push_back('\n');
  }
  return text;
}

// The process's cgroup folders holding its memory limit: v2's unified
// hierarchy and v1's memory controller, each also at the mount's root (a
// container sees its own cgroup there).
std::vector<std::pair<std::string, std::string>> CgroupLimitFiles() {
  std::vector<std::pair<std::string, std::string>> files;
  for (absl::string_view line : absl::StrSplit(ReadSmall("/proc/self/cgroup"),
                                               '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    const std::string path(f[2] == "/" ? "" : f[2]);
    if (f[0] == "0" && f[1].empty()) {
      for (const std::string& dir :
           {"/sys/fs/cgroup" + path, std::string("/sys/fs/cgroup")}) {
        files.emplace_back(dir + "/memory.max", dir + "/memory.current");
      }
    } else if (absl::StrContains(f[1], "memory")) {
      for (const std::string& dir : {"/sys/fs/cgroup/memory" + path,
                                     std::string("/sys/fs/cgroup/memory")}) {
        files.emplace_back(dir + "/memory.limit_in_bytes",
                           dir + "/memory.usage_in_bytes");
      }
    }
  }
  return files;
}

}  // namespace

std::optional<int64_t> MemAvailableBytes(absl::string_view meminfo) {
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemAvailable:")) continue;
    line = absl::StripAsciiWhitespace(line);
    int64_t kib = 0;
    if (!absl::ConsumeSuffix(&line, "kB") ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib) || kib < 0) {
      return std::nullopt;
    }
    return kib * 1024;
  }
  return std::nullopt;
}

std::optional<int64_t> CgroupRoomBytes(absl::string_view limit,
                                       absl::string_view usage) {
  int64_t max = 0, used = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(limit), &max) ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(usage), &used) || max <= 0 ||
      max >= (int64_t{1} << 62)) {
    return std::nullopt;
  }
  return std::max<int64_t>(0, max - used);
}

absl::StatusOr<HostMemory> AvailableHostMemory() {
  if (const char* cap = std::getenv("YARD_HOST_MEMORY_BYTES");
      cap != nullptr && *cap != '\0') {
    int64_t bytes = 0;
    if (!absl::SimpleAtoi(cap, &bytes) || bytes <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "YARD_HOST_MEMORY_BYTES must be a positive byte count, got '", cap,
          "'"));
    }
    return HostMemory{bytes, "YARD_HOST_MEMORY_BYTES"};
  }
  std::optional<HostMemory> best;
  if (std::optional<int64_t> avail =
          MemAvailableBytes(ReadSmall("/proc/meminfo"))) {
    best = HostMemory{*avail, "MemAvailable in /proc/meminfo"};
  }
  for (const auto& [limit, usage] : CgroupLimitFiles()) {
    std::optional<int64_t> room =
        CgroupRoomBytes(ReadSmall(limit), ReadSmall(usage));
    if (room.has_value() && (!best.has_value() || *room < best->available)) {
      best = HostMemory{*room, absl::StrCat("the cgroup's limit (", limit,
                                            ") less its usage")};
    }
  }
  if (!best.has_value()) {
    return absl::NotFoundError("no /proc/meminfo and no cgroup memory limit");
  }
  return *best;
}

}  // namespace trainyard::engine
