#include "scheduler/fair_share.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

namespace trainyard::scheduler {
namespace {

// What a running job holds on one node (its own worker's holdings, or one
// of its parts), as fair share counts it.
template <typename Holding>
std::array<double, 4> UseOf(const Holding& h) {
  const double per_gpu =
      h.gpu_memory_bytes == 0 ? kWholeGpuMilli : h.gpu_compute_milli;
  return {static_cast<double>(h.gpu_indices.size()) * per_gpu,
          static_cast<double>(h.cpu_milli), static_cast<double>(h.memory_bytes),
          static_cast<double>(h.cpu_slots)};
}

}  // namespace

std::vector<const PendingJob*> InPlacementOrder(
    const std::vector<PendingJob>& pending) {
  // Sorting copies of the keys keeps the comparisons in cache; the id only
  // breaks exact ties, which are rare. Queues hold few priorities and come
  // mostly in submit order, so the jobs are first split by priority (a
  // stable counting pass) and each level is sorted only if it is not yet.
  struct Entry {
    int32_t priority;
    int64_t submit_order;
    const PendingJob* job;
  };
  auto before = [](const Entry& a, const Entry& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.submit_order != b.submit_order) {
      return a.submit_order < b.submit_order;
    }
    return a.job->id < b.job->id;
  };
  absl::flat_hash_map<int32_t, size_t> level_start;  // count, then start
  for (const PendingJob& j : pending) ++level_start[j.priority];
  std::vector<int32_t> levels;
  for (const auto& [priority, count] : level_start) levels.push_back(priority);
  std::sort(levels.begin(), levels.end(), std::greater<int32_t>());
  size_t start = 0;
  for (int32_t priority : levels) {
    start += std::exchange(level_start[priority], start);
  }
  std::vector<Entry> entries(pending.size());
  for (const PendingJob& j : pending) {
    entries[level_start[j.priority]++] = {j.priority, j.submit_order, &j};
  }
  if (!std::is_sorted(entries.begin(), entries.end(), before)) {
    std::sort(entries.begin(), entries.end(), before);
  }
  std::vector<const PendingJob*> order;
  order.reserve(entries.size());
  for (const Entry& e : entries) order.push_back(e.job);
  return order;
}

JobOrder::JobOrder(const ClusterSnapshot& snapshot, bool fair_share)
    : snapshot_(snapshot),
      fair_share_(fair_share),
      order_(InPlacementOrder(snapshot.pending())) {
  if (!fair_share_) return;
  for (const WorkerCapacity& w : snapshot.workers()) {
    total_[0] += static_cast<double>(w.devices.size()) * kWholeGpuMilli;
    total_[1] += static_cast<double>(w.cpu_milli);
    total_[2] += static_cast<double>(w.memory_bytes);
    total_[3] += w.cpu_slots;
  }
  for (const RunningJob& r : snapshot.running()) {
    Add(used_, r.tenant, UseOf(r));
    for (const RunningPart& part : r.more_parts) {
      Add(used_, r.tenant, UseOf(part));
    }
  }
}

const PendingJob* JobOrder::Next() {
  if (!fair_share_) return next_ < order_.size() ? order_[next_++] : nullptr;
  if (level_.empty()) {
    if (next_ == order_.size()) return nullptr;
    const int32_t priority = order_[next_]->priority;
    while (next_ < order_.size() && order_[next_]->priority == priority) {
      level_[order_[next_]->tenant].push_back(order_[next_]);
      ++next_;
    }
  }
  auto pick = LeastShared(level_, used_);
  const PendingJob* job = pick->second.front();
  pick->second.pop_front();
  if (pick->second.empty()) level_.erase(pick);
  return job;
}

void JobOrder::Placed(const PendingJob& job, int64_t gpu_milli) {
  if (!fair_share_) return;
  Add(used_, job.tenant, AskOf(job, static_cast<double>(gpu_milli)));
}

JobOrder::Usage JobOrder::AskOf(const PendingJob& job, double gpu_milli) {
  return {gpu_milli, static_cast<double>(job.cpu_milli),
          static_cast<double>(job.memory_bytes),
          static_cast<double>(job.gpus == 0 ? job.cpu_slots : 0)};
}

template <typename Level>
typename Level::iterator JobOrder::LeastShared(
    Level& level, const std::map<std::string, Usage>& used) const {
  auto pick = level.begin();
  double least = std::numeric_limits<double>::infinity();
  for (auto it = level.begin(); it != level.end(); ++it) {
    const double share = DominantShare(it->first, used);
    if (share < least) least = share, pick = it;
  }
  return pick;
}

void JobOrder::NumberWaits(std::vector<JobWait>& waits) const {
  if (fair_share_ && waits.size() > 1) {
    std::vector<const PendingJob*> jobs;
    jobs.reserve(waits.size());
    absl::flat_hash_set<std::string> infeasible;
    for (const JobWait& w : waits) {
      const PendingJob* job = snapshot_.FindJob(w.job_id);
      if (job == nullptr) continue;  // not a job of this pass: no place
      jobs.push_back(job);
      if (w.kind == WaitKind::kInfeasible) infeasible.insert(job->id);
    }
    std::sort(jobs.begin(), jobs.end(),
              [](const PendingJob* a, const PendingJob* b) {
                return std::tie(b->priority, a->submit_order, a->id) <
                       std::tie(a->priority, b->submit_order, b->id);
              });
    absl::flat_hash_map<std::string, int64_t> position;
    std::map<std::string, Usage> used = used_;
    for (size_t start = 0; start < jobs.size();) {
      size_t end = start;
      std::map<std::string, std::deque<const PendingJob*>> level;
      while (end < jobs.size() &&
             jobs[end]->priority == jobs[start]->priority) {
        level[jobs[end]->tenant].push_back(jobs[end]);
        ++end;
      }
      while (!level.empty()) {
        auto pick = LeastShared(level, used);
        const PendingJob& job = *pick->second.front();
        pick->second.pop_front();
        position[job.id] = static_cast<int64_t>(position.size()) + 1;
        if (pick->second.empty()) level.erase(pick);
        if (infeasible.contains(job.id)) continue;  // it will not start
        // As if it started: what it asks counts for its tenant.
        const double per_gpu = job.whole_gpus() || job.gpu_compute_milli == 0
                                   ? kWholeGpuMilli
                                   : job.gpu_compute_milli;
        Add(used, job.tenant, AskOf(job, job.gpus * per_gpu));
      }
      start = end;
    }
    for (JobWait& w : waits) {
      auto it = position.find(w.job_id);
      w.position = it == position.end() ? 0 : it->second;
    }
  } else {
    for (size_t i = 0; i < waits.size(); ++i) {
      waits[i].position = static_cast<int64_t>(i) + 1;
    }
  }
}

double JobOrder::DominantShare(const std::string& tenant,
                               const std::map<std::string, Usage>& used) const {
  auto it = used.find(tenant);
  if (it == used.end()) return 0;
  double dominant = 0;
  for (size_t i = 0; i < total_.size(); ++i) {
    if (total_[i] > 0) dominant = std::max(dominant, it->second[i] / total_[i]);
  }
  return dominant / snapshot_.TenantWeight(tenant);
}

void JobOrder::Add(std::map<std::string, Usage>& used,
                   const std::string& tenant, const Usage& use) {
  Usage& u = used[tenant];
  for (size_t i = 0; i < u.size(); ++i) u[i] += use[i];
}

}  // namespace trainyard::scheduler
