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
#include "scheduler/packing_pass.h"
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

// Places a running job spread over `nodes`: ranks[i] of its ranks on
// nodes[i], in rank order (the first is its own worker), each taking its
// share (PartOf). Changes nothing and returns false when a part does not
// fit. REQUIRES: distinct nodes, one rank count per node.
inline bool StartRunningSpread(const std::vector<WorkerCapacity*>& nodes,
                               const std::vector<int32_t>& ranks,
                               const PendingJob& shape, double work,
                               std::vector<RunningJob>& running) {
  const GpuDemand demand = DemandOf(shape, false);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!FitsNow(*nodes[i], PartOf(shape, ranks[i]), demand)) return false;
  }
  RunningJob r{shape.id, nodes[0]->id, shape.tenant, shape.priority};
  r.work_since_checkpoint = work;
  r.more_parts.resize(nodes.size() - 1);
  const auto hold = [&](WorkerCapacity& w, const PendingJob& piece,
                        auto& holding) {
    const std::vector<size_t> positions = FirstDevices(w, demand, piece.gpus);
    for (size_t pos : positions) {
      holding.gpu_indices.push_back(w.devices[pos].index);
    }
    holding.gpu_memory_bytes = shape.gpu_memory_bytes;
    holding.gpu_compute_milli = shape.gpu_compute_milli;
    holding.cpu_slots = piece.gpus == 0 ? piece.cpu_slots : 0;
    holding.cpu_milli = piece.cpu_milli;
    holding.memory_bytes = piece.memory_bytes;
    Take(w, piece, demand, positions);
  };
  hold(*nodes[0], PartOf(shape, ranks[0]), r);
  for (size_t i = 1; i < nodes.size(); ++i) {
    r.more_parts[i - 1].worker_id = nodes[i]->id;
    hold(*nodes[i], PartOf(shape, ranks[i]), r.more_parts[i - 1]);
  }
  running.push_back(std::move(r));
  return true;
}

// Some running jobs spread over two or more of `workers` (at most half of
// their ranks on any one), drawn from their own generator so that the rest
// of a random snapshot stays as it was.
inline void StartRandomSpreadJobs(uint32_t seed,
                                  std::vector<WorkerCapacity>& workers,
                                  std::vector<RunningJob>& running) {
  std::mt19937 rng(seed * 7919u + 17u);
  auto pick = [&](int n) { return static_cast<int32_t>(rng() % n); };
  static constexpr int32_t kMilli[] = {1000, 1000, 500, 250};
  for (int k = pick(3); k > 0; --k) {
    const int32_t ranks = 2 + pick(3);
    const bool cpu = pick(4) == 0;
    PendingJob shape = Share(absl::StrCat("spread", k), 0, cpu ? 0 : ranks,
                             kMilli[pick(4)], pick(3), pick(3) - 1);
    if (cpu) shape.cpu_slots = ranks;
    shape.tenant = pick(2) == 0 ? "a" : "c";
    shape.max_nodes = 0;
    const GpuDemand demand = DemandOf(shape, false);
    std::vector<WorkerCapacity*> nodes;
    std::vector<int32_t> split;
    int32_t left = ranks;
    for (WorkerCapacity& w : workers) {
      if (left == 0) break;
      const int32_t r = RanksFitting(
          w, shape, demand, std::min(left, std::max(1, ranks / 2)), false);
      if (r == 0) continue;
      nodes.push_back(&w);
      split.push_back(r);
      left -= r;
    }
    if (left == 0 && nodes.size() > 1) {
      StartRunningSpread(nodes, split, shape, pick(100), running);
    }
  }
}

// GPU names for the workers (one model each, unknown, or a mix) and GPU
// models for some of the GPU jobs in `jobs`, some of which no worker has,
// drawn from their own generator so that the rest of a random snapshot
// stays as it was.
inline void NameRandomGpus(uint32_t seed, std::vector<WorkerCapacity>& workers,
                           std::vector<PendingJob>& jobs) {
  std::mt19937 rng(seed * 104729u + 3u);
  auto pick = [&](int n) { return static_cast<int32_t>(rng() % n); };
  static const char* kNames[] = {"", "NVIDIA H100 80GB HBM3",
                                 "NVIDIA A100-SXM4-80GB", "Tesla T4"};
  static const std::vector<std::string> kModels[] = {
      {"H100"}, {"a100", "H100"}, {"T4"}, {"L40S"}};
  for (WorkerCapacity& w : workers) {
    const int32_t kind = pick(5);  // 4: each GPU its own pick
    for (GpuCapacity& g : w.devices) {
      g.name_id = w.GpuNameId(kNames[kind < 4 ? kind : pick(4)]);
    }
  }
  for (PendingJob& j : jobs) {
    if (j.gpus > 0 && pick(3) == 0) j.gpu_models = kModels[pick(4)];
  }
}

// A random but valid cluster, running jobs and queue, the same for the same
// seed. Some GPUs are named and some jobs name GPU models (NameRandomGpus).
// Jobs belong to tenants "a", "b" and "c" (weights 1, 2, 1).
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
    // GPUs that are not shareable (no MPS), each job taking one whole.
    if (pick(5) == 0) {
      for (GpuCapacity& g : w.devices) g.shareable = false;
    }
    w.cpu_slots = w.free_cpu_slots = pick(4);
    for (int r = pick(5); r > 0; --r) {
      StartRunning(w, random_job(absl::StrCat("r", i, "-", r)), pick(100),
                   running);
    }
    workers.push_back(std::move(w));
  }
  StartRandomSpreadJobs(seed, workers, running);
  std::vector<PendingJob> jobs;
  for (int i = pick(20); i > 0; --i)
    jobs.push_back(estimated_job(absl::StrCat("j", i)));
  NameRandomGpus(seed, workers, jobs);
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
