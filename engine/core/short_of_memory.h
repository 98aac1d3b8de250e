// A job refused at start for memory this machine lacks (the host's
// available memory for a CPU job, a GPU's free memory for a GPU job), as
// opposed to a model too big for any machine or a spec's mistake:
// RESOURCE_EXHAUSTED marked so, which yard-train exits with 5 and the
// server restarts elsewhere under max_restarts. Pure functions.
#ifndef TRAINYARD_ENGINE_CORE_SHORT_OF_MEMORY_H_
#define TRAINYARD_ENGINE_CORE_SHORT_OF_MEMORY_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace trainyard::engine {

inline constexpr char kShortOfMemoryPayload[] =
    "trainyard.engine/short-of-memory";

inline absl::Status ShortOfMemoryError(absl::string_view message) {
  absl::Status s = absl::ResourceExhaustedError(message);
  s.SetPayload(kShortOfMemoryPayload, absl::Cord("1"));
  return s;
}

// Whether `s` is (or carries, through a rewording that kept the payload)
// ShortOfMemoryError.
inline bool IsShortOfMemory(const absl::Status& s) {
  return s.GetPayload(kShortOfMemoryPayload).has_value();
}

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_SHORT_OF_MEMORY_H_
