// FgdChooser: where FGD puts each job during a pass (see fgd_policy.h for the
// rule). Workers in the same state — the same GPUs in the same use, and CPU,
// host memory and slots equal or all beyond anything a job or task kind
// asks — score the same for every job, so they are kept in groups and each
// job scores one worker per group (its lowest position, which is also where
// a worker-by-worker scan would land on a tie). Each group keeps, per
// per-GPU demand of the task kinds, how many of its GPUs fit it and how much
// free compute they cannot use, so scoring a candidate costs one step per
// task kind.
//
// A pass asks the same few GPU needs over and over (jobs differ mostly in
// CPU and host memory), so the groups are kept in order per GPU need (see
// CandidateOrder in fgd_chooser.cc) and a job looks only at the head of that
// order instead of scoring every group. Thread-compatible; lives for one pass.
#ifndef TRAINYARD_SCHEDULER_FGD_CHOOSER_H_
#define TRAINYARD_SCHEDULER_FGD_CHOOSER_H_

#include <cstdint>
#include <memory>
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
  ~FgdChooser() override;

  std::optional<Choice> Choose(const PendingJob& job, const GpuDemand& demand,
                               const FreeCapacity& free) override;
  void Changed(size_t worker, const FreeCapacity& free) override;

 private:
  // Beyond this many distinct GPU needs in a pass, the rarer ones scan
  // every group (each order costs upkeep on every change of a group).
  static constexpr size_t kMaxOrders = 64;

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
    uint32_t epoch = 0;   // of this slot's state; a reused slot gets a new one
    uint32_t stamp = 0;   // of its state and lowest member; 0 while unused
    size_t alive_at = 0;  // position in alive_
    // The most CPU and host memory a task kind that fits the group's host
    // now asks: a job leaving at least this much scores as if it took none.
    int64_t kinds_cpu = 0;
    int64_t kinds_memory = 0;
  };
  struct CandidateOrder;
  // What a job asks of GPUs: gpus, whole, estimated, compute, memory.
  // A need's GPU side: gpus, whole, estimated, compute, memory and the
  // models it may use.
  using GpuKey = std::tuple<int32_t, bool, bool, int32_t, int64_t, uint64_t>;

  std::string Signature(const WorkerCapacity& w, const NodeSummary& s) const;
  void Join(size_t worker, const FreeCapacity& free);
  void Leave(size_t worker);
  // A group's state or lowest member changed (or it was made).
  void Touch(uint32_t id);
  void Fill(Group& g, const WorkerCapacity& w) const;
  static std::vector<size_t> DevicesOn(const WorkerCapacity& w,
                                       const PendingJob& job,
                                       const GpuDemand& demand, int32_t device);
  std::optional<Placed> BestIn(const Group& g, const WorkerCapacity& w,
                               const PendingJob& job, const GpuDemand& demand);
  Scored Score(const Group& g, const WorkerCapacity& w, const PendingJob& job,
               const GpuDemand& demand,
               const std::vector<size_t>& devices) const;

  // The best group for `job` by scoring every group.
  std::optional<std::pair<size_t, Placed>> ScanAll(const PendingJob& job,
                                                   const GpuDemand& demand,
                                                   const FreeCapacity& free);
  // The same answer from the order kept for the job's GPU need.
  std::optional<std::pair<size_t, Placed>> ScanOrder(CandidateOrder& order,
                                                     const PendingJob& job,
                                                     const GpuDemand& demand,
                                                     const FreeCapacity& free);
  CandidateOrder* OrderFor(const PendingJob& job, const GpuDemand& demand,
                           const FreeCapacity& free);
  void CatchUp(CandidateOrder& order, const FreeCapacity& free);
  // Where the order's need goes on group `id` when the job takes no CPU or
  // host memory (the least its score can be), or nullopt when its GPUs do
  // not fit there; remembered per group state.
  const std::optional<Placed>& Bound(CandidateOrder& order, uint32_t id,
                                     const FreeCapacity& free);
  // Where `job` goes on group `id` (its lowest member `w`), remembered per
  // group state and set of task kinds the job leaves room for on the host.
  const std::optional<Placed>& ExactOn(CandidateOrder& order, uint32_t id,
                                       const WorkerCapacity& w,
                                       const PendingJob& job,
                                       const GpuDemand& demand);

  const std::vector<FragClass> classes_;
  // The distinct per-GPU demands of the task kinds (many kinds share one),
  // and each kind's among them.
  std::vector<GpuDemand> demands_;
  std::vector<size_t> demand_of_;
  mutable std::vector<DemandStat> scratch_stats_;
  // The distinct CPU and host memory asks of the task kinds, ascending.
  std::vector<int64_t> kind_cpus_, kind_memories_;
  // Free CPU, host memory and slots at or beyond these are all the same to
  // every job and task kind of this pass (twice the most any asks).
  int64_t cpu_cap_ = 0, memory_cap_ = 0;
  int32_t slots_cap_ = 0;
  std::vector<Group> groups_;    // slots by group id
  std::vector<uint32_t> spare_;  // ids of unused slots
  // The groups with members, with what a scan reads of them side by side.
  struct Alive {
    uint32_t id = 0;
    size_t rep = 0;  // lowest member
  };
  std::vector<Alive> alive_;
  absl::flat_hash_map<std::string, uint32_t> by_signature_;
  std::vector<uint32_t> group_of_;  // per worker
  std::vector<uint32_t> stamps_;    // per group id, Group::stamp side by side
  uint32_t next_epoch_ = 1;
  uint32_t next_stamp_ = 1;
  // Every Touch in order, as (group id, stamp): what the orders catch up on.
  std::vector<std::pair<uint32_t, uint32_t>> touched_;
  absl::flat_hash_map<GpuKey, std::unique_ptr<CandidateOrder>> orders_;
  std::vector<size_t> scratch_devices_;
};

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SCHEDULER_FGD_CHOOSER_H_
