// What one attempt of a job held, and for how long: the unit of usage
// accounting (GetUsage, `yard usage`). An attempt holds its placement from
// its assignment (SCHEDULED) until it ends, whatever it does meanwhile,
// since the scheduler keeps those resources from every other job for that
// long. JobLifecycle::Assign records the holding in the attempt; the store
// keeps each ended attempt's usage in a table of its own
// (JobStore::EndedAttempts), which outlives the job's deletion.
#ifndef TRAINYARD_SERVER_ATTEMPT_USAGE_H_
#define TRAINYARD_SERVER_ATTEMPT_USAGE_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "trainyard/v1/jobs.pb.h"

namespace trainyard::server {

// GPU compute in thousandths of a GPU (a whole GPU is 1000), and CPU job
// slots.
struct Holding {
  int64_t gpu_milli = 0;
  int32_t cpu_slots = 0;

  bool operator==(const Holding& o) const {
    return gpu_milli == o.gpu_milli && cpu_slots == o.cpu_slots;
  }
};

// What holding `held` for `seconds` is charged: GPU-seconds, a shared GPU
// at its share, and CPU-slot-seconds.
inline double GpuSeconds(const Holding& held, double seconds) {
  return seconds * static_cast<double>(held.gpu_milli) / 1000.0;
}
inline double CpuSlotSeconds(const Holding& held, double seconds) {
  return seconds * held.cpu_slots;
}

// What the current placement of `job` holds: on its own worker
// `own_gpus` GPUs (whole, or the share of Job.gpu_grants), plus every
// gang part's; a CPU job its slots (one per rank, all parts together).
Holding PlacementHolding(const v1::Job& job, int64_t own_gpus);

// What `attempt` of `job` held: as recorded. For an attempt recorded
// before accounting existed (both fields 0, in a store a server before
// schema 5 wrote): when it is the job's current attempt and the record
// still carries its placement's shares (Job.gpu_grants, gang parts), what
// they grant, a shared GPU at its share; else what the spec asks for.
Holding AttemptHolding(const v1::Job& job, const v1::Attempt& attempt);

// One attempt's usage.
struct AttemptUsage {
  std::string job_id;
  int32_t attempt = 0;
  std::string tenant;
  std::string job_name;
  absl::Time start;
  absl::Time end;  // for one still running: when it was read
  Holding held;
  // How it ended (Attempt.outcome); unspecified while it runs.
  v1::JobState outcome = v1::JOB_STATE_UNSPECIFIED;
};

// The usage of `attempt` of `job`; one that has not ended is charged up to
// `now`.
AttemptUsage UsageOf(const v1::Job& job, const v1::Attempt& attempt,
                     absl::Time now);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_ATTEMPT_USAGE_H_
