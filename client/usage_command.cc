// `yard usage`: the GPU- and CPU-slot-hours jobs held in a window, by
// tenant and with --jobs by job (JobService.GetUsage). A tenant token sees
// its own tenant; an admin token every tenant, or one with --tenant.
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/output_format.h"
#include "common/proto_time.h"
#include "common/time_text.h"

namespace trainyard::client {

namespace {

namespace v1 = ::trainyard::v1;

// The time `flag` was given as `text` (checked when the arguments were
// parsed), read against `now`; nullopt when it was not given.
absl::StatusOr<std::optional<google::protobuf::Timestamp>> When(
    const std::string& text, const char* flag, absl::Time now) {
  if (text.empty()) return std::nullopt;
  absl::StatusOr<absl::Time> t = ParseTimeOrAge(text, now);
  if (!t.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", t.status().message()));
  }
  if (*t < absl::UnixEpoch()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": \"", text, "\" is before 1970"));
  }
  return ToProtoTime(*t);
}

}  // namespace

int RunUsageCommand(const CliArgs& args, JobClient& client, const Clock& clock,
                    std::ostream& out, std::ostream& err) {
  const absl::Time now = clock.Now();
  v1::GetUsageRequest request;
  auto since = When(args.since, "--since", now);
  if (!since.ok()) return ReportError(since.status(), err);
  if (*since) *request.mutable_start_time() = **since;
  auto until = When(args.until, "--until", now);
  if (!until.ok()) return ReportError(until.status(), err);
  if (*until) *request.mutable_end_time() = **until;
  request.set_tenant(args.tenant);
  request.set_by_job(args.by_job);
  absl::StatusOr<v1::UsageReport> report = client.GetUsage(request);
  if (!report.ok()) return ReportError(report.status(), err);
  if (args.output == OutputFormat::kJson) {
    if (absl::Status s = PrintJson(out, *report, true); !s.ok()) {
      return ReportError(s, err);
    }
  } else {
    out << FormatUsageReport(*report);
  }
  return kExitOk;
}

}  // namespace trainyard::client
