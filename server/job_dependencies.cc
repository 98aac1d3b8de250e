#include "server/job_dependencies.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/job_state.h"

namespace trainyard::server {

DependencyCheck CheckDependencies(const std::vector<JobRecord>& queued,
                                  const JobStateLookup& state_of) {
  DependencyCheck check;
  for (const JobRecord& r : queued) {
    const v1::Job& job = r.job;
    if (!AwaitsDependencies(job)) continue;
    std::vector<std::string> pending;  // "j-000012 (RUNNING)"
    std::string failure;
    for (const std::string& id : job.spec().depends_on()) {
      absl::StatusOr<v1::JobState> state = state_of(id);
      if (absl::IsNotFound(state.status())) {
        failure =
            absl::StrCat("dependency ", id, " was deleted before it succeeded");
        break;
      }
      if (!state.ok()) {
        pending.push_back(absl::StrCat(
            id, " (state unknown: ", state.status().message(), ")"));
        continue;
      }
      if (*state == v1::SUCCEEDED) continue;
      if (IsTerminal(*state)) {
        failure =
            absl::StrCat("dependency ", id, " ended ", JobStateName(*state),
                         ", so this job could "
                         "never start");
        break;
      }
      pending.push_back(absl::StrCat(id, " (", JobStateName(*state), ")"));
    }
    if (!failure.empty()) {
      check.failures.push_back({job.id(), std::move(failure)});
    } else if (!pending.empty()) {
      check.waits.push_back(
          {job.id(), absl::StrCat("waiting for ", absl::StrJoin(pending, ", "),
                                  " to succeed")});
    } else {
      check.met.push_back(job.id());
    }
  }
  return check;
}

}  // namespace trainyard::server
