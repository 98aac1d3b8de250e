#include "server/server_metrics.h"

#include <prometheus/gauge.h>

#include <algorithm>
#include <utility>

#include "common/proto_time.h"
#include "server/attempt_usage.h"
#include "server/cluster_view.h"
#include "server/job_lifecycle.h"
#include "server/job_state.h"

namespace trainyard::server {
namespace {

namespace pm = prometheus;

// Seconds, from a sub-millisecond empty pass up to a pathological one.
const pm::Histogram::BucketBoundaries kPassBuckets = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1,    0.25,  0.5,    1.0,   2.5,  5.0,   10.0};

const std::vector<std::pair<v1::JobState, const char*>> kJobStates = {
    {v1::QUEUED, "queued"},       {v1::SCHEDULED, "scheduled"},
    {v1::RUNNING, "running"},     {v1::PREEMPTING, "preempting"},
    {v1::SUCCEEDED, "succeeded"}, {v1::FAILED, "failed"},
    {v1::CANCELLED, "cancelled"}, {v1::SUSPENDED, "suspended"}};

const std::vector<std::pair<v1::WorkerState, const char*>> kWorkerStates = {
    {v1::WORKER_READY, "ready"},
    {v1::WORKER_DRAINING, "draining"},
    {v1::WORKER_LOST, "lost"}};

// Every value RejectionReason returns, each series exported from the start.
const char* const kRejectionReasons[] = {
    "invalid_spec", "request_id_conflict", "quota",   "store",
    "unavailable",  "cancelled",           "internal"};

pm::MetricFamily GaugeFamily(std::string name, std::string help) {
  pm::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = pm::MetricType::Gauge;
  return f;
}

void AddGauge(pm::MetricFamily& f, double value,
              std::vector<pm::ClientMetric::Label> labels = {}) {
  pm::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  f.metric.push_back(std::move(m));
}

pm::MetricFamily CounterFamily(std::string name, std::string help) {
  pm::MetricFamily f = GaugeFamily(std::move(name), std::move(help));
  f.type = pm::MetricType::Counter;
  return f;
}

void AddCounter(pm::MetricFamily& f, double value,
                std::vector<pm::ClientMetric::Label> labels) {
  pm::ClientMetric m;
  m.label = std::move(labels);
  m.counter.value = value;
  f.metric.push_back(std::move(m));
}

pm::MetricFamily SingleGauge(std::string name, std::string help, double value) {
  pm::MetricFamily f = GaugeFamily(std::move(name), std::move(help));
  AddGauge(f, value);
  return f;
}

// Whether a queued job waits for room on a worker, rather than for
// something else first (job_state.h).
bool WaitsForAWorker(const v1::Job& job, absl::Time now) {
  return !AwaitsDependencies(job) && !AwaitsWarmStartSource(job) &&
         !InRestartBackoff(job, now);
}

}  // namespace

std::string RejectionReason(const absl::Status& status) {
  // A full disk is RESOURCE_EXHAUSTED too, but no quota.
  if (IsStoreWriteFailure(status)) return "store";
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      return "invalid_spec";
    case absl::StatusCode::kAlreadyExists:
      return "request_id_conflict";
    case absl::StatusCode::kResourceExhausted:
      return "quota";
    case absl::StatusCode::kUnavailable:
      return "unavailable";
    case absl::StatusCode::kCancelled:
      return "cancelled";  // the client gave up first
    default:
      return "internal";
  }
}

