// JobOrder: the order a pass considers pending jobs in. Priority is strict
// (higher first). Within one priority, either submit order, or — with fair
// share on — weighted DRF between tenants: the tenant whose dominant share
// (the largest of its GPU, CPU, host memory and CPU-slot shares of the
// cluster, divided by its weight) is smallest goes next, with its oldest
// job. Shares start from the running jobs (every part of a job spread over
// several nodes) and grow as the pass places jobs (Placed), so a tenant that
// got much waits for the others.
// Thread-compatible; lives for one pass.
#ifndef TRAINYARD_SCHEDULER_FAIR_SHARE_H_
#define TRAINYARD_SCHEDULER_FAIR_SHARE_H_

#include <array>
#include <cstddef>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "scheduler/cluster_snapshot.h"
#include "scheduler/placement_policy.h"

namespace trainyard::scheduler {

// Jobs by priority, then submit order, then id.
std::vector<const PendingJob*> InPlacementOrder(
    const std::vector<PendingJob>& pending);

class JobOrder {
 public:
  JobOrder(const ClusterSnapshot& snapshot, bool fair_share);

  // The next job to consider; nullptr when all were handed out.
  const PendingJob* Next();
  // The job Next() returned was placed and given `gpu_milli` of GPU
  // compute (summed over its GPUs): its tenant's share grows.
  void Placed(const PendingJob& job, int64_t gpu_milli);

  // Numbers the pass's `waits` (its pending jobs not placed) 1, 2, ... in
  // the order they would start as room frees; the waits keep their order,
  // the one the pass considered them in. Without fair share the two orders
  // are the same. With it, each priority in turn, the tenant whose
  // dominant share is smallest next (counting what the pass placed and, as
  // if started, the feasible jobs numbered before) with its oldest waiting
  // job: a tenant's backlog interleaves with the others' as DRF serves
  // them, rather than coming whole before theirs (a waiting job adds
  // nothing to its tenant's share in the pass).
  void NumberWaits(std::vector<JobWait>& waits) const;

 private:
  using Usage = std::array<double, 4>;  // GPU milli, CPU milli, memory, slots

  // What `job` adds to its tenant's use once given `gpu_milli` of GPU
  // compute (summed over its GPUs).
  static Usage AskOf(const PendingJob& job, double gpu_milli);
  double DominantShare(const std::string& tenant,
                       const std::map<std::string, Usage>& used) const;
  // The tenant of `level` (jobs by tenant) whose dominant share under
  // `used` is the smallest, the first by name on a tie.
  template <typename Level>
  typename Level::iterator LeastShared(
      Level& level, const std::map<std::string, Usage>& used) const;
  static void Add(std::map<std::string, Usage>& used, const std::string& tenant,
                  const Usage& use);

  const ClusterSnapshot& snapshot_;
  const bool fair_share_;
  std::vector<const PendingJob*> order_;  // priority, submit order
  size_t next_ = 0;
  // Fair share: the jobs of the current priority level, by tenant.
  std::map<std::string, std::deque<const PendingJob*>> level_;
  std::map<std::string, Usage> used_;
  Usage total_{};
};

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SCHEDULER_FAIR_SHARE_H_
