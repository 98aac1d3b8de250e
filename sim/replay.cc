#include "sim/replay.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "scheduler/node_fit.h"
#include "scheduler/preemption.h"

namespace trainyard::sim {
namespace {

using scheduler::PendingJob;
using scheduler::RunningJob;
using scheduler::WorkerCapacity;

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

struct Job {
  PendingJob shape;
  int64_t arrive = 0, duration = 0, start = -1, end = -1;
  RunningJob holding;  // what it holds while running
};

class Replayer {
 public:
  Replayer(const std::vector<WorkerCapacity>& cluster,
           const scheduler::PlacementPolicy& policy, std::vector<Job> jobs,
           std::vector<scheduler::TaskClass> workload, ReplayOptions options)
      : policy_(policy),
        jobs_(std::move(jobs)),
        workload_(std::move(workload)),
        options_(options),
        free_(cluster) {
    for (size_t i = 0; i < free_.size(); ++i) {
      capacity_ += int64_t{scheduler::kWholeGpuMilli} *
                   static_cast<int64_t>(free_[i].devices.size());
      worker_at_[free_[i].id] = i;
    }
  }

  absl::Status Run() {
    std::vector<size_t> order(jobs_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return jobs_[a].arrive < jobs_[b].arrive;
    });
    for (size_t k = 0; k < order.size(); ++k) {
      jobs_[order[k]].shape.submit_order = static_cast<int64_t>(k);
    }
    first_ = jobs_[order[0]].arrive;
    last_ = next_sample_ = first_;
    size_t next = 0;
    while (next < order.size() || !ends_.empty()) {
      const int64_t t =
          std::min(next < order.size() ? jobs_[order[next]].arrive : kNever,
                   ends_.empty() ? kNever : ends_.top().first);
      Advance(t);
      Depart(t);
      while (next < order.size() && jobs_[order[next]].arrive == t) {
        queue_.push_back(order[next++]);
      }
      RETURN_IF_ERROR(Pass(t));
    }
    return absl::OkStatus();
  }

  ReplayResult Result() const {
    ReplayResult r = result_;
    r.jobs = static_cast<int64_t>(jobs_.size());
    r.never_started = static_cast<int64_t>(queue_.size());
    r.sample_every_s = sample_every_;
    std::vector<double> waits, jcts;
    for (const Job& j : jobs_) {
      if (j.start < 0) continue;
      waits.push_back(static_cast<double>(j.start - j.arrive));
      jcts.push_back(static_cast<double>(j.end - j.arrive));
    }
    for (double w : waits)
      r.mean_wait_s += w / static_cast<double>(waits.size());
    for (double c : jcts) r.mean_jct_s += c / static_cast<double>(jcts.size());
    r.p99_wait_s = Percentile(waits, 0.99);
    r.p99_jct_s = Percentile(jcts, 0.99);
    r.makespan_s = last_ - first_;
    r.mean_allocated_share =
        last_ > first_ ? area_ / static_cast<double>(last_ - first_) : 0;
    r.allocated_while_queued =
        queued_time_ > 0 ? queued_area_ / static_cast<double>(queued_time_) : 0;
    return r;
  }

 private:
  double Allocated() const {
    return static_cast<double>(allocated_) / static_cast<double>(capacity_);
  }

  // Accrues allocation over [last_, t) and takes the samples in it.
  void Advance(int64_t t) {
    area_ += Allocated() * static_cast<double>(t - last_);
    if (!queue_.empty()) {
      queued_area_ += Allocated() * static_cast<double>(t - last_);
      queued_time_ += t - last_;
    }
    while (next_sample_ < t) {
      if (result_.samples.size() >= options_.max_samples) {
        HalveSamples();
        continue;
      }
      result_.samples.push_back(
          {next_sample_, Allocated(), static_cast<int64_t>(queue_.size())});
      next_sample_ += sample_every_;
    }
    last_ = t;
  }

  // Keeps every other sample (the first included) at twice the interval.
  void HalveSamples() {
    std::vector<AllocationSample>& s = result_.samples;
    for (size_t i = 0; 2 * i < s.size(); ++i) s[i] = s[2 * i];
    s.resize((s.size() + 1) / 2);
    sample_every_ *= 2;
    next_sample_ = s.back().time_s + sample_every_;
  }

  void Depart(int64_t t) {
    while (!ends_.empty() && ends_.top().first == t) {
      Job& j = jobs_[ends_.top().second];
      ends_.pop();
      scheduler::GiveBack(free_[worker_at_.at(j.holding.worker_id)], j.holding);
      allocated_ -= RequestMilli(j.shape);
    }
  }

  static int64_t RequestMilli(const PendingJob& j) {
    return j.gpus == 0 ? 0 : int64_t{j.gpus} * j.gpu_compute_milli;
  }

  absl::Status Pass(int64_t t);
  void Start(size_t index, const scheduler::Placement& p, int64_t t);

