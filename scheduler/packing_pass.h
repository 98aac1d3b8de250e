// The scheduling pass every packing policy shares: take the pending jobs in
// order (priority, then submit order or fair share: see fair_share.h), tell
// at once which can never fit (infeasible: no worker could hold them even
// idle), ask the policy's NodeChooser where each other job goes on what is
// still free, and subtract it. A multi-GPU job is a gang: all its GPUs on
// one node or none at all. A job asking at least as much as one that
// already failed in this pass is not tried again (free capacity only
// shrinks during a pass), which keeps a pass over a long queue cheap. With
// backfill, the first blocked jobs each reserve a worker that nothing later in
// the pass may use; with preemption, waiting jobs then look for lower-priority
// victims (preemption.h), and a waiting job whose victims are still stopping
// holds the workers it is to run on the same way (ClusterSnapshot::HeldFor),
// whatever the backfill setting: otherwise a later job would take the room
// the first victims left, the waiting job would preempt it in turn, and so
// on for as long as victims stop one by one. A job restarted after failures
// first looks only at the workers it did not fail on
// (ClusterSnapshot::AvoidedBy). Thread- compatible: a pass owns its working
// copy of the free capacity.
#ifndef TRAINYARD_SCHEDULER_PACKING_PASS_H_
#define TRAINYARD_SCHEDULER_PACKING_PASS_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "scheduler/cluster_snapshot.h"
#include "scheduler/node_fit.h"
#include "scheduler/placement_policy.h"

namespace trainyard::scheduler {

// A digest of one worker's free capacity, refreshed after every placement
// on it. Choosers scan these (contiguous and small) and look at the full
// WorkerCapacity only where a job may fit.
struct NodeSummary {
  int64_t free_cpu_milli = 0;
  int64_t free_memory_bytes = 0;
  int64_t free_gpu_milli = 0;       // summed over devices
  int64_t max_free_gpu_memory = 0;  // the most on one device
  int32_t free_cpu_slots = 0;
  int32_t wholly_free_gpus = 0;
  int32_t max_free_compute = 0;  // the most on one device
  int32_t gpus = 0;
  bool reserved = false;  // held for a blocked job: nothing else goes here
};

NodeSummary Summarize(const WorkerCapacity& w);
// False only where the job surely does not fit (a necessary condition).
bool MayFit(const NodeSummary& s, const PendingJob& job,
            const GpuDemand& demand);

// The free capacity a pass works on: what is left of each worker.
struct FreeCapacity {
  std::vector<WorkerCapacity> workers;  // in snapshot order
  std::vector<NodeSummary> summaries;   // one per worker

  // Exactly FitsNow, with the summary as a quick first test.
  bool Fits(size_t worker, const PendingJob& job,
            const GpuDemand& demand) const {
    return MayFit(summaries[worker], job, demand) &&
           FitsNow(workers[worker], job, demand);
  }
};

// Where one job goes: a worker (position in the snapshot) and the positions
// of the devices it takes there (empty without GPUs).
struct Choice {
  size_t worker = 0;
  std::vector<size_t> devices;
};

class NodeChooser {
 public:
  virtual ~NodeChooser() = default;
  // Where `job` goes on `free`, or nullopt when it fits nowhere now.
  virtual std::optional<Choice> Choose(const PendingJob& job,
                                       const GpuDemand& demand,
                                       const FreeCapacity& free) = 0;
  // `free.workers[worker]` just changed (a job was placed there).
  virtual void Changed(size_t /*worker*/, const FreeCapacity& /*free*/) {}
};

// The features a policy name adds to its base ("fgd+drf+preempt").
struct PassFeatures {
  bool preemption = false;   // waiting jobs may stop lower-priority ones
  bool fair_share = false;   // weighted DRF between tenants in a priority
  int32_t reservations = 0;  // backfill: blocked jobs that hold a worker
};

// "fgd" + {fair_share, preemption} -> "fgd+drf+preempt"; reservations add
// "+backfill".
std::string NameWithFeatures(std::string_view base, const PassFeatures& f);

// What every policy built on RunPackingPass shares: its name (the base name
// with the feature suffixes) and the features it runs the pass with.
// Subclasses implement Place. Immutable, so thread-safe.
class PackingPolicy : public PlacementPolicy {
 public:
  std::string_view name() const override { return name_; }

 protected:
  PackingPolicy(std::string_view base_name, const PassFeatures& features)
      : features_(features), name_(NameWithFeatures(base_name, features)) {}

  const PassFeatures features_;

 private:
  const std::string name_;
};

struct PackingPassOptions {
  bool exclusive = false;  // every GPU job takes whole GPUs
  bool preemption = false;
  bool fair_share = false;
  int32_t reservations = 0;

  static PackingPassOptions With(bool exclusive, const PassFeatures& f) {
    return {exclusive, f.preemption, f.fair_share, f.reservations};
  }
};

// `make_chooser` is called once, on the pass's initial free capacity.
using ChooserFactory =
    absl::FunctionRef<std::unique_ptr<NodeChooser>(const FreeCapacity&)>;

Plan RunPackingPass(const ClusterSnapshot& snapshot,
                    const PackingPassOptions& options,
                    ChooserFactory make_chooser);

// Whether the job's ranks may go to several nodes (max_nodes != 1 and more
// than one rank).
bool MaySpread(const PendingJob& job);
// Node limit of a spreadable job: max_nodes, or every rank on its own node.
int32_t NodeLimit(const PendingJob& job);

// One node's share of a spread job: its position, ranks and devices.
struct SpreadPart {
  size_t worker = 0;
  int32_t ranks = 0;
  std::vector<size_t> devices;
};

// How a spread job's ranks divide over the nodes, given how many of them fit
// each (`room[i]` on worker i): the nodes with room for the most ranks first
// (the fewest nodes; ties to the earlier worker), at most NodeLimit of them,
// in rank order, devices left empty. Empty when they do not hold every rank,
// that is, unless the NodeLimit largest rooms add up to RanksOf(job).
std::vector<SpreadPart> SpreadOver(const PendingJob& job,
                                   const std::vector<int32_t>& room);

// The `count` fitting devices of `w` with the least free compute; fewer when
// not enough fit. Ties: for a demand that could share, a GPU that is not
// shareable (it would be given whole) after one that is, then the lower
// index.
std::vector<size_t> TightestDevices(const WorkerCapacity& w,
                                    const GpuDemand& demand, int32_t count);
// The first `count` fitting devices by index.
std::vector<size_t> FirstDevices(const WorkerCapacity& w,
                                 const GpuDemand& demand, int32_t count);

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SCHEDULER_PACKING_PASS_H_
