#include "server/warm_starts.h"

#include "absl/strings/str_cat.h"
#include "common/field_errors.h"
#include "engine/core/checkpoint.h"
#include "server/checkpoint_access.h"
#include "server/job_state.h"

namespace trainyard::server {

absl::StatusOr<WarmStartPick> PickWarmStart(const v1::WarmStart& warm_start,
                                            const v1::Job& source) {
  v1::DownloadCheckpointRequest request;
  request.set_job_id(source.id());
  request.set_step(warm_start.step());
  request.set_best(warm_start.best());
  absl::StatusOr<int64_t> step = PickCheckpoint(source, request);
  if (!step.ok()) {
    // No such checkpoint is for good; failing to read the directory may
    // not be.
    const absl::StatusCode code =
        absl::IsNotFound(step.status()) ||
                absl::IsFailedPrecondition(step.status()) ||
                absl::IsInvalidArgument(step.status())
            ? absl::StatusCode::kFailedPrecondition
            : step.status().code();
    return FieldError(code, "warm_start", step.status().message());
  }
  WarmStartPick pick;
  pick.checkpoint = absl::StrCat(source.checkpoint_dir(), "/",
                                 engine::CheckpointDirName(*step));
  pick.step = *step;
  return pick;
}

WarmStartCheck CheckWarmStarts(const std::vector<JobRecord>& queued,
                               const JobLookup& job_of) {
  WarmStartCheck check;
  for (const JobRecord& r : queued) {
    const v1::Job& job = r.job;
    if (!AwaitsWarmStartSource(job)) continue;
    const std::string& source_id = job.spec().warm_start().job();
    absl::StatusOr<v1::Job> source = job_of(source_id);
    if (absl::IsNotFound(source.status())) {
      check.failures.push_back(
          {job.id(), absl::StrCat("warm_start: job ", source_id,
                                  " was deleted before this job started")});
      continue;
    }
    if (!source.ok()) {
      check.waits.push_back(
          {job.id(),
           absl::StrCat("waiting for job ", source_id,
                        " (state unknown: ", source.status().message(),
                        ") to end: it is the warm start")});
      continue;
    }
    if (!IsTerminal(source->state())) {
      check.waits.push_back(
          {job.id(), absl::StrCat("waiting for job ", source_id, " (",
                                  JobStateName(source->state()),
                                  ") to end: it is the warm start")});
      continue;
    }
    absl::StatusOr<WarmStartPick> pick =
        PickWarmStart(job.spec().warm_start(), *source);
    if (absl::IsFailedPrecondition(pick.status())) {
      check.failures.push_back(
          {job.id(), std::string(pick.status().message())});
      continue;
    }
    if (!pick.ok()) {
      check.waits.push_back(
          {job.id(),
           absl::StrCat("waiting to read the checkpoints of job ", source_id,
                        ", its warm start: ", pick.status().message())});
      continue;
    }
    pick->job_id = job.id();
    check.picks.push_back(*std::move(pick));
  }
  return check;
}

}  // namespace trainyard::server
