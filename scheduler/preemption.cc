#include "scheduler/preemption.h"

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "scheduler/node_fit.h"

namespace trainyard::scheduler {
namespace {

// At most this many waiting jobs look for victims in one pass, so a long
// queue of high-priority jobs cannot make a pass slow.
constexpr int kMaxPreemptingJobs = 256;

using JobList = std::vector<const RunningJob*>;
using WorkerIndex = absl::flat_hash_map<std::string, size_t>;

// Victims for one waiting job, and where it will run once they stopped: one
// worker, or the parts of a spread.
struct Victims {
  size_t worker = 0;
  JobList jobs;
  double lost = 0;
  std::vector<SpreadPart> spread = {};  // empty: all on `worker`
};

// Gives back what one node's holding (a job's own, or one of its parts)
// takes from `w`.
template <typename Holding>
void GiveBackHolding(WorkerCapacity& w, const Holding& h) {
  w.free_cpu_slots += h.cpu_slots;
  w.free_cpu_milli += h.cpu_milli;
  w.free_memory_bytes += h.memory_bytes;
  for (int32_t index : h.gpu_indices) {
    for (GpuCapacity& g : w.devices) {
      if (g.index != index) continue;
      if (h.gpu_memory_bytes == 0) {
        g.free_compute_milli = kWholeGpuMilli;
        g.free_memory_bytes = g.memory_bytes;
      } else {
        g.free_compute_milli += h.gpu_compute_milli;
        g.free_memory_bytes += h.gpu_memory_bytes;
      }
    }
  }
}

// Positions of the workers a running job holds something on, its own first.
std::vector<size_t> NodesOf(const RunningJob& r, const WorkerIndex& at) {
  std::vector<size_t> nodes = {at.at(r.worker_id)};
  for (const RunningPart& part : r.more_parts) {
    const size_t i = at.at(part.worker_id);
    if (std::find(nodes.begin(), nodes.end(), i) == nodes.end()) {
      nodes.push_back(i);
    }
  }
  return nodes;
}

// `w`'s free capacity into `scratch` (reusing its buffers), with what the
// `gone` jobs hold on it given back.
void FreeWithout(const WorkerCapacity& w, const JobList& gone,
                 WorkerCapacity& scratch) {
  scratch.id = w.id;
  scratch.free_cpu_slots = w.free_cpu_slots;
  scratch.free_cpu_milli = w.free_cpu_milli;
  scratch.free_memory_bytes = w.free_memory_bytes;
  scratch.devices = w.devices;
  for (const RunningJob* r : gone) GiveBack(scratch, *r);
}

// The least work lost first; the id breaks ties, so plans are the same
// for the same snapshot.
void SortByLeastWork(JobList& jobs) {
  std::sort(jobs.begin(), jobs.end(),
            [](const RunningJob* a, const RunningJob* b) {
              if (a->work_since_checkpoint != b->work_since_checkpoint) {
                return a->work_since_checkpoint < b->work_since_checkpoint;
              }
              return a->id < b->id;
            });
}

// The minimality rule, on one node or a spread alike: stop candidates in
// order of least work lost until the job fits, then spare every victim not
// needed, the costliest first. Room only grows as jobs stop, so no single
// victim of the result could be spared, and a costlier job is stopped only
// where the cheaper ones were not enough. `add`/`remove` keep the trial
// set; `fits` tests it. Returns nullopt when stopping them all is not
// enough.
std::optional<JobList> VictimsNeeded(
    const JobList& by_least_work,
    absl::FunctionRef<void(const RunningJob*)> add,
    absl::FunctionRef<void(const RunningJob*)> remove,
    absl::FunctionRef<bool()> fits) {
  JobList jobs;
  for (const RunningJob* r : by_least_work) {
    if (fits()) break;
    jobs.push_back(r);
    add(r);
  }
  if (!fits()) return std::nullopt;
  for (size_t i = jobs.size(); i-- > 0;) {
    remove(jobs[i]);
    if (fits()) {
      jobs.erase(jobs.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      add(jobs[i]);
    }
  }
  return jobs;
}

double WorkLost(const JobList& jobs) {
  double lost = 0;
  for (const RunningJob* r : jobs) lost += r->work_since_checkpoint;
  return lost;
}

// The cheapest victims on one worker that make room for the whole job.
std::optional<Victims> VictimsOn(size_t worker, const WorkerCapacity& w,
                                 JobList candidates, const PendingJob& job,
                                 const GpuDemand& demand,
                                 WorkerCapacity& scratch) {
  SortByLeastWork(candidates);
  JobList gone;
  std::optional<JobList> jobs = VictimsNeeded(
      candidates, [&](const RunningJob* r) { gone.push_back(r); },
      [&](const RunningJob* r) { std::erase(gone, r); },
      [&] {
        FreeWithout(w, gone, scratch);
        return FitsNow(scratch, job, demand);
      });
  if (!jobs) return std::nullopt;
  return Victims{worker, *jobs, WorkLost(*jobs)};
}

// The ranks of a spread job that fit each worker with a set of running jobs
// stopped, and whether they fit NodeLimit nodes in all (as SpreadOver
// decides: the largest rooms add up to every rank). Only the workers the
// stopped jobs hold something on are looked at again as the set changes.
class SpreadRoom {
 public:
  SpreadRoom(const std::vector<WorkerCapacity>& workers, const WorkerIndex& at,
             const PendingJob& job, const GpuDemand& demand)
      : workers_(workers),
        at_(at),
        job_(job),
        demand_(demand),
        room_(workers.size(), 0),
        nodes_with_(RanksOf(job) + 1, 0) {
    for (size_t i = 0; i < workers.size(); ++i) {
      room_[i] = RanksFitting(workers[i], job, demand, RanksOf(job),
                              /*when_idle=*/false);
      ++nodes_with_[room_[i]];
    }
  }

  void Stop(const RunningJob* r) {
    gone_.push_back(r);
    Refresh(*r);
  }
  void Resume(const RunningJob* r) {
    std::erase(gone_, r);
    Refresh(*r);
  }

  bool Fits() const {
    int32_t left = RanksOf(job_);
    int32_t nodes = NodeLimit(job_);
    for (int32_t r = RanksOf(job_); r > 0 && nodes > 0 && left > 0; --r) {
      const int32_t take = std::min(nodes_with_[r], nodes);
      left -= take * r;
      nodes -= take;
    }
    return left <= 0;
  }

  // Ranks that fit each worker now.
  const std::vector<int32_t>& room() const { return room_; }

 private:
  void Refresh(const RunningJob& changed) {
    for (size_t i : NodesOf(changed, at_)) {
      FreeWithout(workers_[i], gone_, scratch_);
      --nodes_with_[room_[i]];
      room_[i] = RanksFitting(scratch_, job_, demand_, RanksOf(job_),
                              /*when_idle=*/false);
      ++nodes_with_[room_[i]];
    }
  }

  const std::vector<WorkerCapacity>& workers_;
  const WorkerIndex& at_;
  const PendingJob& job_;
  const GpuDemand demand_;
  std::vector<int32_t> room_;
  std::vector<int32_t> nodes_with_;  // [r]: workers with room for r ranks
  JobList gone_;
  WorkerCapacity scratch_;
};

// For a job that may spread and that no single node can be freed for: the
// cheapest victims anywhere (VictimsNeeded) that make room for its ranks on
// at most NodeLimit nodes, and the parts it will take then.
std::optional<Victims> SpreadVictims(JobList candidates, const PendingJob& job,
                                     const GpuDemand& demand,
                                     const FreeCapacity& free,
                                     const WorkerIndex& at) {
  SortByLeastWork(candidates);
  SpreadRoom room(free.workers, at, job, demand);
  std::optional<JobList> jobs = VictimsNeeded(
      candidates, [&](const RunningJob* r) { room.Stop(r); },
      [&](const RunningJob* r) { room.Resume(r); },
      [&] { return room.Fits(); });
  if (!jobs) return std::nullopt;
  std::vector<SpreadPart> parts = SpreadOver(job, room.room());
  if (parts.empty()) return std::nullopt;  // not reached: Fits() agrees
  return Victims{parts[0].worker, *jobs, WorkLost(*jobs), std::move(parts)};
}

bool Better(const Victims& a, const Victims& b) {
  if (a.lost != b.lost) return a.lost < b.lost;
  if (a.jobs.size() != b.jobs.size()) return a.jobs.size() < b.jobs.size();
  return a.worker < b.worker;
}

// Stops the victims (every part of each is given back) and holds the room
// the job will take; returns its wait reason.
std::string Commit(const PendingJob& job, const GpuDemand& demand,
                   const Victims& v, const WorkerIndex& at,
                   absl::flat_hash_set<const RunningJob*>& taken,
                   FreeCapacity& free, Plan& plan) {
  std::vector<SpreadPart> parts = v.spread;
  if (parts.empty()) parts.push_back({v.worker, RanksOf(job), {}});
  std::vector<std::string> names;
  for (const SpreadPart& part : parts)
    names.push_back(free.workers[part.worker].id);
  for (const RunningJob* r : v.jobs) {
    taken.insert(r);
    for (size_t i : NodesOf(*r, at)) {
      GiveBack(free.workers[i], *r);
      free.summaries[i] = Summarize(free.workers[i]);
    }
    plan.preemptions.push_back({r->id, r->worker_id, job.id, names});
  }
  for (const SpreadPart& part : parts) {
    WorkerCapacity& w = free.workers[part.worker];
    Take(w, PartOf(job, part.ranks), demand,
         TightestDevices(w, demand, job.gpus > 0 ? part.ranks : 0));
    free.summaries[part.worker] = Summarize(w);
  }
  return absl::StrCat("waiting for ", v.jobs.size(),
                      " lower-priority job(s) on worker",
                      names.size() > 1 ? "s " : " ", absl::StrJoin(names, ", "),
                      " to be preempted");
}

}  // namespace

void GiveBack(WorkerCapacity& w, const RunningJob& job) {
  if (job.worker_id == w.id) GiveBackHolding(w, job);
  for (const RunningPart& part : job.more_parts) {
    if (part.worker_id == w.id) GiveBackHolding(w, part);
  }
}

void PlanPreemptions(const ClusterSnapshot& snapshot, bool exclusive,
                     FreeCapacity& free, Plan& plan) {
  WorkerIndex at;
  for (size_t i = 0; i < free.workers.size(); ++i) at[free.workers[i].id] = i;
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
    // Candidates: preemptible, lower priority, not yet taken; on each
    // worker, those holding something there.
    JobList all;
    std::vector<JobList> by_worker(free.workers.size());
    for (const RunningJob& r : snapshot.running()) {
      if (!r.preemptible || r.priority >= job.priority || taken.contains(&r)) {
        continue;
      }
      all.push_back(&r);
      for (size_t i : NodesOf(r, at)) by_worker[i].push_back(&r);
    }
    if (all.empty()) continue;
    if (++attempts > kMaxPreemptingJobs) break;
    const GpuDemand demand = DemandOf(job, exclusive);
    std::optional<Victims> best;
    for (size_t i = 0; i < by_worker.size(); ++i) {
      if (by_worker[i].empty()) continue;
      std::optional<Victims> v =
          VictimsOn(i, free.workers[i], by_worker[i], job, demand, scratch);
      if (v && (!best || Better(*v, *best))) best = std::move(v);
    }
    // One node preferred, as placement does; else over several.
    if (!best && MaySpread(job)) {
      best = SpreadVictims(std::move(all), job, demand, free, at);
    }
    if (!best) continue;
    wait.reason = Commit(job, demand, *best, at, taken, free, plan);
  }
}

}  // namespace trainyard::scheduler
