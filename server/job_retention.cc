#include "server/job_retention.h"

#include <algorithm>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/proto_time.h"
#include "common/status_macros.h"

namespace trainyard::server {
namespace {

// When the job ended: its end_time, or for a record without one its last
// update (which for an ended job is its end or later).
absl::Time EndedAt(const v1::Job& job) {
  return FromProtoTime(job.has_end_time() ? job.end_time() : job.update_time());
}

}  // namespace

absl::StatusOr<absl::Duration> ParseRetention(const std::string& value) {
  if (value == "0") return absl::ZeroDuration();
  auto invalid = [&value](const char* why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "retention \"", value, "\": ", why,
        " (expected a whole number with a unit d, h, m or s, e.g. 7d or 36h; "
        "0 keeps jobs forever)"));
  };
  if (value.size() < 2) return invalid("no unit");
  absl::Duration unit;
  switch (value.back()) {
    case 'd':
      unit = absl::Hours(24);
      break;
    case 'h':
      unit = absl::Hours(1);
      break;
    case 'm':
      unit = absl::Minutes(1);
      break;
    case 's':
      unit = absl::Seconds(1);
      break;
    default:
      return invalid("unknown unit");
  }
  const std::string number = value.substr(0, value.size() - 1);
  int64_t n = 0;
  if (number.find_first_not_of("0123456789") != std::string::npos ||
      !absl::SimpleAtoi(number, &n)) {
    return invalid("not a whole number");
  }
  if (n > absl::ToInt64Seconds(kMaxJobRetention) ||
      n * unit > kMaxJobRetention) {
    return invalid("longer than 3650d");
  }
  return n * unit;
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
  ASSIGN_OR_RETURN(
      std::vector<JobRecord> ended,
      store_->JobsInStates({v1::SUCCEEDED, v1::FAILED, v1::CANCELLED}));
  const absl::Time now = clock_->Now();
  RetentionSweep sweep;
  for (const JobRecord& r : ended) {
    const absl::Time expiry = EndedAt(r.job) + options_.keep_for;
    if (expiry > now) {
      sweep.next_expiry = std::min(sweep.next_expiry, expiry);
      continue;
    }
    absl::StatusOr<DeletedJob> deleted =
        lifecycle_->Delete(r.job.id(), options_.keep_checkpoints);
    if (absl::IsNotFound(deleted.status())) continue;  // deleted meanwhile
    if (!deleted.ok()) {
      ++sweep.failed;
      YARD_LOG(WARNING) << "retention: job " << r.job.id()
                        << " not deleted (retried at the next sweep): "
                        << deleted.status();
      continue;
    }
    ++sweep.deleted;
    sweep.checkpoint_bytes += deleted->checkpoint_bytes;
    if (options_.on_deleted) options_.on_deleted(*deleted);
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
