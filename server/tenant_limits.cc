#include "server/tenant_limits.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/field_errors.h"
#include "common/status_macros.h"
#include "server/tenant_quota.h"

namespace trainyard::server {
namespace {

absl::Status PriorityFits(const v1::Tenant& t, int32_t priority,
                          const std::string& field) {
  if (t.has_max_priority() && priority > t.max_priority()) {
    return InvalidFieldError(
        field, absl::StrCat("at most ", t.max_priority(), " for tenant ",
                            t.name(), " (its max_priority), got ", priority));
  }
  return absl::OkStatus();
}

absl::Status CheckJobFits(const v1::Tenant& t, const v1::JobSpec& spec) {
  RETURN_IF_ERROR(PriorityFits(t, spec.priority(), "spec.priority"));
  // Past the quota for good: the spec must change (or the quota), so it is
  // the spec's field that is wrong, not a limit reached for now.
  const std::string never = NeverFitsQuota(t, spec);
  if (!never.empty()) {
    return InvalidFieldError(spec.resources().gpus() > 0
                                 ? "spec.resources.gpus"
                                 : "spec.resources.cpu_ranks",
                             never);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Mutex* TenantGate::TenantSubmitMutex(const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<absl::Mutex>& m = submit_mu_[tenant];
  if (m == nullptr) m = std::make_unique<absl::Mutex>();
  return m.get();
}

absl::StatusOr<SubmitResult> TenantGate::Submit(
    const std::string& tenant, const v1::SubmitJobRequest& request,
    const std::function<absl::StatusOr<SubmitResult>()>& submit) {
  const v1::Tenant limits = auth_->GetTenant(tenant);
  bool submitted = false;
  const std::function<absl::StatusOr<SubmitResult>()> counted = [&] {
    submitted = true;
    return submit();
  };
  absl::Status fits = CheckJobFits(limits, request.spec());
  absl::StatusOr<SubmitResult> result =
      fits.ok() ? WithQueueRoom(limits, counted) : std::move(fits);
  if (result.ok() || submitted || request.request_id().empty()) return result;
  // Refused by a limit: a retried submission still gets the job its first
  // try made (or the request id's conflict), whatever the limits say now,
  // for they are for new jobs. Looked up only then: a submission within
  // its limits pays nothing for it.
  ASSIGN_OR_RETURN(std::optional<JobRecord> earlier,
                   store_->FindJobByRequest(tenant, request.request_id()));
  return earlier.has_value() ? submit() : result;
}

absl::Status TenantGate::CheckPriority(const std::string& tenant,
                                       int32_t priority,
                                       const std::string& field) const {
  return PriorityFits(auth_->GetTenant(tenant), priority, field);
}

absl::StatusOr<v1::Job> TenantGate::Resume(
    const std::string& tenant,
    const std::function<absl::StatusOr<v1::Job>()>& resume) {
  return WithQueueRoom(auth_->GetTenant(tenant), resume);
}

template <typename T>
absl::StatusOr<T> TenantGate::WithQueueRoom(
    const v1::Tenant& limits,
    const std::function<absl::StatusOr<T>()>& enqueue) {
  if (limits.max_queued_jobs() <= 0) return enqueue();
  absl::MutexLock serialize(TenantSubmitMutex(limits.name()));
  ASSIGN_OR_RETURN(int64_t queued,
                   store_->CountJobs(limits.name(), v1::QUEUED));
  if (queued >= limits.max_queued_jobs()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("tenant ", limits.name(), " has ", queued,
                     " jobs queued, its limit is ", limits.max_queued_jobs(),
                     "; wait for some to start or cancel some"));
  }
  return enqueue();
}

absl::StatusOr<TenantGate::StreamSlot> TenantGate::OpenStream(
    const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  int& open = streams_[tenant];
  if (max_streams_ > 0 && open >= max_streams_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("tenant ", tenant, " already has ", open,
                     " streams open (watches, logs, checkpoint downloads), "
                     "the limit per tenant is ",
                     max_streams_));
  }
  ++open;
  return StreamSlot(this, tenant);
}

int TenantGate::open_streams(const std::string& tenant) const {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(tenant);
  return it == streams_.end() ? 0 : it->second;
}

TenantGate::StreamSlot::~StreamSlot() {
  if (gate_ == nullptr) return;
  absl::MutexLock lock(&gate_->mu_);
  if (--gate_->streams_[tenant_] == 0) gate_->streams_.erase(tenant_);
}

}  // namespace trainyard::server
