#include "server/attempt_usage.h"

#include <algorithm>

#include "common/proto_time.h"
#include "scheduler/cluster_snapshot.h"
#include "server/cluster_view.h"

namespace trainyard::server {
namespace {

// Thousandths of a GPU held of each of `gpus` given `grants`: the grant's
// share (a placement grants the same share of every GPU of a job on one
// worker), or the GPUs whole.
int64_t GpuMilli(
    int64_t gpus,
    const google::protobuf::RepeatedPtrField<v1::GpuGrant>& grants) {
  const int64_t each =
      grants.empty() ? scheduler::kWholeGpuMilli : grants[0].compute_milli();
  return gpus * each;
}

}  // namespace

Holding PlacementHolding(const v1::Job& job, int64_t own_gpus) {
  Holding h;
  h.gpu_milli = GpuMilli(own_gpus, job.gpu_grants());
  for (const v1::GangPart& part : job.gang_parts()) {
    h.gpu_milli += GpuMilli(part.gpu_indices_size(), part.gpu_grants());
  }
  h.cpu_slots = NeedOf(job.spec()).cpu_slots;
  return h;
}

Holding AttemptHolding(const v1::Job& job, const v1::Attempt& attempt) {
  if (attempt.gpu_milli() > 0 || attempt.cpu_slots() > 0) {
    return Holding{attempt.gpu_milli(), attempt.cpu_slots()};
  }
  const v1::JobSpec& spec = job.spec();
  const int64_t gpus = spec.resources().gpus();
  if (attempt.number() == job.attempt() &&
      (!job.gpu_grants().empty() || !job.gang_parts().empty())) {
    // The GPUs not on a part's worker are on the job's own.
    int64_t own = gpus;
    for (const v1::GangPart& part : job.gang_parts()) {
      own -= part.gpu_indices_size();
    }
    return PlacementHolding(job, std::max<int64_t>(own, 0));
  }
  const int64_t each = spec.resources().has_gpu_compute_milli()
                           ? spec.resources().gpu_compute_milli()
                           : scheduler::kWholeGpuMilli;
  return Holding{gpus * each, NeedOf(spec).cpu_slots};
}

AttemptUsage UsageOf(const v1::Job& job, const v1::Attempt& attempt,
                     absl::Time now) {
  AttemptUsage u;
  u.job_id = job.id();
  u.attempt = attempt.number();
  u.tenant = job.tenant();
  u.job_name = job.name();
  u.start = FromProtoTime(attempt.start_time());
  u.end = attempt.has_end_time() ? FromProtoTime(attempt.end_time()) : now;
  u.end = std::max(u.end, u.start);
  u.held = AttemptHolding(job, attempt);
  u.outcome = attempt.outcome();
  return u;
}

}  // namespace trainyard::server
