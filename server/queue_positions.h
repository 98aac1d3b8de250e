// QueuePositions: where each waiting job stood in the last scheduling pass
// (1-based, in the order the policy considered the waiting jobs: priority,
// then submit order or fair share). The scheduler loop replaces the whole
// table after every pass; GetJob and ListJobs read it to fill
// Job.queue_position, so queued rows are never rewritten just because the
// queue moved. Held in memory only: after a restart positions are unknown
// (0) until the first pass. Safe for concurrent use.
#ifndef TRAINYARD_SERVER_QUEUE_POSITIONS_H_
#define TRAINYARD_SERVER_QUEUE_POSITIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "scheduler/placement_policy.h"
#include "trainyard/v1/jobs.pb.h"

namespace trainyard::server {

class QueuePositions {
 public:
  // The positions of one pass's waiting jobs; every other job has none.
  void Replace(const std::vector<scheduler::JobWait>& waits);
  void Clear();

  // The job's position in the last pass; 0 when it did not wait in it.
  int64_t Of(const std::string& job_id) const;
  // Sets job.queue_position when the job is QUEUED (clears it otherwise).
  void Fill(v1::Job& job) const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int64_t> positions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_QUEUE_POSITIONS_H_