ServerMetrics::ServerMetrics(Clock* clock, std::string version)
    : clock_(clock),
      version_(std::move(version)),
      registry_(std::make_shared<pm::Registry>()) {
  submissions_ = &pm::BuildCounter()
                      .Name("yard_job_submissions_total")
                      .Help(
                          "Jobs accepted by SubmitJob (count; an idempotent "
                          "retry is not counted again).")
                      .Register(*registry_)
                      .Add({});
  rejections_ = &pm::BuildCounter()
                     .Name("yard_job_rejections_total")
                     .Help("SubmitJob requests refused, by reason (count).")
                     .Register(*registry_);
  for (const char* reason : kRejectionReasons) {
    rejections_->Add({{"reason", reason}});
  }
  restarts_ = &pm::BuildCounter()
                   .Name("yard_job_restarts_total")
                   .Help(
                       "Jobs handed back to the queue from SCHEDULED or "
                       "RUNNING, e.g. after their worker was lost or a "
                       "failed attempt with restarts left (count).")
                   .Register(*registry_)
                   .Add({});
  preemptions_ = &pm::BuildCounter()
                      .Name("yard_preemptions_total")
                      .Help(
                          "Running jobs asked to stop to make room for "
                          "others, for a drain or for a suspend (count).")
                      .Register(*registry_)
                      .Add({});
  suspensions_ = &pm::BuildCounter()
                      .Name("yard_job_suspensions_total")
                      .Help(
                          "Jobs parked by SuspendJob (SUSPENDED), once a "
                          "running one has stopped (count).")
                      .Register(*registry_)
                      .Add({});
  finished_ = &pm::BuildCounter()
                   .Name("yard_jobs_finished_total")
                   .Help(
                       "Jobs that reached a terminal state, by that state "
                       "(count).")
                   .Register(*registry_);
  for (const char* s : {"succeeded", "failed", "cancelled"}) {
    finished_->Add({{"state", s}});
  }
  pass_seconds_ = &pm::BuildHistogram()
                       .Name("yard_scheduling_pass_duration_seconds")
                       .Help(
                           "Wall time of one scheduling pass: lease "
                           "expiry, snapshot, policy, dispatch (seconds).")
                       .Register(*registry_)
                       .Add({}, kPassBuckets);
  deleted_ = &pm::BuildCounter()
                  .Name("yard_jobs_deleted_total")
                  .Help(
                      "Ended jobs deleted, by DeleteJob (by=\"request\") or "
                      "by the server's --job-retention (by=\"retention\") "
                      "(count).")
                  .Register(*registry_);
  for (const char* by : {"request", "retention"}) deleted_->Add({{"by", by}});
  deleted_bytes_ = &pm::BuildCounter()
                        .Name("yard_checkpoint_deleted_bytes_total")
                        .Help(
                            "Checkpoint files removed with deleted jobs "
                            "(bytes).")
                        .Register(*registry_)
                        .Add({});
  time_limit_stops_ = &pm::BuildCounter()
                           .Name("yard_job_time_limit_stops_total")
                           .Help(
                               "Jobs cancelled for reaching their spec's "
                               "time_limit_s (count).")
                           .Register(*registry_)
                           .Add({});
  halving_stops_ = &pm::BuildCounter()
                        .Name("yard_job_halving_stops_total")
                        .Help(
                            "Jobs stopped early at a rung of their spec's "
                            "halving group (count).")
                        .Register(*registry_)
                        .Add({});
  store_write_failures_ =
      &pm::BuildCounter()
           .Name("yard_store_write_failures_total")
           .Help(
               "Batches of writes the job store could not commit (disk "
               "full, I/O error); their requests failed and nothing of "
               "them was written (count).")
           .Register(*registry_)
           .Add({});
  scrape_errors_ = &pm::BuildCounter()
                        .Name("yard_metrics_scrape_errors_total")
                        .Help(
                            "Scrapes whose store-derived gauges could not "
                            "be read and were left out (count).")
                        .Register(*registry_)
                        .Add({});
}

void ServerMetrics::OnStoreWriteFailure() {
  store_write_failures_->Increment();
}

void ServerMetrics::Watch(const JobStore* store,
                          const WorkerRegistry* workers) {
  store_ = store;
  workers_ = workers;
  watching_.store(true, std::memory_order_release);
}

void ServerMetrics::OnStateChange(const v1::StateChange& change) {
  const v1::JobState from = change.from();
  const v1::JobState to = change.to();
  if (from == v1::JOB_STATE_UNSPECIFIED && to == v1::QUEUED) {
    submissions_->Increment();
  } else if (to == v1::QUEUED &&
             (from == v1::SCHEDULED || from == v1::RUNNING)) {
    restarts_->Increment();
  } else if (to == v1::PREEMPTING) {
    preemptions_->Increment();
  } else if (to == v1::SUSPENDED) {
    suspensions_->Increment();
  }
  for (const auto& [state, name] : kJobStates) {
    if (state == to &&
        (to == v1::SUCCEEDED || to == v1::FAILED || to == v1::CANCELLED)) {
      finished_->Add({{"state", name}}).Increment();
    }
  }
}

void ServerMetrics::OnSubmitRejected(const absl::Status& status) {
  if (status.ok()) return;
  rejections_->Add({{"reason", RejectionReason(status)}}).Increment();
}

void ServerMetrics::OnJobDeleted(DeletedBy by, int64_t checkpoint_bytes) {
  deleted_->Add({{"by", by == DeletedBy::kRequest ? "request" : "retention"}})
      .Increment();
  deleted_bytes_->Increment(static_cast<double>(checkpoint_bytes));
}

void ServerMetrics::OnTimeLimitStop() { time_limit_stops_->Increment(); }

void ServerMetrics::OnHalvingStop() { halving_stops_->Increment(); }

void ServerMetrics::ObserveSchedulingPass(absl::Duration duration) {
  pass_seconds_->Observe(absl::ToDoubleSeconds(duration));
}