  const scheduler::PlacementPolicy& policy_;
  std::vector<Job> jobs_;
  const std::vector<scheduler::TaskClass> workload_;
  const ReplayOptions options_;
  std::vector<WorkerCapacity> free_;
  absl::flat_hash_map<std::string, size_t> worker_at_;
  std::vector<size_t> queue_;  // job indices, in arrival order
  std::priority_queue<std::pair<int64_t, size_t>,
                      std::vector<std::pair<int64_t, size_t>>, std::greater<>>
      ends_;
  int64_t capacity_ = 0, allocated_ = 0;
  int64_t first_ = 0, last_ = 0, next_sample_ = 0;
  int64_t sample_every_ = options_.sample_every_s;
  double area_ = 0, queued_area_ = 0;
  int64_t queued_time_ = 0;
  ReplayResult result_;
};

void Replayer::Start(size_t index, const scheduler::Placement& p, int64_t t) {
  Job& j = jobs_[index];
  WorkerCapacity& w = free_[worker_at_.at(p.worker_id)];
  const scheduler::GpuDemand demand = scheduler::DemandOf(j.shape, p.exclusive);
  std::vector<size_t> positions;
  for (int32_t g : p.gpu_indices) {
    size_t pos = 0;
    while (w.devices[pos].index != g) ++pos;
    positions.push_back(pos);
  }
  scheduler::Take(w, j.shape, demand, positions);
  j.holding = {j.shape.id, w.id};
  j.holding.gpu_indices = p.gpu_indices;
  j.holding.gpu_memory_bytes = demand.whole ? 0 : demand.memory_bytes;
  j.holding.gpu_compute_milli = demand.compute_milli;
  j.holding.cpu_slots = j.shape.gpus == 0 ? j.shape.cpu_slots : 0;
  j.holding.cpu_milli = j.shape.cpu_milli;
  j.holding.memory_bytes = j.shape.memory_bytes;
  j.start = t;
  j.end = t + j.duration;
  allocated_ += RequestMilli(j.shape);
  ends_.push({j.end, index});
}

absl::Status Replayer::Pass(int64_t t) {
  if (queue_.empty()) return absl::OkStatus();
  std::vector<PendingJob> pending;
  pending.reserve(queue_.size());
  for (size_t i : queue_) pending.push_back(jobs_[i].shape);
  ASSIGN_OR_RETURN(
      scheduler::ClusterSnapshot snapshot,
      scheduler::ClusterSnapshot::Create(free_, std::move(pending), workload_));
  const scheduler::Plan plan = policy_.Place(snapshot);
  ++result_.passes;
  if (absl::Status s = scheduler::CheckPlan(snapshot, plan); !s.ok()) {
    return absl::InternalError(s.message());
  }
  for (const scheduler::Placement& p : plan.placements) {
    size_t index = 0;
    (void)absl::SimpleAtoi(p.job_id, &index);
    Start(index, p, t);
  }
  std::vector<size_t> still;
  for (const scheduler::JobWait& w : plan.waits) {
    size_t index = 0;
    (void)absl::SimpleAtoi(w.job_id, &index);
    if (w.kind == scheduler::WaitKind::kInfeasible) {
      ++result_.infeasible;
    } else {
      still.push_back(index);
    }
  }
  std::sort(still.begin(), still.end(), [&](size_t a, size_t b) {
    return jobs_[a].shape.submit_order < jobs_[b].shape.submit_order;
  });
  queue_ = std::move(still);
  return absl::OkStatus();
}

}  // namespace

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = p * static_cast<double>(values.size() - 1);
  const size_t below = static_cast<size_t>(rank);
  if (below + 1 >= values.size()) return values.back();
  return values[below] + (rank - static_cast<double>(below)) *
                             (values[below + 1] - values[below]);
}

absl::StatusOr<ReplayResult> RunReplay(
    const std::vector<WorkerCapacity>& cluster,
    const std::vector<TracePod>& pods, const scheduler::PlacementPolicy& policy,
    const ReplayOptions& options) {
  std::vector<Job> jobs;
  std::vector<scheduler::TaskClass> workload;
  if (!(options.arrival_speedup > 0)) {
    return absl::InvalidArgumentError("arrival_speedup must be > 0");
  }
  for (const TracePod& p : pods) {
    if (std::max({p.creation_time, p.deletion_time, p.scheduled_time}) >
        kMaxTraceSeconds) {
      // Beyond it, end times could overflow.
      return absl::InvalidArgumentError(absl::StrCat(
          "pod ", p.shape.id, ": a time beyond ", kMaxTraceSeconds, " s"));
    }
    if (p.creation_time < 0 || p.scheduled_time < 0 ||
        p.deletion_time <= p.scheduled_time) {
      continue;
    }
    Job j;
    j.shape = p.shape;
    j.shape.id = absl::StrCat(jobs.size());
    j.shape.submit_order = static_cast<int64_t>(jobs.size());
    j.arrive = static_cast<int64_t>(static_cast<double>(p.creation_time) /
                                    options.arrival_speedup);
    j.duration = p.deletion_time - p.scheduled_time;
    workload.push_back({j.shape, 1.0});
    jobs.push_back(std::move(j));
  }
  bool gpus = false;
  for (const WorkerCapacity& w : cluster) gpus = gpus || !w.devices.empty();
  if (!gpus) return absl::InvalidArgumentError("cluster has no GPU");
  if (jobs.empty()) {
    return absl::InvalidArgumentError(
        "no pod has creation, scheduled and "
        "deletion times to replay");
  }
  if (options.sample_every_s <= 0) {
    return absl::InvalidArgumentError("sample_every_s must be > 0");
  }
  if (options.max_samples < 2) {
    return absl::InvalidArgumentError("max_samples must be >= 2");
  }
  Replayer replayer(cluster, policy, std::move(jobs), std::move(workload),
                    options);
  RETURN_IF_ERROR(replayer.Run());
  return replayer.Result();
}

}  // namespace trainyard::sim
