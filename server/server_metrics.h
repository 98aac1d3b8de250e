// ServerMetrics: yard-server's Prometheus metrics (DESIGN.md §8). Two kinds:
//  - counters and the scheduling-pass histogram, fed by hooks: every state
//    change the JobStore commits (submissions, restarts, preemptions, jobs
//    finished), every refused SubmitJob, every scheduling pass;
//  - gauges computed at scrape time from the JobStore and WorkerRegistry
//    (jobs by state, queue, allocated vs total capacity, workers by state),
//    so they can never drift from the state they describe.
// No series carries a job id. Counters restart from zero with the process,
// as Prometheus expects.
//
// Thread-safe: hooks come from RPC and scheduler threads, Collect from the
// scrape threads. Until the sources are set (Watch), a scrape has only the
// hook-fed families: the endpoint may serve before the store is open.
#ifndef TRAINYARD_SERVER_SERVER_METRICS_H_
#define TRAINYARD_SERVER_SERVER_METRICS_H_

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/job_store.h"
#include "server/worker_registry.h"
#include "trainyard/v1/jobs.pb.h"

namespace trainyard::server {

// The bounded `reason` label of yard_job_rejections_total for a refused
// SubmitJob: invalid_spec, request_id_conflict, quota, store (the store
// could not write it), unavailable, cancelled (the client gave up before
// it was stored), internal.
std::string RejectionReason(const absl::Status& status);

class ServerMetrics : public prometheus::Collectable {
 public:
  ServerMetrics(Clock* clock, std::string version);

  // The sources of the scrape-time gauges. Call once; scrapes may run.
  void Watch(const JobStore* store, const WorkerRegistry* workers);

  // --- Hooks ---
  // A state change committed to the store.
  void OnStateChange(const v1::StateChange& change);
  // SubmitJob refused the request with `status`.
  void OnSubmitRejected(const absl::Status& status);
  // One scheduling pass took `duration`.
  void ObserveSchedulingPass(absl::Duration duration);
  // A job was deleted, and `checkpoint_bytes` with its checkpoints.
  enum class DeletedBy { kRequest, kRetention };
  void OnJobDeleted(DeletedBy by, int64_t checkpoint_bytes);
  // The scheduler cancelled a job that reached its time limit.
  void OnTimeLimitStop();
  // spec.halving stopped a job at a rung.
  void OnHalvingStop();
  // The job store could not commit a batch of writes.
  void OnStoreWriteFailure();

  // prometheus::Collectable: every family, hooks' and scrape-time ones.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  void CollectJobs(std::vector<prometheus::MetricFamily>& out) const;
  void CollectCapacity(std::vector<prometheus::MetricFamily>& out) const;
  // yard_tenant_*_allocated from the jobs holding resources, and the
  // yard_tenant_*_seconds_total counters: `ended` (read before `active`)
  // plus what the current attempts have held so far.
  void CollectTenantHoldings(
      const std::map<std::string, JobStore::UsageTotal>& ended,
      const std::vector<JobRecord>& active,
      std::vector<prometheus::MetricFamily>& out) const;

  Clock* const clock_;
  const std::string version_;
  // Written once by Watch, then read only after `watching_` reads true.
  const JobStore* store_ = nullptr;
  const WorkerRegistry* workers_ = nullptr;
  std::atomic<bool> watching_{false};

  // prometheus-cpp's metrics are thread-safe; the registry owns them.
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter* submissions_;
  prometheus::Family<prometheus::Counter>* rejections_;
  prometheus::Counter* restarts_;
  prometheus::Counter* preemptions_;
  prometheus::Counter* suspensions_;
  prometheus::Family<prometheus::Counter>* finished_;
  prometheus::Histogram* pass_seconds_;
  prometheus::Counter* scrape_errors_;
  prometheus::Counter* store_write_failures_;
  prometheus::Family<prometheus::Counter>* deleted_;
  prometheus::Counter* deleted_bytes_;
  prometheus::Counter* time_limit_stops_;
  prometheus::Counter* halving_stops_;

  // The usage counters' last values by tenant. An attempt that ends
  // between the two reads of a scrape is in neither, and would make its
  // tenant's counter dip for that scrape; the last value is reported
  // instead, so a counter never goes down.
  mutable absl::Mutex usage_mu_;
  mutable std::map<std::string, JobStore::UsageTotal> reported_usage_
      ABSL_GUARDED_BY(usage_mu_);
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_SERVER_METRICS_H_
