// JobLifecycle::Delete: a finished job deleted for good, with its
// checkpoints.
//
// The order makes every failure leave the job whole: the checkpoint
// directory is first moved aside within the checkpoint root (one rename),
// then the record, events and log are deleted in one store transaction
// that re-checks the job has ended; if that fails the directory is moved
// back. Only once the record is gone is the moved directory removed. A
// crash between the two leaves a ".deleting-<id>" directory, which
// SweepDeletedCheckpoints removes at the next start.
#include <filesystem>
#include <optional>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "server/checkpoint_paths.h"
#include "server/job_lifecycle.h"
#include "server/job_state.h"

namespace trainyard::server {
namespace {

namespace fs = std::filesystem;

constexpr char kDeletingPrefix[] = ".deleting-";

absl::Status CheckDeletable(const v1::Job& job) {
  if (IsTerminal(job.state())) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("job ", job.id(), " is ", JobStateName(job.state()),
                   ": only a job that has ended can be deleted (cancel it "
                   "first, then delete it once it is CANCELLED)"));
}

// The bytes of the regular files under `dir`, symlinks not followed.
int64_t BytesUnder(const fs::path& dir) {
  std::error_code ec;
  int64_t bytes = 0;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec) && !it->is_symlink(size_ec)) {
      const uintmax_t size = it->file_size(size_ec);
      if (!size_ec) bytes += static_cast<int64_t>(size);
    }
  }
  return bytes;
}

// A job that has not ended and starts from `job_id`'s checkpoint (its
// warm start), if there is one: those checkpoints must stay until it ends.
absl::StatusOr<std::optional<v1::Job>> WarmStartedFrom(
    JobStore* store, const std::string& job_id) {
  ASSIGN_OR_RETURN(std::vector<JobRecord> unended,
                   store->JobsInStates({v1::QUEUED, v1::SCHEDULED, v1::RUNNING,
                                        v1::PREEMPTING, v1::SUSPENDED}));
  for (JobRecord& r : unended) {
    if (r.job.spec().has_warm_start() &&
        r.job.spec().warm_start().job() == job_id) {
      return std::optional<v1::Job>(std::move(r.job));
    }
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<DeletedJob> JobLifecycle::Delete(const std::string& job_id,
                                                bool keep_checkpoints) {
  absl::MutexLock one_at_a_time(&delete_mu_);
  ASSIGN_OR_RETURN(JobRecord record, store_->GetJob(job_id));
  RETURN_IF_ERROR(CheckDeletable(record.job));
  // As Assign names it, under the current root whatever root the job ran
  // under (the state dir may have moved since). A job that never started
  // has no directory: one of its id there is not its own.
  const fs::path own = CheckpointDirOf(options_.checkpoint_root, job_id);
  const fs::path parked = fs::path(options_.checkpoint_root) /
                          absl::StrCat(kDeletingPrefix, job_id);
  std::error_code ec;
  const bool remove_dir = !keep_checkpoints &&
                          !options_.checkpoint_root.empty() &&
                          !record.job.checkpoint_dir().empty() &&
                          fs::exists(fs::symlink_status(own, ec));
  if (remove_dir) {
    ASSIGN_OR_RETURN(std::optional<v1::Job> user,
                     WarmStartedFrom(store_, job_id));
    if (user.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job_id, "'s checkpoints are the warm start of job ",
          user->id(), " (", JobStateName(user->state()),
          "): delete it with --keep-checkpoints, or once that job has ended"));
    }
    fs::remove_all(parked, ec);  // a leftover of an earlier try
    fs::rename(own, parked, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat(
          "job ", job_id, ": cannot move its checkpoint directory ",
          own.string(), " aside to delete it: ", ec.message(),
          "; nothing was deleted"));
    }
  }
  absl::Status deleted = store_->DeleteJob(
      job_id, [](const JobRecord& r) { return CheckDeletable(r.job); });
  if (!deleted.ok()) {
    if (remove_dir) {
      fs::rename(parked, own, ec);
      if (ec) {
        YARD_LOG(ERROR) << "job " << job_id << ": could not move "
                        << parked.string() << " back to " << own.string()
                        << ": " << ec.message();
      }
    }
    return deleted;
  }
  DeletedJob out;
  if (remove_dir) {
    out.checkpoint_dir = own.string();
    out.checkpoint_bytes = BytesUnder(parked);
    fs::remove_all(parked, ec);
    if (ec) {
      YARD_LOG(WARNING) << "job " << job_id << ": removing " << parked.string()
                        << ": " << ec.message() << " (swept at next start)";
    }
  }
  YARD_LOG(INFO) << "job " << job_id << " deleted ("
                 << JobStateName(record.job.state()) << "; checkpoints "
                 << (remove_dir ? absl::StrCat("removed, ",
                                               out.checkpoint_bytes, " bytes")
                                : "left in place")
                 << ")";
  return out;
}

int SweepDeletedCheckpoints(const std::string& checkpoint_root) {
  std::error_code ec;
  std::vector<fs::path> leftovers;
  for (fs::directory_iterator it(checkpoint_root, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (absl::StartsWith(it->path().filename().string(), kDeletingPrefix)) {
      leftovers.push_back(it->path());
    }
  }
  int removed = 0;
  for (const fs::path& path : leftovers) {
    fs::remove_all(path, ec);
    if (ec) {
      YARD_LOG(WARNING) << "cannot remove " << path.string() << ": "
                        << ec.message();
    } else {
      ++removed;
    }
  }
  return removed;
}

}  // namespace trainyard::server
