#include "scheduler/preemption.h"

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "scheduler/node_fit.h"

namespace trainyard::scheduler {
namespace {

// At most this many waiting jobs look for victims in one pass, so a long
// queue of high-priority jobs cannot make a pass slow.
constexpr int kMaxPreemptingJobs = 256;

struct Victims {
  size_t worker = 0;
  std::vector<const RunningJob*> jobs;
  double lost = 0;
};

bool FitsWithout(const WorkerCapacity& w,
                 const std::vector<const RunningJob*>& gone,
                 const PendingJob& job, const GpuDemand& demand,
                 WorkerCapacity& scratch) {
  scratch.free_cpu_slots = w.free_cpu_slots;
  scratch.free_cpu_milli = w.free_cpu_milli;
  scratch.free_memory_bytes = w.free_memory_bytes;
  scratch.devices = w.devices;
  for (const RunningJob* r : gone) GiveBack(scratch, *r);
  return FitsNow(scratch, job, demand);
}

// The fewest-work victims on one worker that make room for `job`.
std::optional<Victims> VictimsOn(size_t worker, const WorkerCapacity& w,
                                 std::vector<const RunningJob*> candidates,
                                 const PendingJob& job, const GpuDemand& demand,
                                 WorkerCapacity& scratch) {
  std::sort(candidates.begin(), candidates.end(),
            [](const RunningJob* a, const RunningJob* b) {
              if (a->work_since_checkpoint != b->work_since_checkpoint) {
                return a->work_since_checkpoint < b->work_since_checkpoint;
              }
              return a->id < b->id;
            });
  Victims v{worker, {}, 0};
  for (const RunningJob* r : candidates) {
    if (FitsWithout(w, v.jobs, job, demand, scratch)) break;
    v.jobs.push_back(r);
  }
  if (!FitsWithout(w, v.jobs, job, demand, scratch)) return std::nullopt;
  // Spare victims not needed, the costliest first.
  for (size_t i = v.jobs.size(); i-- > 0;) {
    std::vector<const RunningJob*> fewer = v.jobs;
    fewer.erase(fewer.begin() + static_cast<std::ptrdiff_t>(i));
    if (FitsWithout(w, fewer, job, demand, scratch)) v.jobs = std::move(fewer);
  }
  for (const RunningJob* r : v.jobs) v.lost += r->work_since_checkpoint;
  return v;
}

bool Better(const Victims& a, const Victims& b) {
  if (a.lost != b.lost) return a.lost < b.lost;
  if (a.jobs.size() != b.jobs.size()) return a.jobs.size() < b.jobs.size();
  return a.worker < b.worker;
}

}  // namespace

void GiveBack(WorkerCapacity& w, const RunningJob& job) {
  w.free_cpu_slots += job.cpu_slots;
  w.free_cpu_milli += job.cpu_milli;
  w.free_memory_bytes += job.memory_bytes;
  for (int32_t index : job.gpu_indices) {
    for (GpuCapacity& g : w.devices) {
      if (g.index != index) continue;
      if (job.gpu_memory_bytes == 0) {
        g.free_compute_milli = kWholeGpuMilli;
        g.free_memory_bytes = g.memory_bytes;
      } else {
        g.free_compute_milli += job.gpu_compute_milli;
        g.free_memory_bytes += job.gpu_memory_bytes;
      }
    }
  }
}

void PlanPreemptions(const ClusterSnapshot& snapshot, bool exclusive,
                     FreeCapacity& free, Plan& plan) {
  absl::flat_hash_map<std::string, size_t> worker_at;
  for (size_t i = 0; i < free.workers.size(); ++i) {
    worker_at[free.workers[i].id] = i;
  }
  int32_t lowest = 0;  // the lowest priority a job could be preempted at
  bool any_preemptible = false;
  for (const RunningJob& r : snapshot.running()) {
    if (!r.preemptible) continue;
    lowest = any_preemptible ? std::min(lowest, r.priority) : r.priority;
    any_preemptible = true;
  }
  if (!any_preemptible) return;
  absl::flat_hash_set<const RunningJob*> taken;
  WorkerCapacity scratch;
  int attempts = 0;
  for (JobWait& wait : plan.waits) {
    if (wait.kind != WaitKind::kRetryLater) continue;
    const PendingJob& job = *snapshot.FindJob(wait.job_id);
    if (job.priority <= lowest) continue;
    // Candidates per worker: preemptible, lower priority, not yet taken.
    std::vector<std::vector<const RunningJob*>> by_worker(free.workers.size());
    bool any = false;
    for (const RunningJob& r : snapshot.running()) {
      if (!r.preemptible || r.priority >= job.priority || taken.contains(&r)) {
        continue;
      }
      by_worker[worker_at.at(r.worker_id)].push_back(&r);
      any = true;
    }
    if (!any) continue;
    if (++attempts > kMaxPreemptingJobs) break;
    const GpuDemand demand = DemandOf(job, exclusive);
    std::optional<Victims> best;
    for (size_t i = 0; i < by_worker.size(); ++i) {
      if (by_worker[i].empty()) continue;
      std::optional<Victims> v =
          VictimsOn(i, free.workers[i], by_worker[i], job, demand, scratch);
      if (v && (!best || Better(*v, *best))) best = std::move(v);
    }
    if (!best) continue;
    WorkerCapacity& w = free.workers[best->worker];
    for (const RunningJob* r : best->jobs) {
      taken.insert(r);
      GiveBack(w, *r);
      plan.preemptions.push_back({r->id, w.id, job.id});
    }
    // Hold the room for this job: take what it will use.
    Take(w, job, demand, TightestDevices(w, demand, job.gpus));
    free.summaries[best->worker] = Summarize(w);
    wait.reason = absl::StrCat("waiting for ", best->jobs.size(),
                               " lower-priority job(s) on worker ", w.id,
                               " to be preempted");
  }
}

}  // namespace trainyard::scheduler
