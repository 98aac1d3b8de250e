#include "scheduler/fgd_policy.h"

#include <algorithm>
#include <functional>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "scheduler/fgd_chooser.h"
#include "scheduler/packing_pass.h"

namespace trainyard::scheduler {
namespace {

constexpr double kCoveredWeight = 0.99;
constexpr size_t kMaxClasses = 64;

using ClassKey =
    std::tuple<int32_t, int64_t, int32_t, int64_t, int64_t, bool, uint64_t>;

// Kinds by key, each with its first job (or workload class) and weight; a
// hash map, as the pending queue can be long and nearly every job may be a
// kind of its own.
struct KindsByKey {
  struct Kind {
    ClassKey key;
    const PendingJob* shape;
    double weight = 0;
  };
  absl::flat_hash_map<ClassKey, size_t> at;
  std::vector<Kind> kinds;

  void Add(const PendingJob& shape, double weight) {
    if (shape.gpus == 0) return;
    const ClassKey key{
        shape.gpus,          shape.gpu_memory_bytes, shape.gpu_compute_milli,
        shape.cpu_milli,     shape.memory_bytes,     shape.gpu_memory_estimated,
        shape.gpu_model_mask};
    auto [it, added] = at.try_emplace(key, kinds.size());
    if (added) kinds.push_back({key, &shape, 0});
    kinds[it->second].weight += weight;
  }
};

}  // namespace

std::vector<FragClass> FragClassesFor(const ClusterSnapshot& snapshot) {
  KindsByKey by_key;
  for (const TaskClass& c : snapshot.workload()) by_key.Add(c.shape, c.weight);
  if (snapshot.workload().empty()) {
    for (const PendingJob& j : snapshot.pending()) by_key.Add(j, 1.0);
  }
  // Most frequent first; equal weights by key, so the order is fixed. Only
  // the first kMaxClasses can be kept, but the total weight is summed in
  // that same order (equal weights are interchangeable, so sorting the
  // weights alone gives the same sum to the last bit).
  std::vector<KindsByKey::Kind>& kinds = by_key.kinds;
  std::vector<double> weights;
  weights.reserve(kinds.size());
  for (const auto& k : kinds) weights.push_back(k.weight);
  std::sort(weights.begin(), weights.end(), std::greater<double>());
  double total = 0;
  for (double w : weights) total += w;
  const size_t head = std::min(kinds.size(), kMaxClasses);
  std::partial_sort(kinds.begin(), kinds.begin() + head, kinds.end(),
                    [](const KindsByKey::Kind& a, const KindsByKey::Kind& b) {
                      if (a.weight != b.weight) return a.weight > b.weight;
                      return a.key < b.key;
                    });
  std::vector<FragClass> classes;
  double kept = 0;
  while (classes.size() < head && kept < kCoveredWeight * total) {
    const KindsByKey::Kind& k = kinds[classes.size()];
    PendingJob shape = *k.shape;
    shape.id.clear();
    shape.tenant.clear();
    shape.gpu_models.clear();  // the mask says it all
    classes.push_back({shape, DemandOf(shape, /*exclusive=*/false), k.weight});
    kept += k.weight;
  }
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
