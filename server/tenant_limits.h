// TenantGate: the per-tenant limits checked where a request comes in, before
// any work is done for it:
//   - max_queued_jobs: a submit (or a resume) that would put more of the
//     tenant's jobs in the queue is RESOURCE_EXHAUSTED. For a tenant with this
//     limit, submits are serialized (count, then commit) so concurrent submits
//     cannot overshoot it; tenants without it keep full group-commit
//     throughput.
//   - max_gpus, max_cpu_slots: a job asking for more GPUs or CPU slots than
//     the tenant may ever hold is refused at once (it could never run); the
//     running totals are enforced by the scheduler loop (tenant_quota.h).
//   - open WatchJob/GetJobLogs streams per tenant (--max-streams-per-tenant):
//     each stream holds a server thread, so one tenant cannot take them all.
// Thread-safe.
#ifndef TRAINYARD_SERVER_TENANT_LIMITS_H_
#define TRAINYARD_SERVER_TENANT_LIMITS_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/auth_store.h"
#include "server/job_lifecycle.h"
#include "server/job_store.h"

namespace trainyard::server {

class TenantGate {
 public:
  TenantGate(const AuthStore* auth, const JobStore* store,
             int max_streams_per_tenant)
      : auth_(auth), store_(store), max_streams_(max_streams_per_tenant) {}

  // Calls `submit` when `tenant` may queue the job `request` asks for.
  absl::StatusOr<SubmitResult> Submit(
      const std::string& tenant, const v1::SubmitJobRequest& request,
      const std::function<absl::StatusOr<SubmitResult>()>& submit);

  // Calls `resume` (SUSPENDED -> QUEUED) when the tenant's queue has room
  // under max_queued_jobs, as for a submit.
  absl::StatusOr<v1::Job> Resume(
      const std::string& tenant,
      const std::function<absl::StatusOr<v1::Job>()>& resume);

  // OK when a job of `tenant` may have `priority` (at most the tenant's
  // max_priority), else INVALID_ARGUMENT on `field`.
  absl::Status CheckPriority(const std::string& tenant, int32_t priority,
                             const std::string& field) const;

  // Holds one of the tenant's stream slots until destroyed.
  class StreamSlot {
   public:
    StreamSlot(StreamSlot&& other) noexcept
        : gate_(std::exchange(other.gate_, nullptr)),
          tenant_(std::move(other.tenant_)) {}
    StreamSlot& operator=(StreamSlot&&) = delete;
    ~StreamSlot();

   private:
    friend class TenantGate;
    StreamSlot(TenantGate* gate, std::string tenant)
        : gate_(gate), tenant_(std::move(tenant)) {}
    TenantGate* gate_;
    std::string tenant_;
  };
  // RESOURCE_EXHAUSTED when the tenant already has the maximum open. It
  // does not wait for one to close: the streams run on gRPC's callback
  // API, whose handlers must not block, and a stream its client cancelled
  // frees its slot as soon as the server sees the cancel.
  absl::StatusOr<StreamSlot> OpenStream(const std::string& tenant);
  int open_streams(const std::string& tenant) const;

 private:
  absl::Mutex* TenantSubmitMutex(const std::string& tenant);
  // Calls `enqueue` unless the tenant `limits` is for already has
  // max_queued_jobs queued (RESOURCE_EXHAUSTED); serialized per tenant
  // with such a limit, so that concurrent calls cannot overshoot it.
  template <typename T>
  absl::StatusOr<T> WithQueueRoom(
      const v1::Tenant& limits,
      const std::function<absl::StatusOr<T>()>& enqueue);

  const AuthStore* const auth_;
  const JobStore* const store_;
  const int max_streams_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> streams_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::unique_ptr<absl::Mutex>> submit_mu_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_TENANT_LIMITS_H_
