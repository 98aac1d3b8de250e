// Limits on which queued jobs may start in a scheduling pass (tenant
// quotas, concurrency groups), applied around the placement policy in two
// steps, both pure functions:
//   - before the policy runs, the queued jobs already at their limit are
//     held back (so they neither take room in the plan from other jobs nor
//     wait in vain at the head of the queue);
//   - after it, the placements are taken in plan order and one that would
//     pass its limit within this one pass is dropped, with the preemptions
//     made for it; its job waits with the reason.
#ifndef TRAINYARD_SERVER_START_LIMITS_H_
#define TRAINYARD_SERVER_START_LIMITS_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "scheduler/placement_policy.h"
#include "server/job_store.h"

namespace trainyard::server {

// One limit: why a job must wait as things stand ("" when it may start),
// and counting a job that starts, so the next one sees it.
struct StartLimit {
  std::function<std::string(const v1::Job& job)> wait_reason;
  std::function<void(const v1::Job& job)> count;
};

// The waits (kRetryLater, with the reason) of the jobs of `queued` that
// `limit` holds back; the pass leaves them out.
std::vector<scheduler::JobWait> HeldBackWaits(
    const StartLimit& limit, const std::vector<JobRecord>& queued);

// Drops the placements of `plan` that `limit` refuses, in plan order,
// counting each one it keeps, and the preemptions made for those dropped;
// adds a wait for each dropped job. `queued` holds every placed job.
void DropPlacementsPastLimit(const StartLimit& limit,
                             const std::map<std::string, JobRecord>& queued,
                             scheduler::Plan& plan);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_START_LIMITS_H_
