#include "server/usage_report.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/field_errors.h"
#include "common/proto_time.h"
#include "common/status_macros.h"

namespace trainyard::server {
namespace {

// Adds `seconds` of `u` to `row`.
void Add(const AttemptUsage& u, double seconds, v1::UsageRow& row) {
  const double gpu = GpuSeconds(u.held, seconds);
  const double cpu = CpuSlotSeconds(u.held, seconds);
  row.set_attempts(row.attempts() + 1);
  row.set_gpu_seconds(row.gpu_seconds() + gpu);
  row.set_cpu_slot_seconds(row.cpu_slot_seconds() + cpu);
  if (u.outcome == v1::FAILED) {
    row.set_failed_gpu_seconds(row.failed_gpu_seconds() + gpu);
    row.set_failed_cpu_slot_seconds(row.failed_cpu_slot_seconds() + cpu);
  }
}

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

// A google.protobuf.Timestamp as its definition bounds it: 0001-01-01 to
// 9999-12-31, nanos in [0, 999999999].
absl::Status CheckTimestamp(absl::string_view field,
                            const google::protobuf::Timestamp& ts) {
  constexpr int64_t kMinSeconds = -62'135'596'800;  // 0001-01-01T00:00:00Z
  constexpr int64_t kMaxSeconds = 253'402'300'799;  // 9999-12-31T23:59:59Z
  if (ts.seconds() < kMinSeconds || ts.seconds() > kMaxSeconds) {
    return InvalidFieldError(
        absl::StrCat(field, ".seconds"),
        absl::StrCat(ts.seconds(), " is outside years 1 to 9999"));
  }
  if (ts.nanos() < 0 || ts.nanos() > 999'999'999) {
    return InvalidFieldError(
        absl::StrCat(field, ".nanos"),
        absl::StrCat(ts.nanos(), " is outside [0, 999999999]"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<UsageQuery> UsageQueryOf(const v1::GetUsageRequest& request,
                                        absl::Time now) {
  if (request.has_start_time()) {
    RETURN_IF_ERROR(CheckTimestamp("start_time", request.start_time()));
  }
  if (request.has_end_time()) {
    RETURN_IF_ERROR(CheckTimestamp("end_time", request.end_time()));
  }
  UsageQuery q;
  if (request.has_end_time() &&
      FromProtoTime(request.end_time()) < absl::UnixEpoch()) {
    return InvalidFieldError(
        "end_time", absl::StrCat(Rfc3339(FromProtoTime(request.end_time())),
                                 " is before 1970"));
  }
  q.end = request.has_end_time()
              ? std::min(FromProtoTime(request.end_time()), now)
              : now;
  // The default window starts no earlier than 1970 (a start the caller did
  // not send is never the error).
  q.start = request.has_start_time()
                ? FromProtoTime(request.start_time())
                : std::max(q.end - kDefaultUsageWindow, absl::UnixEpoch());
  if (q.start < absl::UnixEpoch()) {
    return InvalidFieldError("start_time",
                             absl::StrCat(Rfc3339(q.start), " is before 1970"));
  }
  if (q.start >= q.end) {
    return InvalidFieldError(
        "start_time",
        absl::StrCat(
            Rfc3339(q.start), " is not before the window's end ",
            Rfc3339(q.end),
            request.has_end_time() && FromProtoTime(request.end_time()) <= now
                ? " (end_time)"
                : " (now)"));
  }
  q.tenant = request.tenant();
  q.by_job = request.by_job();
  return q;
}

v1::UsageReport SumUsage(const std::vector<AttemptUsage>& attempts,
                         const UsageQuery& query) {
  v1::UsageReport report;
  *report.mutable_start_time() = ToProtoTime(query.start);
  *report.mutable_end_time() = ToProtoTime(query.end);
  std::set<std::pair<std::string, int32_t>> seen;
  std::map<std::string, v1::UsageRow> tenants;
  std::map<std::string, std::set<std::string>> jobs_of_tenant;
  std::map<std::string, v1::UsageRow> jobs;
  for (const AttemptUsage& u : attempts) {
    if (!query.tenant.empty() && u.tenant != query.tenant) continue;
    if (u.end <= query.start || u.start >= query.end) continue;
    if (!seen.emplace(u.job_id, u.attempt).second) continue;
    const double seconds =
        std::max(0.0, absl::ToDoubleSeconds(std::min(u.end, query.end) -
                                            std::max(u.start, query.start)));
    v1::UsageRow& t = tenants[u.tenant];
    t.set_tenant(u.tenant);
    Add(u, seconds, t);
    jobs_of_tenant[u.tenant].insert(u.job_id);
    Add(u, seconds, *report.mutable_total());
    if (query.by_job) {
      v1::UsageRow& j = jobs[u.job_id];
      j.set_tenant(u.tenant);
      j.set_job_id(u.job_id);
      j.set_job_name(u.job_name);
      j.set_jobs(1);
      Add(u, seconds, j);
    }
  }
  int64_t all_jobs = 0;
  for (auto& [tenant, row] : tenants) {
    row.set_jobs(static_cast<int64_t>(jobs_of_tenant[tenant].size()));
    all_jobs += row.jobs();
    *report.add_tenants() = std::move(row);
  }
  report.mutable_total()->set_jobs(all_jobs);
  std::vector<v1::UsageRow> rows;
  rows.reserve(jobs.size());
  for (auto& [id, row] : jobs) rows.push_back(std::move(row));
  std::sort(rows.begin(), rows.end(),
            [](const v1::UsageRow& a, const v1::UsageRow& b) {
              if (a.gpu_seconds() != b.gpu_seconds()) {
                return a.gpu_seconds() > b.gpu_seconds();
              }
              if (a.cpu_slot_seconds() != b.cpu_slot_seconds()) {
                return a.cpu_slot_seconds() > b.cpu_slot_seconds();
              }
              return a.job_id() < b.job_id();
            });
  if (rows.size() > static_cast<size_t>(kMaxUsageJobRows)) {
    rows.resize(kMaxUsageJobRows);
    report.set_jobs_truncated(true);
  }
  for (v1::UsageRow& row : rows) *report.add_jobs() = std::move(row);
  return report;
}

absl::StatusOr<v1::UsageReport> ReportUsage(
    const JobStore& store, const UsageQuery& query, absl::Time now,
    const std::function<absl::Time(const JobRecord&)>& held_until) {
  // The running attempts first: one that ends meanwhile is then also in
  // the usage table read next, and counts once, as it ended. Read the other
  // way round, it could be in neither.
  ASSIGN_OR_RETURN(
      std::vector<JobRecord> active,
      store.JobsInStates({v1::SCHEDULED, v1::RUNNING, v1::PREEMPTING}));
  ASSIGN_OR_RETURN(std::vector<AttemptUsage> attempts,
                   store.EndedAttempts(query.start, query.end, query.tenant));
  for (const JobRecord& r : active) {
    const absl::Time until = held_until ? std::min(held_until(r), now) : now;
    for (const v1::Attempt& a : r.job.attempts()) {
      if (!a.has_end_time()) attempts.push_back(UsageOf(r.job, a, until));
    }
  }
  v1::UsageReport report = SumUsage(attempts, query);
  std::vector<std::string> ids;
  for (const v1::UsageRow& row : report.jobs()) ids.push_back(row.job_id());
  ASSIGN_OR_RETURN(auto states, store.StatesOf(ids));
  for (v1::UsageRow& row : *report.mutable_jobs()) {
    auto it = states.find(row.job_id());
    if (it != states.end()) row.set_state(it->second);
  }
  return report;
}

}  // namespace trainyard::server
