#include "scheduler/fgd_policy.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "scheduler/fgd_chooser.h"
#include "scheduler/packing_pass.h"

namespace trainyard::scheduler {
namespace {

constexpr double kCoveredWeight = 0.99;
constexpr size_t kMaxClasses = 64;

using ClassKey = std::tuple<int32_t, int64_t, int32_t, int64_t, int64_t>;

// Kinds by key; a hash map, as the pending queue can be long.
struct KindsByKey {
  absl::flat_hash_map<ClassKey, size_t> at;
  std::vector<std::pair<ClassKey, FragClass>> kinds;
};

void AddClass(const PendingJob& shape, double weight, KindsByKey& by_key) {
  if (shape.gpus == 0) return;
  const ClassKey key{shape.gpus, shape.gpu_memory_bytes,
                     shape.gpu_compute_milli, shape.cpu_milli,
                     shape.memory_bytes};
  auto [it, added] = by_key.at.try_emplace(key, by_key.kinds.size());
  if (added) {
    by_key.kinds.push_back(
        {key, FragClass{shape, DemandOf(shape, /*exclusive=*/false), 0}});
  }
  by_key.kinds[it->second].second.weight += weight;
}

}  // namespace

std::vector<FragClass> FragClassesFor(const ClusterSnapshot& snapshot) {
  KindsByKey by_key;
  for (const TaskClass& c : snapshot.workload()) {
    AddClass(c.shape, c.weight, by_key);
  }
  if (snapshot.workload().empty()) {
    for (const PendingJob& j : snapshot.pending()) AddClass(j, 1.0, by_key);
  }
  // Most frequent first; equal weights by key, so the order is fixed.
  std::sort(by_key.kinds.begin(), by_key.kinds.end(),
            [](const auto& a, const auto& b) {
              if (a.second.weight != b.second.weight) {
                return a.second.weight > b.second.weight;
              }
              return a.first < b.first;
            });
  std::vector<FragClass> classes;
  double total = 0;
  for (auto& [key, c] : by_key.kinds) {
    total += c.weight;
    classes.push_back(std::move(c));
  }
  double kept = 0;
  size_t n = 0;
  while (n < classes.size() && n < kMaxClasses &&
         kept < kCoveredWeight * total) {
    kept += classes[n++].weight;
  }
  classes.resize(n);
  for (FragClass& c : classes) c.weight /= kept;
  return classes;
}

double NodeFragmentation(const WorkerCapacity& w,
                         const std::vector<FragClass>& classes) {
  const int64_t total = FreeGpuMilli(w);
  if (total == 0) return 0;
  double sum = 0;
  for (const FragClass& c : classes) {
    if (!HostFits(w, c.shape)) {
      sum += c.weight * total;
      continue;
    }
    int32_t fitting = 0;
    int64_t unusable = 0;
    for (const GpuCapacity& g : w.devices) {
      if (GpuFits(g, c.demand)) {
        ++fitting;
      } else {
        unusable += g.free_compute_milli;
      }
    }
    sum += c.weight * (fitting >= c.shape.gpus ? unusable : total);
  }
  return sum;
}

Plan FgdPolicy::Place(const ClusterSnapshot& snapshot) const {
  std::vector<FragClass> classes = FragClassesFor(snapshot);
  return RunPackingPass(snapshot, PackingPassOptions::With(false, features_),
                        [&](const FreeCapacity& free) {
                          return std::make_unique<FgdChooser>(
                              snapshot, free, std::move(classes));
                        });
}

}  // namespace trainyard::scheduler
