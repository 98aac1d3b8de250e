// Concurrency groups in the scheduling pass (JobSpec.concurrency): a
// tenant's jobs with the same group hold workers at most max_running at a
// time, each job starting under its own max_running. A start limit
// (server/start_limits.h): queued jobs of a full group are held back before
// the policy runs, and placements that would fill a group past it within
// the pass are dropped after.
#ifndef TRAINYARD_SERVER_CONCURRENCY_GROUPS_H_
#define TRAINYARD_SERVER_CONCURRENCY_GROUPS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "server/job_store.h"
#include "server/start_limits.h"

namespace trainyard::server {

// Jobs holding workers, by group (tenant and group name).
using GroupCounts = std::map<std::pair<std::string, std::string>, int32_t>;

// The active (SCHEDULED, RUNNING, PREEMPTING) jobs of each group.
GroupCounts RunningByGroup(const std::vector<JobRecord>& active);

// The limit of a pass, counting from `running` (which it updates).
StartLimit GroupLimit(GroupCounts& running);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_CONCURRENCY_GROUPS_H_
