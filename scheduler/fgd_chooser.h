// FgdChooser: where FGD puts each job during a pass (see fgd_policy.h for the
// rule). Workers in the same state — the same GPUs in the same use, and CPU,
// host memory and slots equal or all beyond anything a job or task kind
// asks — score the same for every job, so they are kept in groups and each
// job scores one worker per group (its lowest position, which is also where
// a worker-by-worker scan would land on a tie). A group's state never
// changes while it lives, so where each job shape goes on it is remembered
// (for the first kMaxCachedShapes shapes of the pass). Each group keeps, per
// per-GPU demand of the task kinds, how many of its GPUs fit it and how much
// free compute they cannot use, so scoring a candidate costs one step per task
// kind. Thread-compatible; lives for one pass.
#ifndef TRAINYARD_SCHEDULER_FGD_CHOOSER_H_
#define TRAINYARD_SCHEDULER_FGD_CHOOSER_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "scheduler/fgd_policy.h"
#include "scheduler/packing_pass.h"

namespace trainyard::scheduler {

class FgdChooser : public NodeChooser {
 public:
  FgdChooser(const ClusterSnapshot& snapshot, const FreeCapacity& free,
             std::vector<FragClass> classes);

  std::optional<Choice> Choose(const PendingJob& job, const GpuDemand& demand,
                               const FreeCapacity& free) override;
  void Changed(size_t worker, const FreeCapacity& free) override;

 private:
  static constexpr size_t kMaxCachedShapes = 256;

  // For one per-GPU demand of the task kinds: how many of a worker's GPUs
  // fit it, and the free compute of those that do not.
  struct DemandStat {
    int32_t fitting = 0;
    int64_t unusable = 0;
  };
  struct Scored {
    double delta = 0;
    int64_t left = 0;  // free GPU compute after
  };
  // Where a job goes on a group's workers. `device`: the shared GPU for a
  // job asking a share of one GPU; -1 otherwise (the GPUs then follow from
  // the worker's state: DevicesOn).
  struct Placed {
    Scored score;
    int32_t device = -1;
  };
  struct Group {
    std::string signature;
    std::set<size_t> members;
    std::vector<DemandStat> stats;  // per distinct demand (demands_)
    int64_t free_milli = 0;
    double frag = 0;      // expected fragmentation, milli-GPU
    uint32_t epoch = 0;   // of this slot; a reused slot gets a new one
    size_t alive_at = 0;  // position in alive_
  };
  // Where one job shape goes on a group, valid while `epoch` matches.
  struct Cached {
    uint32_t epoch = 0;  // 0: nothing cached
    bool fits = false;
    Placed placed;
  };
  // What a job asks, as far as placing it goes.
  using JobKey =
      std::tuple<int32_t, bool, int32_t, int64_t, int64_t, int64_t, int32_t>;

  std::string Signature(const WorkerCapacity& w, const NodeSummary& s) const;
  void Join(size_t worker, const FreeCapacity& free);
  void Leave(size_t worker);
  void Fill(Group& g, const WorkerCapacity& w) const;
  static std::vector<size_t> DevicesOn(const WorkerCapacity& w,
                                       const PendingJob& job,
                                       const GpuDemand& demand, int32_t device);
  std::optional<Placed> BestIn(const Group& g, const WorkerCapacity& w,
                               const PendingJob& job, const GpuDemand& demand);
  Scored Score(const Group& g, const WorkerCapacity& w, const PendingJob& job,
               const GpuDemand& demand,
               const std::vector<size_t>& devices) const;

  const std::vector<FragClass> classes_;
  // The distinct per-GPU demands of the task kinds (many kinds share one),
  // and each kind's among them.
  std::vector<GpuDemand> demands_;
  std::vector<size_t> demand_of_;
  mutable std::vector<DemandStat> scratch_stats_;
  // Free CPU, host memory and slots at or beyond these are all the same to
  // every job and task kind of this pass (twice the most any asks).
  int64_t cpu_cap_ = 0, memory_cap_ = 0;
  int32_t slots_cap_ = 0;
  std::vector<Group> groups_;    // slots by group id
  std::vector<uint32_t> spare_;  // ids of unused slots
  // The groups with members, with what a scan reads of them side by side.
  struct Alive {
    uint32_t id = 0;
    uint32_t epoch = 0;
    size_t rep = 0;  // lowest member
  };
  std::vector<Alive> alive_;
  absl::flat_hash_map<std::string, uint32_t> by_signature_;
  std::vector<uint32_t> group_of_;  // per worker
  uint32_t next_epoch_ = 1;
  absl::flat_hash_map<JobKey, std::vector<Cached>> cache_;  // by group id
  std::vector<size_t> scratch_devices_;
};

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SCHEDULER_FGD_CHOOSER_H_
