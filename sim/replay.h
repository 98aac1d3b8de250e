// Timeline replay of a trace: each pod arrives at its creation time and,
// once placed, runs for as long as it ran in the trace (deletion minus
// scheduled time), then leaves. A pod that does not fit waits in the queue
// (queueing instead of failing) and every arrival or departure triggers a
// scheduling pass over the whole queue — the server's loop, driven by trace
// time. A pod that could never fit the cluster is dropped at once and
// counted. Pods without times (or that never ran) are left out.
// Thread-compatible.
#ifndef TRAINYARD_SIM_REPLAY_H_
#define TRAINYARD_SIM_REPLAY_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/cluster_snapshot.h"
#include "scheduler/placement_policy.h"
#include "sim/openb_trace.h"

namespace trainyard::sim {

struct ReplayOptions {
  int64_t sample_every_s = 3600;  // allocation time series resolution
  // At most this many samples (>= 2): a replay that runs longer keeps
  // every other sample and doubles the interval, as often as needed, so
  // memory stays bounded however long queueing stretches the timeline.
  size_t max_samples = 100'000;
  // Arrival times are divided by this (durations are kept), to load a
  // cluster the trace itself keeps lightly used.
  double arrival_speedup = 1;
};

struct AllocationSample {
  int64_t time_s = 0;
  double allocated_share = 0;  // of the cluster's GPU compute
  int64_t queued = 0;
};

struct ReplayResult {
  int64_t jobs = 0;           // pods replayed
  int64_t infeasible = 0;     // dropped: could never fit
  int64_t never_started = 0;  // still queued when the trace ran out
  double mean_wait_s = 0, p99_wait_s = 0;  // creation -> start
  double mean_jct_s = 0, p99_jct_s = 0;    // creation -> end
  double mean_allocated_share = 0;  // time-weighted, first arrival -> end
  // Time-weighted over the periods when some job was queued: how much of
  // the GPU compute was in use while jobs waited for room.
  double allocated_while_queued = 0;
  int64_t makespan_s = 0;  // first arrival -> last departure
  int64_t passes = 0;
  std::vector<AllocationSample> samples;
  int64_t sample_every_s = 0;  // between samples, after any doubling
};

// The p-quantile (p in [0, 1]) of `values` by linear interpolation between
// the closest ranks (numpy's default): with n sorted values, rank p*(n-1).
// 0 for no values.
double Percentile(std::vector<double> values, double p);

// INVALID_ARGUMENT when the cluster has no GPU, no pod has usable times, a
// time is beyond kMaxTraceSeconds or the options are out of range;
// INTERNAL when the policy over-commits.
absl::StatusOr<ReplayResult> RunReplay(
    const std::vector<scheduler::WorkerCapacity>& cluster,
    const std::vector<TracePod>& pods, const scheduler::PlacementPolicy& policy,
    const ReplayOptions& options = {});

}  // namespace trainyard::sim

#endif  // TRAINYARD_SIM_REPLAY_H_
