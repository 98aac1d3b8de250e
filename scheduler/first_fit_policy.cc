#include "scheduler/first_fit_policy.h"

#include "scheduler/packing_pass.h"

namespace trainyard::scheduler {
namespace {

// Every GPU job needs a wholly free GPU here, and a worker left without one
// gets none back during a pass, so GPU jobs start scanning at the first
// worker that still has one.
class FirstFitChooser : public NodeChooser {
 public:
  explicit FirstFitChooser(const FreeCapacity& free) { Advance(free); }

  std::optional<Choice> Choose(const PendingJob& job, const GpuDemand& demand,
                               const FreeCapacity& free) override {
    const size_t start = job.gpus > 0 ? first_open_ : 0;
    for (size_t i = start; i < free.workers.size(); ++i) {
      if (free.Fits(i, job, demand)) {
        return Choice{i, FirstDevices(free.workers[i], demand, job.gpus)};
      }
    }
    return std::nullopt;
  }

  void Changed(size_t worker, const FreeCapacity& free) override {
    if (worker == first_open_) Advance(free);
  }

 private:
  void Advance(const FreeCapacity& free) {
    while (first_open_ < free.summaries.size() &&
           free.summaries[first_open_].wholly_free_gpus == 0) {
      ++first_open_;
    }
  }

  size_t first_open_ = 0;
};

}  // namespace

Plan FirstFitPolicy::Place(const ClusterSnapshot& snapshot) const {
  return RunPackingPass(snapshot, PackingPassOptions::With(true, features_),
                        [](const FreeCapacity& free) {
                          return std::make_unique<FirstFitChooser>(free);
                        });
}

}  // namespace trainyard::scheduler
