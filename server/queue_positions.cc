#include "server/queue_positions.h"

namespace trainyard::server {

void QueuePositions::Replace(const std::vector<scheduler::JobWait>& waits) {
  absl::flat_hash_map<std::string, int64_t> next;
  next.reserve(waits.size());
  for (const scheduler::JobWait& w : waits) next[w.job_id] = w.position;
  absl::MutexLock lock(&mu_);
  positions_.swap(next);
}

void QueuePositions::Clear() {
  absl::MutexLock lock(&mu_);
  positions_.clear();
}

int64_t QueuePositions::Of(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = positions_.find(job_id);
  return it == positions_.end() ? 0 : it->second;
}

void QueuePositions::Fill(v1::Job& job) const {
  job.set_queue_position(job.state() == v1::QUEUED ? Of(job.id()) : 0);
}

}  // namespace trainyard::server
