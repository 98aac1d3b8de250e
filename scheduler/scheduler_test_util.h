// Builders for scheduler tests: workers with fine-grained GPUs and jobs
// asking shares of them, and random clusters and queues from a seed.
#ifndef TRAINYARD_SCHEDULER_SCHEDULER_TEST_UTIL_H_
#define TRAINYARD_SCHEDULER_SCHEDULER_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "scheduler/cluster_snapshot.h"
#include "scheduler/node_fit.h"
#include "scheduler/placement_policy.h"

namespace trainyard::scheduler::testing {

inline constexpr int64_t kGiB = int64_t{1} << 30;

// A worker whose GPUs have `gpu_gib` GiB each; `free_milli[i]` of GPU i is
// free (memory free in proportion), plus CPU and host memory.
inline WorkerCapacity Node(std::string id, std::vector<int32_t> free_milli,
                           int64_t gpu_gib = 16, int64_t cpus = 64,
                           int64_t mem_gib = 256) {
  WorkerCapacity w;
  w.id = std::move(id);
  for (size_t i = 0; i < free_milli.size(); ++i) {
    const int64_t mem = gpu_gib * kGiB;
    w.devices.push_back({static_cast<int32_t>(i), mem,
                         mem * free_milli[i] / kWholeGpuMilli, free_milli[i]});
  }
  w.cpu_milli = w.free_cpu_milli = cpus * 1000;
  w.memory_bytes = w.free_memory_bytes = mem_gib * kGiB;
  return w;
}

// A job asking `gpus` x `milli` (whole GPUs when milli == 1000).
inline PendingJob Share(std::string id, int64_t order, int32_t gpus,
                        int32_t milli, int64_t cpus = 1, int32_t priority = 0) {
  PendingJob j;
  j.id = std::move(id);
  j.submit_order = order;
  j.priority = priority;
  j.gpus = gpus;
  j.cpu_slots = 0;
  j.gpu_compute_milli = milli;
  j.gpu_memory_bytes =
      milli == kWholeGpuMilli ? 0 : 16 * kGiB * milli / kWholeGpuMilli;
  j.cpu_milli = cpus * 1000;
  j.memory_bytes = cpus * kGiB;
  return j;
}

inline ClusterSnapshot MakeSnapshot(std::vector<WorkerCapacity> w,
                                    std::vector<PendingJob> j,
                                    std::vector<TaskClass> workload = {}) {
  auto s =
      ClusterSnapshot::Create(std::move(w), std::move(j), std::move(workload));
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

// Places a running job on `w` (takes what it holds) when it fits there.
inline bool StartRunning(WorkerCapacity& w, const PendingJob& shape,
                         double work, std::vector<RunningJob>& running) {
  const GpuDemand demand = DemandOf(shape, false);
  if (!FitsNow(w, shape, demand)) return false;
  RunningJob r{shape.id, w.id, shape.tenant, shape.priority};
  std::vector<size_t> positions;
  for (size_t i = 0; i < w.devices.size() &&
                     static_cast<int32_t>(positions.size()) < shape.gpus;
       ++i) {
    if (GpuFits(w.devices[i], demand)) positions.push_back(i);
  }
  for (size_t pos : positions) r.gpu_indices.push_back(w.devices[pos].index);
  r.gpu_memory_bytes = shape.gpu_memory_bytes;
  r.gpu_compute_milli = shape.gpu_compute_milli;
  r.cpu_slots = shape.gpus == 0 ? shape.cpu_slots : 0;
  r.cpu_milli = shape.cpu_milli;
  r.memory_bytes = shape.memory_bytes;
  r.work_since_checkpoint = work;
  Take(w, shape, demand, positions);
  running.push_back(std::move(r));
  return true;
}

// A random but valid cluster, running jobs and queue, the same for the same
// seed. Jobs belong to tenants "a", "b" and "c" (weights 1, 2, 1).
inline ClusterSnapshot RandomSnapshot(uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int32_t>(rng() % n); };
  static constexpr int32_t kMilli[] = {1000, 1000, 500, 250, 810, 300};
  static const char* kTenants[] = {"a", "b", "c"};
  auto random_job = [&](std::string id) {
    const int32_t gpus = pick(5) == 0 ? 0 : 1 + pick(3) / 2 * pick(5);
    PendingJob j = Share(std::move(id), pick(50), gpus, kMilli[pick(6)],
                         pick(6), pick(3) - 1);
    if (gpus == 0) j.cpu_slots = pick(2);
    if (gpus == 0 && j.cpu_slots == 0 && j.cpu_milli == 0) j.cpu_slots = 1;
    j.tenant = kTenants[pick(3)];
    return j;
  };
  // Some queued jobs carry an engine memory estimate instead of a share:
  // each GPU then decides what it gives (whole or a share).
  auto estimated_job = [&](std::string id) {
    PendingJob j = random_job(std::move(id));
    if (j.gpus > 0 && pick(3) == 0) {
      j.gpu_memory_estimated = true;
      j.gpu_memory_bytes = (1 + pick(40)) * kGiB / 2;
      j.gpu_compute_milli = pick(2) == 0 ? 0 : kMilli[pick(6)];
    }
    // Some data-parallel jobs may spread their ranks over nodes.
    if (RanksOf(j) > 1 && pick(3) == 0) j.max_nodes = pick(3);
    return j;
  };
  std::vector<WorkerCapacity> workers;
  std::vector<RunningJob> running;
  const int nw = pick(6);
  for (int i = 0; i < nw; ++i) {
    std::vector<int32_t> free(pick(5), 1000);
    WorkerCapacity w = Node(absl::StrCat("w", i), free, 8 + 8 * pick(3),
                            1 + pick(16), 1 + pick(64));
    if (pick(6) == 0) {
      // GPUs of unknown memory, as a worker that reports none.
      for (GpuCapacity& g : w.devices) g.memory_bytes = g.free_memory_bytes = 0;
    }
    w.cpu_slots = w.free_cpu_slots = pick(4);
    for (int r = pick(5); r > 0; --r) {
      StartRunning(w, random_job(absl::StrCat("r", i, "-", r)), pick(100),
                   running);
    }
    workers.push_back(std::move(w));
  }
  std::vector<PendingJob> jobs;
  for (int i = pick(20); i > 0; --i)
    jobs.push_back(estimated_job(absl::StrCat("j", i)));
  auto s = ClusterSnapshot::Create(std::move(workers), std::move(jobs), {},
                                   std::move(running), {{"b", 2.0}});
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

inline std::string PlanString(const Plan& plan) {
  std::string out;
  for (const Placement& p : plan.placements) {
    absl::StrAppend(&out, p.job_id, "@", p.worker_id, "[");
    for (int32_t g : p.gpu_indices) absl::StrAppend(&out, g, ",");
    absl::StrAppend(&out, p.exclusive ? "]x " : "] ");
  }
  for (const Preemption& p : plan.preemptions) {
    absl::StrAppend(&out, "stop ", p.job_id, " for ", p.for_job_id, "; ");
  }
  for (const Reservation& r : plan.reservations) {
    absl::StrAppend(&out, "hold ", r.worker_id, " for ", r.job_id, "; ");
  }
  for (const JobWait& w : plan.waits) {
    absl::StrAppend(&out, w.job_id, ":", static_cast<int>(w.kind), ":",
                    w.reason, "; ");
  }
  return out;
}

}  // namespace trainyard::scheduler::testing

#endif  // TRAINYARD_SCHEDULER_SCHEDULER_TEST_UTIL_H_
