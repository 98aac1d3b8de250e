// JobRetention: the server's retention policy for ended jobs
// (yard-server --job-retention). A job that ended longer ago than the
// retention period is deleted as DeleteJob deletes it (JobLifecycle::Delete):
// its record, events and log, and unless the policy keeps them its
// checkpoint directory. Without it every ended job and its checkpoints stay
// forever, and the checkpoint root (gigabytes per GPT job) only grows.
//
// A job's age is counted from its end_time. A sweep asks the store (by an
// index on the end time, not a scan) for the jobs that expired, deletes
// them and learns when the next one expires; the thread sleeps until then,
// or at most max_sweep_interval, so a job that ends after a sweep is
// deleted no later than that past its expiry.
// Deletions that fail (a checkpoint directory that cannot be moved) are
// logged and retried by the next sweep; a job a user deleted meanwhile is
// skipped.
//
// Start/Stop are for one owner thread; Sweep is serialized with the
// thread's own sweeps.
#ifndef TRAINYARD_SERVER_JOB_RETENTION_H_
#define TRAINYARD_SERVER_JOB_RETENTION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/job_lifecycle.h"
#include "server/job_store.h"

namespace trainyard::server {

// The longest retention period accepted (ten years).
inline constexpr absl::Duration kMaxJobRetention = absl::Hours(24 * 3650);

// Parses a retention period: a whole number with a unit, d, h, m or s
// ("7d", "36h", "90m", "30s"), or "0" for none (keep jobs forever).
// INVALID_ARGUMENT naming the value otherwise, or when it is over
// kMaxJobRetention.
absl::StatusOr<absl::Duration> ParseRetention(const std::string& value);

struct JobRetentionOptions {
  absl::Duration keep_for = absl::ZeroDuration();  // > 0
  bool keep_checkpoints = false;  // delete records only, as --keep-checkpoints
  absl::Duration max_sweep_interval = absl::Minutes(1);
  // The most jobs one sweep deletes; the next sweep follows at once.
  int32_t max_per_sweep = 1000;
  // Told of each job the policy deleted (metrics).
  std::function<void(const DeletedJob&)> on_deleted;
};

struct RetentionSweep {
  int32_t deleted = 0;
  int32_t failed = 0;            // left for the next sweep
  int64_t checkpoint_bytes = 0;  // removed with the deleted jobs
  // When the first ended job still kept expires; InfiniteFuture when none.
  absl::Time next_expiry = absl::InfiniteFuture();
};

class JobRetention {
 public:
  JobRetention(JobStore* store, JobLifecycle* lifecycle, Clock* clock,
               JobRetentionOptions options);
  ~JobRetention();

  void Start();
  void Stop();

  // One sweep at clock->Now(). Tests call it directly instead of Start().
  // An error only when the ended jobs cannot be read.
  absl::StatusOr<RetentionSweep> Sweep();

 private:
  void Loop();

  JobStore* const store_;
  JobLifecycle* const lifecycle_;
  Clock* const clock_;
  const JobRetentionOptions options_;

  absl::Mutex sweep_mu_;  // one sweep at a time

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_JOB_RETENTION_H_