std::vector<pm::MetricFamily> ServerMetrics::Collect() const {
  std::vector<pm::MetricFamily> out;
  pm::MetricFamily info = GaugeFamily(
      "yard_build_info", "The yard-server version; the value is always 1.");
  AddGauge(info, 1, {{"version", version_}});
  out.push_back(std::move(info));
  if (watching_.load(std::memory_order_acquire) && store_ != nullptr &&
      workers_ != nullptr) {
    CollectJobs(out);
    CollectCapacity(out);
  }
  for (pm::MetricFamily& f : registry_->Collect()) out.push_back(std::move(f));
  return out;
}

void ServerMetrics::CollectJobs(std::vector<pm::MetricFamily>& out) const {
  absl::StatusOr<std::map<v1::JobState, int64_t>> counts =
      store_->CountJobsByState();
  absl::StatusOr<std::vector<JobRecord>> queued =
      store_->JobsInStates({v1::QUEUED});
  if (!counts.ok() || !queued.ok()) {
    scrape_errors_->Increment();
    return;
  }
  pm::MetricFamily jobs =
      GaugeFamily("yard_jobs", "Jobs in the store, by state (count).");
  for (const auto& [state, name] : kJobStates) {
    auto it = counts->find(state);
    AddGauge(jobs, it == counts->end() ? 0 : static_cast<double>(it->second),
             {{"state", name}});
  }
  out.push_back(std::move(jobs));
  const absl::Time now = clock_->Now();
  double waiting = 0, waiting_for_gpus = 0, oldest = 0;
  for (const JobRecord& r : *queued) {
    if (!WaitsForAWorker(r.job, now)) continue;
    ++waiting;
    if (r.job.spec().resources().gpus() > 0) ++waiting_for_gpus;
    oldest = std::max(oldest, absl::ToDoubleSeconds(now - QueuedSince(r.job)));
  }
  out.push_back(SingleGauge(
      "yard_queue_length",
      "Queued jobs waiting for a worker, not for a dependency, a warm "
      "start's source or a restart backoff (count).",
      waiting));
  out.push_back(
      SingleGauge("yard_queue_gpu_jobs",
                  "Of yard_queue_length, the jobs asking for GPUs (count).",
                  waiting_for_gpus));
  out.push_back(SingleGauge(
      "yard_queue_oldest_age_seconds",
      "How long the longest-waiting job of yard_queue_length has waited "
      "since it last joined the queue; 0 when there is none (seconds).",
      oldest));
}

void ServerMetrics::CollectCapacity(std::vector<pm::MetricFamily>& out) const {
  // The ended attempts first: one that ends before `active` is read is then
  // in neither, never in both (see reported_usage_).
  absl::StatusOr<std::map<std::string, JobStore::UsageTotal>> ended =
      store_->EndedUsageByTenant(clock_->Now());
  absl::StatusOr<std::vector<JobRecord>> active =
      store_->JobsInStates({v1::SCHEDULED, v1::RUNNING, v1::PREEMPTING});
  if (!ended.ok() || !active.ok()) {
    scrape_errors_->Increment();
    return;
  }
  const std::map<std::string, WorkerUsage> usage = UsageByWorker(*active);
  std::map<v1::WorkerState, int> by_state;
  double gpus = 0, gpus_used = 0, gpus_free = 0, mem = 0, mem_used = 0, cpu = 0,
         cpu_used = 0;
  double compute_used = 0;  // in GPUs: a shared GPU counts its grants' sum
  for (const WorkerStatus& w : workers_->List()) {
    ++by_state[w.state];
    if (w.state == v1::WORKER_LOST) continue;  // its capacity is gone
    auto it = usage.find(w.id);
    const WorkerUsage* used = it == usage.end() ? nullptr : &it->second;
    cpu += w.hello.cpu_slots();
    if (used != nullptr) cpu_used += used->cpu_slots;
    for (const v1::Device& d : w.hello.devices()) {
      gpus += 1;
      mem += static_cast<double>(d.memory_bytes());
      if (used != nullptr && used->gpus.contains(d.index())) {
        gpus_used += 1;
        mem_used += static_cast<double>(d.memory_bytes());
        auto use = used->gpu_use.find(d.index());
        compute_used +=
            use == used->gpu_use.end() || use->second.whole
                ? 1.0
                : std::min(use->second.compute_milli,
                           scheduler::kWholeGpuMilli) /
                      static_cast<double>(scheduler::kWholeGpuMilli);
      } else if (w.schedulable) {
        gpus_free += 1;
      }
    }
  }
  pm::MetricFamily workers =
      GaugeFamily("yard_workers",
                  "Workers known to the server, by state "
                  "(count).");
  for (const auto& [state, name] : kWorkerStates) {
    AddGauge(workers, by_state[state], {{"state", name}});
  }
  out.push_back(std::move(workers));
  out.push_back(
      SingleGauge("yard_gpus", "GPUs on workers not lost (count).", gpus));
  out.push_back(SingleGauge("yard_gpus_allocated",
                            "GPUs held by scheduled or running jobs (count).",
                            gpus_used));
  out.push_back(SingleGauge(
      "yard_gpus_free",
      "GPUs no job holds on workers taking jobs (connected, not draining) "
      "(count).",
      gpus_free));
  out.push_back(SingleGauge("yard_gpu_memory_total_bytes",
                            "Memory of the GPUs on workers not lost (bytes).",
                            mem));
  out.push_back(SingleGauge(
      "yard_gpu_memory_allocated_bytes",
      "GPU memory held by scheduled or running jobs (bytes).", mem_used));
  out.push_back(SingleGauge(
      "yard_gpu_compute_allocated_ratio",
      "Allocated GPU compute over total GPU compute, 0 without GPUs (ratio).",
      gpus > 0 ? compute_used / gpus : 0));
  out.push_back(SingleGauge("yard_cpu_slots",
                            "CPU job slots on workers not lost (count).", cpu));
  out.push_back(SingleGauge("yard_cpu_slots_allocated",
                            "CPU job slots held by jobs (count).", cpu_used));
  CollectTenantHoldings(*ended, *active, out);
}

