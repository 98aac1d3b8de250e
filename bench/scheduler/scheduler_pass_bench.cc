// One scheduling pass (PlacementPolicy::Place on a ready snapshot) over a
// cluster of 1,250 nodes x 8 GPUs = 10,000 GPUs with 50,000 queued jobs,
// for each policy. The queue mixes job shapes like the openb trace: whole
// GPUs, shares of one GPU, gangs of 2/4/8 GPUs and CPU-only jobs; it asks
// for several times the cluster, so the pass both fills the cluster and
// turns most jobs away. "idle" starts from an empty cluster, "half" from
// one where every node has half its GPUs taken and one GPU 40% used.
// "200-shapes": the jobs repeat 200 shapes, as real queues do;
// "unique-shapes": nearly every job asks something different (worst case
// for the per-shape memo of a pass and for FGD's grouping of workers).
//
//   scheduler_pass_bench [--benchmark_filter=fgd] [--benchmark_repetitions=5]
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "scheduler/placement_policy.h"

namespace trainyard::scheduler {
namespace {

constexpr int kNodes = 1250;
constexpr int kGpusPerNode = 8;
constexpr int kJobs = 50'000;
constexpr int64_t kGiB = int64_t{1} << 30;

std::vector<WorkerCapacity> Nodes(bool half_used) {
  std::vector<WorkerCapacity> nodes;
  for (int n = 0; n < kNodes; ++n) {
    WorkerCapacity w;
    w.id = absl::StrCat("node-", n);
    w.cpu_milli = w.free_cpu_milli = 96'000;
    w.memory_bytes = w.free_memory_bytes = 768 * kGiB;
    for (int g = 0; g < kGpusPerNode; ++g) {
      GpuCapacity d{g, 80 * kGiB, 80 * kGiB, kWholeGpuMilli};
      if (half_used && g < kGpusPerNode / 2) d.free_memory_bytes = 0;
      if (half_used && g < kGpusPerNode / 2) d.free_compute_milli = 0;
      if (half_used && g == kGpusPerNode / 2) {
        d.free_memory_bytes = 48 * kGiB;
        d.free_compute_milli = 600;
      }
      w.devices.push_back(d);
    }
    if (half_used) w.free_cpu_milli = 40'000;
    nodes.push_back(std::move(w));
  }
  return nodes;
}

PendingJob RandomJob(std::mt19937& rng, int i) {
  static constexpr int32_t kShares[] = {810, 470, 320, 650, 230, 460, 160};
  PendingJob j;
  j.id = absl::StrCat("job-", i);
  j.submit_order = i;
  j.priority = static_cast<int32_t>(rng() % 3);
  j.cpu_slots = 0;
  j.cpu_milli = 1000 * (1 + rng() % 16);
  j.memory_bytes = kGiB * (1 + rng() % 64);
  const uint32_t kind = rng() % 100;
  if (kind < 10) return j;  // CPU only
  j.gpus = kind < 55 ? 1 : kind < 95 ? 1 : (kind < 97 ? 2 : kind < 99 ? 4 : 8);
  if (kind >= 55 && kind < 95) {
    j.gpu_compute_milli = kShares[rng() % 7];
    j.gpu_memory_bytes = 80 * kGiB * j.gpu_compute_milli / kWholeGpuMilli;
  }
  return j;
}

// `shapes` > 0: jobs repeat that many shapes (as real queues do: the openb
// trace has 151 in 8,152 pods); 0: nearly every job has a shape of its own.
ClusterSnapshot MakeSnapshot(bool half_used, int shapes) {
  std::mt19937 rng(42);
  std::vector<PendingJob> pool;
  for (int i = 0; i < shapes; ++i) pool.push_back(RandomJob(rng, i));
  std::vector<PendingJob> jobs;
  jobs.reserve(kJobs);
  for (int i = 0; i < kJobs; ++i) {
    if (shapes == 0) {
      jobs.push_back(RandomJob(rng, i));
      continue;
    }
    PendingJob j = pool[rng() % pool.size()];
    j.id = absl::StrCat("job-", i);
    j.submit_order = i;
    j.priority = static_cast<int32_t>(rng() % 3);
    jobs.push_back(std::move(j));
  }
  return *ClusterSnapshot::Create(Nodes(half_used), std::move(jobs));
}

void BM_Pass(benchmark::State& state, const std::string& policy_name,
             bool half_used, int shapes) {
  const ClusterSnapshot snapshot = MakeSnapshot(half_used, shapes);
  auto policy = *MakePlacementPolicy(policy_name);
  size_t placed = 0;
  for (auto _ : state) {
    Plan plan = policy->Place(snapshot);
    placed = plan.placements.size();
    benchmark::DoNotOptimize(plan);
  }
  state.counters["placed"] = static_cast<double>(placed);
  state.counters["jobs"] = kJobs;
  state.counters["gpus"] = kNodes * kGpusPerNode;
}

void Register() {
  for (const std::string& name : PlacementPolicyNames()) {
    for (int shapes : {200, 0}) {
      for (bool half : {false, true}) {
        benchmark::RegisterBenchmark(
            absl::StrCat("Pass/", name, half ? "/half" : "/idle",
                         shapes ? "/200-shapes" : "/unique-shapes")
                .c_str(),
            [name, half, shapes](benchmark::State& s) {
              BM_Pass(s, name, half, shapes);
            })
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
    }
  }
}

}  // namespace
}  // namespace trainyard::scheduler

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  trainyard::scheduler::Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
