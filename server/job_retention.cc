#include "server/job_retention.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "common/time_text.h"

namespace trainyard::server {

absl::StatusOr<absl::Duration> ParseRetention(const std::string& value) {
  if (value == "0") return absl::ZeroDuration();
  absl::StatusOr<absl::Duration> d =
      ParseWholeDuration(value, kMaxJobRetention);
  if (d.ok()) return d;
  return absl::InvalidArgumentError(absl::StrCat(
      "retention \"", value, "\": ", d.status().message(),
      " (expected a whole number with a unit d, h, m or s, e.g. 7d or 36h; "
      "0 keeps jobs forever)"));
}

JobRetention::JobRetention(JobStore* store, JobLifecycle* lifecycle,
                           Clock* clock, JobRetentionOptions options)
    : store_(store),
      lifecycle_(lifecycle),
      clock_(clock),
      options_(std::move(options)) {}

JobRetention::~JobRetention() { Stop(); }

void JobRetention::Start() {
  absl::MutexLock lock(&mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void JobRetention::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<RetentionSweep> JobRetention::Sweep() {
  absl::MutexLock sweeping(&sweep_mu_);
  const absl::Time cutoff = clock_->Now() - options_.keep_for;
  ASSIGN_OR_RETURN(std::vector<std::string> expired,
                   store_->EndedBy(cutoff, options_.max_per_sweep));
  RetentionSweep sweep;
  for (const std::string& id : expired) {
    absl::StatusOr<DeletedJob> deleted =
        lifecycle_->Delete(id, options_.keep_checkpoints);
    if (absl::IsNotFound(deleted.status())) continue;  // deleted meanwhile
    if (!deleted.ok()) {
      ++sweep.failed;
      YARD_LOG(WARNING) << "retention: job " << id
                        << " not deleted (retried at the next sweep): "
                        << deleted.status();
      continue;
    }
    ++sweep.deleted;
    sweep.checkpoint_bytes += deleted->checkpoint_bytes;
    if (options_.on_deleted) options_.on_deleted(*deleted);
  }
  if (static_cast<int32_t>(expired.size()) == options_.max_per_sweep) {
    sweep.next_expiry = clock_->Now();  // more may be left: go on at once
  } else {
    ASSIGN_OR_RETURN(std::optional<absl::Time> next,
                     store_->FirstEndAfter(cutoff));
    if (next.has_value()) sweep.next_expiry = *next + options_.keep_for;
  }
  if (sweep.deleted > 0) {
    YARD_LOG(INFO) << "retention: deleted " << sweep.deleted
                   << (sweep.deleted == 1 ? " job" : " jobs")
                   << " that ended over "
                   << absl::FormatDuration(options_.keep_for) << " ago ("
                   << sweep.checkpoint_bytes << " bytes of checkpoints)";
  }
  return sweep;
}

void JobRetention::Loop() {
  while (true) {
    absl::Duration wait = options_.max_sweep_interval;
    if (absl::StatusOr<RetentionSweep> sweep = Sweep(); sweep.ok()) {
      // A job ending after this sweep expires keep_for from now or later.
      wait = std::min(
          {wait, options_.keep_for, sweep->next_expiry - clock_->Now()});
    } else {
      YARD_LOG(ERROR) << "retention sweep failed: " << sweep.status();
    }
    wait = std::max(wait, absl::Milliseconds(100));
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), wait)) return;
  }
}

}  // namespace trainyard::server
