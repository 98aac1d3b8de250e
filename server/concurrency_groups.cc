#include "server/concurrency_groups.h"

#include "absl/strings/str_cat.h"

namespace trainyard::server {
namespace {

bool InGroup(const v1::Job& job) {
  return !job.spec().concurrency().group().empty();
}

std::pair<std::string, std::string> GroupOf(const v1::Job& job) {
  return {job.tenant(), job.spec().concurrency().group()};
}

}  // namespace

GroupCounts RunningByGroup(const std::vector<JobRecord>& active) {
  GroupCounts running;
  for (const JobRecord& r : active) {
    if (InGroup(r.job)) ++running[GroupOf(r.job)];
  }
  return running;
}

StartLimit GroupLimit(GroupCounts& running) {
  return StartLimit{
      .wait_reason = [&running](const v1::Job& job) -> std::string {
        if (!InGroup(job)) return "";
        auto it = running.find(GroupOf(job));
        const int32_t n = it == running.end() ? 0 : it->second;
        const int32_t max = job.spec().concurrency().max_running();
        if (n < max) return "";
        return absl::StrCat("waiting for its concurrency group \"",
                            job.spec().concurrency().group(), "\": ", n,
                            " of its jobs running, at most ", max);
      },
      .count =
          [&running](const v1::Job& job) {
            if (InGroup(job)) ++running[GroupOf(job)];
          },
  };
}

}  // namespace trainyard::server
