// `yard token ...` and `yard tenant ...`: the AdminService from the command
// line. Table output is for people; -o json prints the response messages.
#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/admin_client.h"
#include "client/commands.h"
#include "client/output_format.h"
#include "common/proto_time.h"

namespace trainyard::client {
namespace {

namespace v1 = ::trainyard::v1;

std::string RoleName(v1::TokenRole role) {
  return absl::AsciiStrToLower(v1::TokenRole_Name(role));
}

std::string Limit(int32_t n) { return n > 0 ? absl::StrCat(n) : "-"; }

// A tenant's priority cap, "-" for none.
std::string MaxPriority(const v1::Tenant& t) {
  return t.has_max_priority() ? absl::StrCat(t.max_priority()) : "-";
}

int TokenCreate(const CliArgs& args, AdminClient& admin, std::ostream& out,
                std::ostream& err) {
  v1::CreateTokenRequest request;
  request.set_tenant(args.target);
  v1::TokenRole role;
  if (!v1::TokenRole_Parse(absl::AsciiStrToUpper(args.role), &role) ||
      role == v1::TOKEN_ROLE_UNSPECIFIED) {
    ReportError(absl::InvalidArgumentError(absl::StrCat(
                    "--role: must be tenant, admin or worker, got \"",
                    args.role, "\"")),
                err);
    return kExitUsage;
  }
  request.set_role(role);
  request.set_description(args.description);
  absl::StatusOr<v1::CreateTokenResponse> r = admin.CreateToken(request);
  if (!r.ok()) return ReportError(r.status(), err);
  if (args.output == OutputFormat::kJson) {
    if (absl::Status s = PrintJson(out, *r, true); !s.ok()) {
      return ReportError(s, err);
    }
    return kExitOk;
  }
  out << "token " << r->info().id() << " (" << RoleName(r->info().role())
      << ") for tenant " << r->info().tenant()
      << "; the secret is shown only now:\n"
      << r->token() << "\n";
  return kExitOk;
}

int TokenList(const CliArgs& args, AdminClient& admin, std::ostream& out,
              std::ostream& err) {
  v1::ListTokensRequest request;
  request.set_include_revoked(args.include_revoked);
  absl::StatusOr<v1::ListTokensResponse> r = admin.ListTokens(request);
  if (!r.ok()) return ReportError(r.status(), err);
  if (args.output == OutputFormat::kJson) {
    if (absl::Status s = PrintJson(out, *r, true); !s.ok()) {
      return ReportError(s, err);
    }
    return kExitOk;
  }
  const absl::Time now = absl::Now();
  std::vector<std::vector<std::string>> rows;
  for (const v1::TokenInfo& t : r->tokens()) {
    rows.push_back({t.id(), t.tenant(), RoleName(t.role()),
                    FormatAge(FromProtoTime(t.create_time()), now),
                    t.revoked() ? "revoked" : "active", t.description()});
  }
  out << FormatTable({"ID", "TENANT", "ROLE", "AGE", "STATUS", "DESCRIPTION"},
                     rows);
  return kExitOk;
}

int TokenRevoke(const CliArgs& args, AdminClient& admin, std::ostream& out,
                std::ostream& err) {
  absl::StatusOr<v1::TokenInfo> r = admin.RevokeToken(args.target);
  if (!r.ok()) return ReportError(r.status(), err);
  if (args.output == OutputFormat::kJson) {
    if (absl::Status s = PrintJson(out, *r, true); !s.ok()) {
      return ReportError(s, err);
    }
  } else {
    out << "token " << r->id() << " of tenant " << r->tenant()
        << " revoked\n";
  }
  return kExitOk;
}

// Starts from the tenant's current settings so that unset flags keep them.
int TenantSet(const CliArgs& args, AdminClient& admin, std::ostream& out,
              std::ostream& err) {
  absl::StatusOr<v1::ListTenantsResponse> all = admin.ListTenants();
  if (!all.ok()) return ReportError(all.status(), err);
  v1::Tenant t;
  t.set_name(args.target);
  for (const v1::Tenant& have : all->tenants()) {
    if (have.name() == args.target) t = have;
  }
  if (args.max_gpus >= 0) t.set_max_gpus(args.max_gpus);
  if (args.max_queued_jobs >= 0) t.set_max_queued_jobs(args.max_queued_jobs);
  if (args.max_cpu_slots >= 0) t.set_max_cpu_slots(args.max_cpu_slots);
  if (args.weight > 0) t.set_weight(args.weight);
  if (args.max_priority == kNoPriorityCap) {
    t.clear_max_priority();
  } else if (args.max_priority.has_value()) {
    t.set_max_priority(*args.max_priority);
  }
  absl::StatusOr<v1::Tenant> r = admin.SetTenant(t);
  if (!r.ok()) return ReportError(r.status(), err);
  if (args.output == OutputFormat::kJson) {
    if (absl::Status s = PrintJson(out, *r, true); !s.ok()) {
      return ReportError(s, err);
    }
  } else {
    out << "tenant " << r->name() << ": weight " << r->weight() << ", max GPUs "
        << Limit(r->max_gpus()) << ", max queued jobs "
        << Limit(r->max_queued_jobs()) << ", max CPU slots "
        << Limit(r->max_cpu_slots()) << ", max priority " << MaxPriority(*r)
        << "\n";
  }
  return kExitOk;
}

int TenantList(const CliArgs& args, AdminClient& admin, std::ostream& out,
               std::ostream& err) {
  absl::StatusOr<v1::ListTenantsResponse> r = admin.ListTenants();
  if (!r.ok()) return ReportError(r.status(), err);
  if (args.output == OutputFormat::kJson) {
    if (absl::Status s = PrintJson(out, *r, true); !s.ok()) {
      return ReportError(s, err);
    }
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const v1::Tenant& t : r->tenants()) {
    rows.push_back({t.name(), absl::StrFormat("%g", t.weight()),
                    Limit(t.max_gpus()), Limit(t.max_queued_jobs()),
                    Limit(t.max_cpu_slots()), MaxPriority(t)});
  }
  out << FormatTable({"TENANT", "WEIGHT", "MAX_GPUS", "MAX_QUEUED",
                      "MAX_CPU_SLOTS", "MAX_PRIORITY"},
                     rows);
  return kExitOk;
}

}  // namespace

int RunAdminCommand(const CliArgs& args, JobClient& client, std::ostream& out,
                    std::ostream& err) {
  AdminClient admin(client);
  const bool list = args.subcommand == "ls" || args.subcommand == "list";
  if (args.command == Command::kToken) {
    if (args.subcommand == "create") return TokenCreate(args, admin, out, err);
    if (args.subcommand == "revoke") return TokenRevoke(args, admin, out, err);
    if (list) return TokenList(args, admin, out, err);
  } else if (args.command == Command::kTenant) {
    if (args.subcommand == "set") return TenantSet(args, admin, out, err);
    if (list) return TenantList(args, admin, out, err);
  }
  return ReportError(absl::InternalError("admin command not handled"), err);
}

}  // namespace trainyard::client
