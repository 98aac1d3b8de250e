#include "scheduler/best_fit_policy.h"

#include <set>
#include <tuple>

#include "scheduler/packing_pass.h"

namespace trainyard::scheduler {
namespace {

// Workers ordered by (free GPU compute, free CPU, position): the first one in
// that order a GPU job fits is its best fit. Jobs without GPUs scan the
// summaries for the least free CPU.
class BestFitChooser : public NodeChooser {
 public:
  explicit BestFitChooser(const FreeCapacity& free) {
    keys_.reserve(free.summaries.size());
    for (size_t i = 0; i < free.summaries.size(); ++i) {
      keys_.push_back(KeyOf(free.summaries[i], i));
      order_.insert(keys_.back());
      cpu_keys_.push_back(CpuKeyOf(free.summaries[i], i));
      cpu_order_.insert(cpu_keys_.back());
    }
  }

  std::optional<Choice> Choose(const PendingJob& job, const GpuDemand& demand,
                               const FreeCapacity& free) override {
    std::optional<size_t> best = job.gpus > 0
                                     ? TightestGpuWorker(job, demand, free)
                                     : TightestCpuWorker(job, demand, free);
    if (!best) return std::nullopt;
    return Choice{*best,
                  TightestDevices(free.workers[*best], demand, job.gpus)};
  }

  void Changed(size_t worker, const FreeCapacity& free) override {
    order_.erase(keys_[worker]);
    keys_[worker] = KeyOf(free.summaries[worker], worker);
    order_.insert(keys_[worker]);
    cpu_order_.erase(cpu_keys_[worker]);
    cpu_keys_[worker] = CpuKeyOf(free.summaries[worker], worker);
    cpu_order_.insert(cpu_keys_[worker]);
  }

 private:
  using Key = std::tuple<int64_t, int64_t, size_t>;

  static Key KeyOf(const NodeSummary& s, size_t i) {
    return {s.free_gpu_milli, s.free_cpu_milli, i};
  }
  static Key CpuKeyOf(const NodeSummary& s, size_t i) {
    return {s.free_cpu_milli, s.free_cpu_slots, i};
  }

  std::optional<size_t> TightestGpuWorker(const PendingJob& job,
                                          const GpuDemand& demand,
                                          const FreeCapacity& free) const {
    const int64_t least = int64_t{job.gpus} * demand.compute_milli;
    for (auto it = order_.lower_bound({least, 0, 0}); it != order_.end();
         ++it) {
      if (free.Fits(std::get<2>(*it), job, demand)) return std::get<2>(*it);
    }
    return std::nullopt;
  }

  std::optional<size_t> TightestCpuWorker(const PendingJob& job,
                                          const GpuDemand& demand,
                                          const FreeCapacity& free) const {
    for (auto it = cpu_order_.lower_bound({job.cpu_milli, 0, 0});
         it != cpu_order_.end(); ++it) {
      if (free.Fits(std::get<2>(*it), job, demand)) return std::get<2>(*it);
    }
    return std::nullopt;
  }

  std::vector<Key> keys_, cpu_keys_;
  std::set<Key> order_;      // for GPU jobs
  std::set<Key> cpu_order_;  // (free CPU, free slots, position): the rest
};

}  // namespace

Plan BestFitPolicy::Place(const ClusterSnapshot& snapshot) const {
  return RunPackingPass(snapshot, PackingPassOptions::With(false, features_),
                        [](const FreeCapacity& free) {
                          return std::make_unique<BestFitChooser>(free);
                        });
}

}  // namespace trainyard::scheduler
