// Warm starts (spec.warm_start): which checkpoint of the source job a queued
// job starts from. A job waits until its source job has ended, so the
// source's set of checkpoints no longer changes; the scheduler loop then
// picks the checkpoint once and records it (Job.warm_start_checkpoint),
// and every attempt without a checkpoint of its own starts from it. A
// checkpoint that cannot be picked (the source wrote none, not that step,
// named no best, or was deleted first) cancels the job, its reason naming
// the checkpoint; one whose source's checkpoints cannot be read (an I/O
// error) waits. Pure functions; thread-safe.
#ifndef TRAINYARD_SERVER_WARM_STARTS_H_
#define TRAINYARD_SERVER_WARM_STARTS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/job_dependencies.h"
#include "server/job_store.h"
#include "trainyard/v1/jobs.pb.h"

namespace trainyard::server {

struct WarmStartPick {
  std::string job_id;      // the job that starts from it
  std::string checkpoint;  // the source's step-* directory
  int64_t step = 0;
};

struct WarmStartCheck {
  std::vector<DependencyWait> waits;        // the source has not ended
  std::vector<DependencyFailure> failures;  // no checkpoint to start from
  std::vector<WarmStartPick> picks;
};

// The job `id`: NOT_FOUND when it does not exist (deleted).
using JobLookup = std::function<absl::StatusOr<v1::Job>(const std::string& id)>;

// The checkpoint of `source` that `warm_start` asks for (the newest, a
// step, or the best). FAILED_PRECONDITION starting with "warm_start: " and
// naming what is missing when there is no such checkpoint; another code
// when the checkpoints could not be read (worth trying again).
absl::StatusOr<WarmStartPick> PickWarmStart(const v1::WarmStart& warm_start,
                                            const v1::Job& source);

// Sorts the queued jobs with a warm start not yet picked (in the order
// given) into waits, failures and picks; others are not in the answer. A
// source that cannot be read (a store error) keeps the job waiting.
WarmStartCheck CheckWarmStarts(const std::vector<JobRecord>& queued,
                               const JobLookup& job_of);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_WARM_STARTS_H_
