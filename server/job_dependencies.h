// Job dependencies (spec.depends_on): which queued jobs may start because
// every job they depend on has SUCCEEDED, which must wait (and why), and
// which can never start because a job they depend on ended otherwise or was
// deleted first. The scheduler loop acts on the answer each pass: it leaves
// the waiting jobs out of the pass, cancels the hopeless ones and records
// Job.dependencies_met for the rest, after which their dependencies are no
// longer looked at. Pure functions; thread-safe.
#ifndef TRAINYARD_SERVER_JOB_DEPENDENCIES_H_
#define TRAINYARD_SERVER_JOB_DEPENDENCIES_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/job_store.h"

namespace trainyard::server {

struct DependencyWait {
  std::string job_id;
  std::string reason;  // "waiting for j-000012 (RUNNING) to succeed"
};

struct DependencyFailure {
  std::string job_id;
  std::string reason;  // the cancel's reason, naming the job depended on
};

struct DependencyCheck {
  std::vector<DependencyWait> waits;
  std::vector<DependencyFailure> failures;
  // Jobs whose dependencies have all SUCCEEDED and are not yet marked so.
  std::vector<std::string> met;
};

// The state of job `id`: NOT_FOUND when it does not exist (deleted).
using JobStateLookup =
    std::function<absl::StatusOr<v1::JobState>(const std::string& id)>;

// Sorts the queued jobs with dependencies not yet met (in the order given)
// into waits, failures and met; others are not in the answer. A job whose
// state cannot be read (a store error) keeps the job waiting, never fails
// it.
DependencyCheck CheckDependencies(const std::vector<JobRecord>& queued,
                                  const JobStateLookup& state_of);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_JOB_DEPENDENCIES_H_
