#include "server/scheduler_snapshot.h"

#include <algorithm>
#include <limits>
#include <map>

#include "common/proto_time.h"
#include "engine/job_config.h"
#include "server/cluster_view.h"

namespace trainyard::server {
namespace {

constexpr double kLeastWorkAtRisk = 1e-3;  // GPU-seconds

using WorkersById = std::map<std::string, const scheduler::WorkerCapacity*>;

// Whether every GPU of `gpus` is a device of `w` (else the snapshot refuses
// the job).
template <typename Indices>
bool HeldOn(const Indices& gpus, const scheduler::WorkerCapacity& w) {
  return std::all_of(gpus.begin(), gpus.end(), [&](int32_t g) {
    return std::find(w.gpus.begin(), w.gpus.end(), g) != w.gpus.end();
  });
}

// The parts of a job spread over several workers, as UsageByWorker counts
// them (cluster_view.h): each part not yet exited holds its GPUs (whole, or
// its grants' share of each) and, for a CPU job, a slot per rank. A part on
// a worker that is not schedulable now, or naming GPUs that worker does not
// have (a stale record), is left out as the snapshot would refuse it: the
// scheduler can use nothing there anyway.
std::vector<scheduler::RunningPart> PartsOf(const JobRecord& r,
                                            const WorkersById& workers) {
  std::vector<scheduler::RunningPart> parts;
  const bool cpu_job = NeedOf(r.job.spec()).gpus == 0;
  for (const v1::GangPart& gang : r.job.gang_parts()) {
    auto it = workers.find(gang.worker_id());
    if (gang.exited() || it == workers.end() ||
        !HeldOn(gang.gpu_indices(), *it->second)) {
      continue;
    }
    scheduler::RunningPart& part = parts.emplace_back();
    part.worker_id = gang.worker_id();
    part.gpu_indices.assign(gang.gpu_indices().begin(),
                            gang.gpu_indices().end());
    // As Job.gpu_grants: none means the GPUs whole; a placement grants the
    // same share of each GPU of one part.
    if (!gang.gpu_grants().empty()) {
      const v1::GpuGrant& g = gang.gpu_grants(0);
      part.gpu_memory_bytes = std::max<int64_t>(g.memory_bytes(), 1);
      part.gpu_compute_milli = g.compute_milli();
    }
    part.cpu_slots = cpu_job ? gang.ranks() : 0;
  }
  return parts;
}

}  // namespace

int64_t GpuMemoryEstimate(const v1::JobSpec& spec) {
  if (spec.resources().gpus() <= 0) return 0;
  return engine::EstimateSpecMemory(spec, engine::DeviceKind::kCuda).total();
}

scheduler::PendingJob PendingJobOf(const JobRecord& record,
                                   int64_t gpu_memory_estimate) {
  const JobNeed need = NeedOf(record.job.spec());
  scheduler::PendingJob p;
  p.id = record.job.id();
  p.priority = record.job.spec().priority();
  p.submit_order = record.create_seq;
  p.gpus = need.gpus;
  p.cpu_slots = std::max(need.cpu_slots, 1);
  p.tenant = record.job.tenant();
  // Unset: as many workers as it takes (one preferred).
  p.max_nodes = record.job.spec().resources().max_nodes();
  if (p.gpus > 0) {
    const auto& models = record.job.spec().resources().gpu_models();
    p.gpu_models.assign(models.begin(), models.end());
  }
  if (p.gpus > 0 && gpu_memory_estimate > 0) {
    p.gpu_memory_bytes = gpu_memory_estimate;
    p.gpu_memory_estimated = true;
    // Declared share, else (0) in proportion to memory.
    p.gpu_compute_milli = record.job.spec().resources().gpu_compute_milli();
  }
  return p;
}

scheduler::AvoidedWorkers AvoidedWorkersOf(
    const std::vector<JobRecord>& queued) {
  scheduler::AvoidedWorkers avoided;
  for (const JobRecord& r : queued) {
    for (const v1::Attempt& a : r.job.attempts()) {
      if (a.outcome() != v1::FAILED) continue;
      std::vector<std::string>& workers = avoided[r.job.id()];
      workers.push_back(a.worker_id());
      workers.insert(workers.end(), a.more_workers().begin(),
                     a.more_workers().end());
    }
  }
  return avoided;
}

std::vector<scheduler::PendingJob> PendingJobCache::Of(
    const std::vector<JobRecord>& queued) {
  ++pass_;
  std::vector<scheduler::PendingJob> out;
  out.reserve(queued.size());
  for (const JobRecord& r : queued) {
    auto [it, added] = estimates_.try_emplace(r.job.id());
    if (added) it->second.bytes = estimate_(r.job.spec());
    it->second.pass = pass_;
    out.push_back(PendingJobOf(r, it->second.bytes));
  }
  // Jobs that left the queue go once they outnumber the queued ones, so
  // pruning costs a pass no more than the lookups did.
  if (estimates_.size() > 2 * queued.size()) {
    for (auto it = estimates_.begin(); it != estimates_.end();) {
      if (it->second.pass != pass_) {
        estimates_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  return out;
}

double WorkSinceCheckpoint(const v1::Job& job, absl::Time now) {
  const double width = std::max(job.spec().resources().gpus(), 1);
  int64_t safe_step = job.last_checkpoint().step();
  const v1::Attempt* attempt = job.attempts_size() > 0
                                   ? &job.attempts(job.attempts_size() - 1)
                                   : nullptr;
  if (attempt != nullptr) {
    safe_step = std::max(safe_step, attempt->resumed_from_step());
  }
  const int64_t steps = std::max<int64_t>(0, job.progress().step() - safe_step);
  const v1::BatchSpec& batch = job.spec().batch();
  const double examples_per_step =
      static_cast<double>(batch.micro_batch()) *
      std::max(batch.has_grad_accum() ? batch.grad_accum() : 1, 1);
  const double rate = job.progress().samples_per_second();
  if (rate > 0 && examples_per_step > 0) {
    return width * static_cast<double>(steps) * examples_per_step / rate;
  }
  // No throughput reported yet: the whole attempt so far is at risk.
  if (attempt == nullptr || !attempt->has_start_time()) return 0;
  const absl::Duration ran = now - FromProtoTime(attempt->start_time());
  return width * std::max(0.0, absl::ToDoubleSeconds(ran));
}

std::vector<scheduler::RunningJob> RunningJobsOf(
    const std::vector<JobRecord>& active,
    const std::vector<scheduler::WorkerCapacity>& workers, absl::Time now) {
  WorkersById by_id;
  for (const scheduler::WorkerCapacity& w : workers) by_id[w.id] = &w;
  std::vector<scheduler::RunningJob> out;
  for (const JobRecord& r : active) {
    auto it = by_id.find(r.job.worker_id());
    if (it == by_id.end() || !HeldOn(r.gpu_indices, *it->second)) continue;
    scheduler::RunningJob& j = out.emplace_back();
    j.id = r.job.id();
    j.worker_id = r.job.worker_id();
    j.tenant = r.job.tenant();
    j.priority = r.job.spec().priority();
    j.gpu_indices = r.gpu_indices;
    const GpuHold hold = RecordedHold(r);
    j.gpu_memory_bytes = hold.memory_bytes;
    j.gpu_compute_milli = hold.compute_milli;
    // A spread job holds this on its own worker, the rest in its parts.
    j.cpu_slots = OwnWorkerCpuSlots(r);
    j.more_parts = PartsOf(r, by_id);
    if (r.job.state() == v1::PREEMPTING) {
      j.priority = std::numeric_limits<int32_t>::min();
      j.preemptible = true;
      j.work_since_checkpoint = 0;
      continue;
    }
    j.preemptible = r.job.state() == v1::RUNNING && !r.cancel_requested();
    // A job that runs always risks a little, so one already stopping (0)
    // is strictly the cheaper victim.
    j.work_since_checkpoint =
        std::max(WorkSinceCheckpoint(r.job, now), kLeastWorkAtRisk);
  }
  return out;
}

}  // namespace trainyard::server