void ServerMetrics::CollectTenantHoldings(
    const std::map<std::string, JobStore::UsageTotal>& ended,
    const std::vector<JobRecord>& active,
    std::vector<pm::MetricFamily>& out) const {
  // What each tenant's current attempts hold, as usage accounting charges
  // it (server/attempt_usage.h); a tenant without any has no series.
  std::map<std::string, Holding> by_tenant;
  for (const JobRecord& r : active) {
    if (r.job.attempts().empty()) continue;
    const Holding h = AttemptHolding(r.job, *r.job.attempts().rbegin());
    Holding& sum = by_tenant[r.job.tenant()];
    sum.gpu_milli += h.gpu_milli;
    sum.cpu_slots += h.cpu_slots;
  }
  pm::MetricFamily gpus = GaugeFamily(
      "yard_tenant_gpus_allocated",
      "GPUs held by the tenant's scheduled or running jobs, a shared GPU "
      "counting its share (GPUs).");
  pm::MetricFamily slots =
      GaugeFamily("yard_tenant_cpu_slots_allocated",
                  "CPU job slots held by the tenant's jobs (count).");
  for (const auto& [tenant, h] : by_tenant) {
    AddGauge(gpus, static_cast<double>(h.gpu_milli) / 1000.0,
             {{"tenant", tenant}});
    AddGauge(slots, h.cpu_slots, {{"tenant", tenant}});
  }
  out.push_back(std::move(gpus));
  out.push_back(std::move(slots));

  // Usage accounting's figures (yard usage) as counters: their increase
  // over a range is the GPU- and CPU-slot-seconds held in it.
  std::map<std::string, JobStore::UsageTotal> totals = ended;
  for (const JobRecord& r : active) {
    if (r.job.attempts().empty()) continue;
    const v1::Attempt& a = *r.job.attempts().rbegin();
    if (a.has_end_time()) continue;  // in `ended` once its row is written
    // Up to now, or, on workers not heard since (the server was down),
    // only as far as it will be charged when it ends: a counter must not
    // count what it would then have to take back.
    const AttemptUsage u = UsageOf(r.job, a, HeldUntil(*workers_, r));
    const double seconds = absl::ToDoubleSeconds(u.end - u.start);
    JobStore::UsageTotal& t = totals[r.job.tenant()];
    t.gpu_seconds += GpuSeconds(u.held, seconds);
    t.cpu_slot_seconds += CpuSlotSeconds(u.held, seconds);
  }
  pm::MetricFamily gpu_seconds = CounterFamily(
      "yard_tenant_gpu_seconds_total",
      "GPU time the tenant's job attempts have held, a shared GPU counting "
      "its share, as yard usage charges it; deleted jobs' included "
      "(GPU-seconds).");
  pm::MetricFamily slot_seconds =
      CounterFamily("yard_tenant_cpu_slot_seconds_total",
                    "CPU job slot time the tenant's job attempts have held "
                    "(slot-seconds).");
  absl::MutexLock lock(&usage_mu_);
  for (auto& [tenant, t] : totals) {
    JobStore::UsageTotal& last = reported_usage_[tenant];
    last.gpu_seconds = std::max(last.gpu_seconds, t.gpu_seconds);
    last.cpu_slot_seconds = std::max(last.cpu_slot_seconds, t.cpu_slot_seconds);
  }
  for (const auto& [tenant, t] : reported_usage_) {
    AddCounter(gpu_seconds, t.gpu_seconds, {{"tenant", tenant}});
    AddCounter(slot_seconds, t.cpu_slot_seconds, {{"tenant", tenant}});
  }
  out.push_back(std::move(gpu_seconds));
  out.push_back(std::move(slot_seconds));
}

}  // namespace trainyard::server
