// ServerMetrics over the real server logic (store, registry, lifecycle,
// scheduler pass) with a FakeClock: the gauges follow job and worker
// transitions, the counters count what the hooks saw, and the exposition
// passes `promtool check metrics` when promtool is installed.
#include "server/server_metrics.h"

#include <prometheus/text_serializer.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "server/server_test_fixture.h"

namespace trainyard::server {
namespace {

namespace pm = prometheus;

class ServerMetricsTest : public ServerLogicTest {
 protected:
  ServerMetricsTest() {
    on_state_change_ = [this](const v1::StateChange& c) {
      metrics_.OnStateChange(c);
    };
    metrics_.Watch(store_.get(), registry_.get());
  }

  // The sample of `name` whose labels include every one of `labels`;
  // NaN when there is none. Histograms answer with their sample count.
  double Value(const std::string& name,
               const std::map<std::string, std::string>& labels = {}) {
    for (const pm::MetricFamily& f : metrics_.Collect()) {
      if (f.name != name) continue;
      for (const pm::ClientMetric& m : f.metric) {
        size_t matched = 0;
        for (const auto& l : m.label) {
          auto it = labels.find(l.name);
          if (it != labels.end() && it->second == l.value) ++matched;
        }
        if (matched != labels.size()) continue;
        switch (f.type) {
          case pm::MetricType::Counter:
            return m.counter.value;
          case pm::MetricType::Histogram:
            return static_cast<double>(m.histogram.sample_count);
          default:
            return m.gauge.value;
        }
      }
    }
    return std::nan("");
  }
  double Jobs(const std::string& state) {
    return Value("yard_jobs", {{"state", state}});
  }

  ServerMetrics metrics_{&clock_, "9.9.9"};
};

TEST_F(ServerMetricsTest, JobGaugesFollowTransitions) {
  EXPECT_EQ(Jobs("queued"), 0);
  EXPECT_EQ(Value("yard_queue_length"), 0);
  EXPECT_EQ(Value("yard_queue_oldest_age_seconds"), 0);
  const std::string a = Submit();
  Submit();
  EXPECT_EQ(Jobs("queued"), 2);
  EXPECT_EQ(Value("yard_queue_length"), 2);
  EXPECT_EQ(Value("yard_job_submissions_total"), 2);
  clock_.Advance(absl::Seconds(30));
  EXPECT_EQ(Value("yard_queue_oldest_age_seconds"), 30);

  FakeWorker& w = Connect("w1", /*slots=*/1);
  Pass();
  EXPECT_EQ(Jobs("queued"), 1);
  EXPECT_EQ(Jobs("scheduled"), 1);
  EXPECT_EQ(Value("yard_cpu_slots"), 1);
  EXPECT_EQ(Value("yard_cpu_slots_allocated"), 1);
  ASSERT_TRUE(w.Started(a, 1).ok());
  EXPECT_EQ(Jobs("scheduled"), 0);
  EXPECT_EQ(Jobs("running"), 1);
  ASSERT_TRUE(w.Exited(a, 1, 0).ok());
  EXPECT_EQ(Jobs("running"), 0);
  EXPECT_EQ(Jobs("succeeded"), 1);
  EXPECT_EQ(Value("yard_jobs_finished_total", {{"state", "succeeded"}}), 1);
  EXPECT_EQ(Value("yard_jobs_finished_total", {{"state", "failed"}}), 0);
  EXPECT_EQ(Value("yard_cpu_slots_allocated"), 0);
  EXPECT_EQ(Value("yard_job_restarts_total"), 0);
}

// The queue gauges count the jobs waiting for a worker: not one waiting for
// a dependency to succeed (yard_jobs{state="queued"} still counts it).
TEST_F(ServerMetricsTest, TheQueueIsTheJobsWaitingForAWorker) {
  const std::string first = Submit();
  v1::SubmitJobRequest after;
  *after.mutable_spec() = Spec(0, /*gpus=*/1);
  after.mutable_spec()->add_depends_on(first);
  ASSERT_TRUE(lifecycle_->Submit(after).ok());
  clock_.Advance(absl::Seconds(30));
  EXPECT_EQ(Jobs("queued"), 2);
  EXPECT_EQ(Value("yard_queue_length"), 1);
  EXPECT_EQ(Value("yard_queue_gpu_jobs"), 0);
  Submit(0, /*gpus=*/2);
  EXPECT_EQ(Value("yard_queue_length"), 2);
  EXPECT_EQ(Value("yard_queue_gpu_jobs"), 1);
  EXPECT_EQ(Value("yard_queue_oldest_age_seconds"), 30);
}

// Free GPUs are those a job could be placed on: a drained worker's are not.
TEST_F(ServerMetricsTest, ADrainedWorkersGpusAreNotFree) {
  Connect("g1", /*slots=*/1, /*gpus=*/2);
  Connect("g2", /*slots=*/1, /*gpus=*/4);
  EXPECT_EQ(Value("yard_gpus"), 6);
  EXPECT_EQ(Value("yard_gpus_free"), 6);
  v1::WorkerDrain drain;
  drain.set_worker_id("g2");
  registry_->SetDrain("g2", drain);
  EXPECT_EQ(Value("yard_gpus"), 6);
  EXPECT_EQ(Value("yard_gpus_free"), 2);
  Submit(0, /*gpus=*/1);
  Pass();
  EXPECT_EQ(Value("yard_gpus_free"), 1);
}

// A full disk is no quota: rejections say which, and failed commits count.
TEST_F(ServerMetricsTest, AStoreThatCannotWriteIsNotAQuota) {
  EXPECT_EQ(RejectionReason(absl::ResourceExhaustedError("tenant a has 2")),
            "quota");
  const absl::Status full =
      AsStoreWriteFailure(absl::ResourceExhaustedError("store: disk full"));
  EXPECT_EQ(RejectionReason(full), "store");
  EXPECT_EQ(RejectionReason(absl::CancelledError("the client gave up")),
            "cancelled");
  metrics_.OnSubmitRejected(full);
  EXPECT_EQ(Value("yard_job_rejections_total", {{"reason", "store"}}), 1);
  EXPECT_EQ(Value("yard_job_rejections_total", {{"reason", "quota"}}), 0);
  EXPECT_EQ(Value("yard_store_write_failures_total"), 0);
  metrics_.OnStoreWriteFailure();
  EXPECT_EQ(Value("yard_store_write_failures_total"), 1);
}

TEST_F(ServerMetricsTest, LostWorkerCountsARestartAndItsCapacityGoes) {
  const std::string a = Submit();
  FakeWorker& w = Connect("w1", /*slots=*/2);
  Pass();
  ASSERT_TRUE(w.Started(a, 1).ok());
  EXPECT_EQ(Value("yard_workers", {{"state", "ready"}}), 1);
  EXPECT_EQ(Value("yard_workers", {{"state", "lost"}}), 0);
  clock_.Advance(kLease + absl::Seconds(1));
  Pass();
  EXPECT_EQ(Value("yard_workers", {{"state", "lost"}}), 1);
  EXPECT_EQ(Value("yard_workers", {{"state", "ready"}}), 0);
  EXPECT_EQ(Value("yard_job_restarts_total"), 1);
  EXPECT_EQ(Jobs("queued"), 1);
  EXPECT_EQ(Value("yard_cpu_slots"), 0);
  // Re-queued just now: the queue age restarts from then (though its
  // attempt ended at the last heartbeat plus the lease, a second earlier).
  EXPECT_EQ(Value("yard_queue_oldest_age_seconds"), 0);
}

// The queue's age counts from when a job (re)joined it: time it spent
// suspended meanwhile does not count.
TEST_F(ServerMetricsTest, TheQueueAgeLeavesOutTimeSuspended) {
  const std::string a = Submit();
  FakeWorker& w = Connect("w1", /*slots=*/1);
  Pass();
  ASSERT_TRUE(w.Started(a, 1).ok());
  const std::string b = Submit();
  AdvanceWithHeartbeats(absl::Seconds(1));
  ASSERT_TRUE(lifecycle_->Suspend(b, "").ok());
  AdvanceWithHeartbeats(absl::Seconds(15));
  EXPECT_EQ(Value("yard_queue_oldest_age_seconds"), 0);
  ASSERT_TRUE(lifecycle_->Resume(b).ok());
  EXPECT_EQ(Value("yard_queue_oldest_age_seconds"), 0);
  AdvanceWithHeartbeats(absl::Seconds(2));
  EXPECT_EQ(Value("yard_queue_oldest_age_seconds"), 2);
}

TEST_F(ServerMetricsTest, GpuAllocationFollowsPlacement) {
  EXPECT_EQ(Value("yard_gpus"), 0);
  EXPECT_EQ(Value("yard_gpu_compute_allocated_ratio"), 0);
  const std::string a = Submit(/*priority=*/0, /*gpus=*/1);
  Connect("g1", /*slots=*/1, /*gpus=*/2);
  Pass();
  EXPECT_EQ(Jobs("scheduled"), 1) << Job(a).job.state_reason();
  EXPECT_EQ(Value("yard_gpus"), 2);
  EXPECT_EQ(Value("yard_gpus_allocated"), 1);
  EXPECT_EQ(Value("yard_gpu_compute_allocated_ratio"), 0.5);
  ASSERT_TRUE(lifecycle_->Cancel(a, "").ok());
  EXPECT_EQ(Value("yard_gpus_allocated"), 0);
  EXPECT_EQ(Value("yard_jobs_finished_total", {{"state", "cancelled"}}), 1);
}

// Two jobs share one of two GPUs at 500 and 250 milli-GPU: the compute
// allocated is 0.75 of a GPU over 2, though one GPU is held (in part).
TEST_F(ServerMetricsTest, ASharedGpuCountsItsGrantsInTheComputeRatio) {
  Connect("g1", /*slots=*/2, /*gpus=*/2);
  const std::string a = Submit(0, /*gpus=*/1);
  const std::string b = Submit(0, /*gpus=*/1);
  for (auto [id, milli] : {std::pair{a, 500}, std::pair{b, 250}}) {
    ASSERT_TRUE(lifecycle_
                    ->Assign(id, "g1", {0},
                             {scheduler::GpuShare{0, int64_t{1} << 30, milli}})
                    .ok());
  }
  EXPECT_EQ(Value("yard_gpus_allocated"), 1);
  EXPECT_EQ(Value("yard_tenant_gpus_allocated", {{"tenant", "default"}}), 0.75);
  EXPECT_DOUBLE_EQ(Value("yard_gpu_compute_allocated_ratio"), 0.75 / 2);
  // A GPU held whole beside it counts whole.
  const std::string c = Submit(0, /*gpus=*/1);
  ASSERT_TRUE(lifecycle_->Assign(c, "g1", {1}).ok());
  EXPECT_DOUBLE_EQ(Value("yard_gpu_compute_allocated_ratio"), 1.75 / 2);
}

TEST_F(ServerMetricsTest, TenantHoldingsFollowTheirJobs) {
  EXPECT_TRUE(std::isnan(Value("yard_tenant_gpus_allocated")))
      << "no tenant holds anything: no series";
  Connect("g1", /*slots=*/1, /*gpus=*/2);
  v1::SubmitJobRequest gpu;
  *gpu.mutable_spec() = Spec(0, /*gpus=*/2);
  ASSERT_TRUE(lifecycle_->Submit(gpu, "team-a").ok());
  v1::SubmitJobRequest cpu;
  *cpu.mutable_spec() = Spec();
  auto b = lifecycle_->Submit(cpu, "team-b");
  ASSERT_TRUE(b.ok()) << b.status();
  Pass();
  EXPECT_EQ(Value("yard_tenant_gpus_allocated", {{"tenant", "team-a"}}), 2);
  EXPECT_EQ(Value("yard_tenant_cpu_slots_allocated", {{"tenant", "team-a"}}),
            0);
  EXPECT_EQ(Value("yard_tenant_gpus_allocated", {{"tenant", "team-b"}}), 0);
  EXPECT_EQ(Value("yard_tenant_cpu_slots_allocated", {{"tenant", "team-b"}}),
            1);
  ASSERT_TRUE(lifecycle_->Cancel(b->job.id(), "").ok());
  EXPECT_TRUE(std::isnan(
      Value("yard_tenant_cpu_slots_allocated", {{"tenant", "team-b"}})));
  EXPECT_EQ(Value("yard_tenant_gpus_allocated", {{"tenant", "team-a"}}), 2);
}

TEST_F(ServerMetricsTest, TenantUsageCountersAddUpHeldTime) {
  EXPECT_TRUE(std::isnan(Value("yard_tenant_gpu_seconds_total")))
      << "no tenant has used anything: no series";
  FakeWorker& w = Connect("g1", /*slots=*/1, /*gpus=*/2);
  v1::SubmitJobRequest gpu;
  *gpu.mutable_spec() = Spec(0, /*gpus=*/2);
  auto a = lifecycle_->Submit(gpu, "team-a");
  ASSERT_TRUE(a.ok()) << a.status();
  v1::SubmitJobRequest cpu;
  *cpu.mutable_spec() = Spec();
  auto b = lifecycle_->Submit(cpu, "team-b");
  ASSERT_TRUE(b.ok()) << b.status();
  Pass();
  ASSERT_TRUE(w.Started(a->job.id(), 1).ok());
  ASSERT_TRUE(w.Started(b->job.id(), 1).ok());
  AdvanceWithHeartbeats(absl::Seconds(10));
  // Running: charged up to now, two GPUs for 10 s, one slot for 10 s.
  EXPECT_DOUBLE_EQ(
      Value("yard_tenant_gpu_seconds_total", {{"tenant", "team-a"}}), 20);
  EXPECT_DOUBLE_EQ(
      Value("yard_tenant_cpu_slot_seconds_total", {{"tenant", "team-b"}}), 10);
  EXPECT_DOUBLE_EQ(
      Value("yard_tenant_cpu_slot_seconds_total", {{"tenant", "team-a"}}), 0);
  AdvanceWithHeartbeats(absl::Seconds(5));
  ASSERT_TRUE(w.Exited(a->job.id(), 1, 0).ok());
  ASSERT_TRUE(w.Exited(b->job.id(), 1, 1, "crash").ok());
  AdvanceWithHeartbeats(absl::Seconds(30));
  // Ended: from the usage table, and no longer growing.
  EXPECT_DOUBLE_EQ(
      Value("yard_tenant_gpu_seconds_total", {{"tenant", "team-a"}}), 30);
  EXPECT_DOUBLE_EQ(
      Value("yard_tenant_cpu_slot_seconds_total", {{"tenant", "team-b"}}), 15);
  // Deleting a job does not take back what it used, nor does a restart.
  ASSERT_TRUE(lifecycle_->Delete(a->job.id(), false).ok());
  ServerMetrics fresh(&clock_, "test");
  fresh.Watch(store_.get(), registry_.get());
  double after_restart = std::nan("");
  for (const pm::MetricFamily& f : fresh.Collect()) {
    if (f.name != "yard_tenant_gpu_seconds_total") continue;
    for (const pm::ClientMetric& m : f.metric) {
      if (m.label[0].value == "team-a") after_restart = m.counter.value;
    }
  }
  EXPECT_DOUBLE_EQ(after_restart, 30);
  EXPECT_DOUBLE_EQ(
      Value("yard_tenant_gpu_seconds_total", {{"tenant", "team-a"}}), 30);
}

// An attempt recorded as ending after now (a clock set back) counts up to
// now, as `yard usage` counts it.
TEST_F(ServerMetricsTest, UsageEndingInTheFutureCountsUpToNow) {
  FakeWorker& w = Connect("g1", /*slots=*/1, /*gpus=*/1);
  const std::string a = Submit(0, /*gpus=*/1);
  Pass();
  ASSERT_TRUE(w.Started(a, 1).ok());
  AdvanceWithHeartbeats(absl::Seconds(10));
  ASSERT_TRUE(w.Exited(a, 1, 0).ok());
  EXPECT_DOUBLE_EQ(
      Value("yard_tenant_gpu_seconds_total", {{"tenant", "default"}}), 10);
  // The same usage seen from a clock 4 s behind the one that wrote it: up
  // to that now only.
  FakeClock behind(clock_.Now() - absl::Seconds(4));
  ServerMetrics earlier(&behind, "test");
  earlier.Watch(store_.get(), registry_.get());
  double seen = std::nan("");
  for (const pm::MetricFamily& f : earlier.Collect()) {
    if (f.name != "yard_tenant_gpu_seconds_total") continue;
    for (const pm::ClientMetric& m : f.metric) seen = m.counter.value;
  }
  EXPECT_DOUBLE_EQ(seen, 6);
}

// A running attempt on a worker the server has not heard since it came
// back counts up to its last contact plus the lease: no more than it will
// be charged if the worker reports it stopped, or never comes back.
TEST_F(ServerMetricsTest, AWorkerNotHeardSinceARestartIsNotCountedFurther) {
  FakeWorker& w = Connect("g1", /*slots=*/1, /*gpus=*/1);
  const std::string a = Submit(0, /*gpus=*/1);
  Pass();
  ASSERT_TRUE(w.Started(a, 1).ok());
  AdvanceWithHeartbeats(absl::Seconds(10));
  Pass();  // the server's last sign of life
  clock_.Advance(absl::Minutes(5));
  Boot();
  ServerMetrics restarted(&clock_, "test");
  restarted.Watch(store_.get(), registry_.get());
  double seen = std::nan("");
  for (const pm::MetricFamily& f : restarted.Collect()) {
    if (f.name != "yard_tenant_gpu_seconds_total") continue;
    for (const pm::ClientMetric& m : f.metric) seen = m.counter.value;
  }
  EXPECT_DOUBLE_EQ(seen, 10 + absl::ToDoubleSeconds(kLease));
}

TEST_F(ServerMetricsTest, PreemptionThroughTheLifecycleCountedOnce) {
  const std::string a = Submit();
  FakeWorker& w = Connect("w1", /*slots=*/1);
  Pass();
  ASSERT_TRUE(w.Started(a, 1).ok());
  ASSERT_TRUE(lifecycle_->Preempt(a, "w1", "room for a higher priority").ok());
  EXPECT_EQ(Jobs("preempting"), 1);
  EXPECT_EQ(Value("yard_preemptions_total"), 1);
  // It stops (exit 3: checkpointed) and goes back to the queue: that is
  // the preemption finishing, not a restart after a loss.
  ASSERT_TRUE(w.Exited(a, 1, 3).ok());
  EXPECT_EQ(Jobs("queued"), 1);
  EXPECT_EQ(Value("yard_preemptions_total"), 1);
  EXPECT_EQ(Value("yard_job_restarts_total"), 0);
}

TEST_F(ServerMetricsTest, ASuspendIsCountedWhenTheJobIsParked) {
  const std::string a = Submit();
  const std::string b = Submit();
  FakeWorker& w = Connect("w1", /*slots=*/1);
  Pass();
  ASSERT_TRUE(w.Started(a, 1).ok());
  ASSERT_TRUE(lifecycle_->Suspend(b, "").ok());  // queued: parked at once
  EXPECT_EQ(Jobs("suspended"), 1);
  EXPECT_EQ(Jobs("queued"), 0);
  EXPECT_EQ(Value("yard_job_suspensions_total"), 1);
  ASSERT_TRUE(lifecycle_->Suspend(a, "").ok());  // running: stops first
  EXPECT_EQ(Jobs("preempting"), 1);
  EXPECT_EQ(Value("yard_job_suspensions_total"), 1);
  ASSERT_TRUE(w.Exited(a, 1, 3).ok());
  EXPECT_EQ(Jobs("suspended"), 2);
  EXPECT_EQ(Value("yard_job_suspensions_total"), 2);
  EXPECT_EQ(Value("yard_job_restarts_total"), 0);
  ASSERT_TRUE(lifecycle_->Resume(a).ok());
  EXPECT_EQ(Jobs("suspended"), 1);
  EXPECT_EQ(Jobs("queued"), 1);
}

TEST_F(ServerMetricsTest, RejectionsByBoundedReason) {
  for (const char* reason : {"invalid_spec", "request_id_conflict", "quota",
                             "store", "unavailable", "cancelled", "internal"}) {
    EXPECT_EQ(Value("yard_job_rejections_total", {{"reason", reason}}), 0)
        << reason;
  }
  metrics_.OnSubmitRejected(absl::InvalidArgumentError("spec.steps: bad"));
  metrics_.OnSubmitRejected(absl::InvalidArgumentError("spec.model: bad"));
  metrics_.OnSubmitRejected(absl::AlreadyExistsError("request_id"));
  metrics_.OnSubmitRejected(absl::DataLossError("odd"));
  metrics_.OnSubmitRejected(absl::OkStatus());  // not a rejection
  EXPECT_EQ(Value("yard_job_rejections_total", {{"reason", "invalid_spec"}}),
            2);
  EXPECT_EQ(
      Value("yard_job_rejections_total", {{"reason", "request_id_conflict"}}),
      1);
  EXPECT_EQ(Value("yard_job_rejections_total", {{"reason", "internal"}}), 1);
}

TEST_F(ServerMetricsTest, PreemptionAndSchedulingPassCounted) {
  v1::StateChange preempt;
  preempt.set_from(v1::RUNNING);
  preempt.set_to(v1::PREEMPTING);
  metrics_.OnStateChange(preempt);
  v1::StateChange back;  // the preemption completing is not a restart
  back.set_from(v1::PREEMPTING);
  back.set_to(v1::QUEUED);
  metrics_.OnStateChange(back);
  EXPECT_EQ(Value("yard_preemptions_total"), 1);
  EXPECT_EQ(Value("yard_job_restarts_total"), 0);
  EXPECT_EQ(Value("yard_scheduling_pass_duration_seconds"), 0);
  metrics_.ObserveSchedulingPass(absl::Milliseconds(3));
  EXPECT_EQ(Value("yard_scheduling_pass_duration_seconds"), 1);
  EXPECT_EQ(Value("yard_build_info", {{"version", "9.9.9"}}), 1);
}

TEST_F(ServerMetricsTest, DeletionsAndTimeLimitStopsAreCounted) {
  const std::string id = Submit();
  ASSERT_TRUE(lifecycle_->Cancel(id, "").ok());
  EXPECT_EQ(Jobs("cancelled"), 1);
  absl::StatusOr<DeletedJob> deleted = lifecycle_->Delete(id, false);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  using By = ServerMetrics::DeletedBy;
  metrics_.OnJobDeleted(By::kRequest, deleted->checkpoint_bytes);
  metrics_.OnJobDeleted(By::kRetention, 4096);
  metrics_.OnJobDeleted(By::kRetention, 0);
  EXPECT_EQ(Jobs("cancelled"), 0) << "the gauge counts what the store holds";
  EXPECT_EQ(Value("yard_jobs_deleted_total", {{"by", "request"}}), 1);
  EXPECT_EQ(Value("yard_jobs_deleted_total", {{"by", "retention"}}), 2);
  EXPECT_EQ(Value("yard_checkpoint_deleted_bytes_total"), 4096);
  EXPECT_EQ(Value("yard_job_time_limit_stops_total"), 0);
  metrics_.OnTimeLimitStop();
  EXPECT_EQ(Value("yard_job_time_limit_stops_total"), 1);
}

TEST_F(ServerMetricsTest, NoJobIdLabelsAndEveryFamilyDocumented) {
  Submit();
  Connect("w1");
  Pass();
  for (const pm::MetricFamily& f : metrics_.Collect()) {
    EXPECT_EQ(f.name.rfind("yard_", 0), 0u) << f.name;
    EXPECT_FALSE(f.help.empty()) << f.name;
    for (const pm::ClientMetric& m : f.metric) {
      for (const auto& l : m.label) {
        EXPECT_NE(l.name, "job") << f.name;
        EXPECT_NE(l.name, "job_id") << f.name;
      }
    }
  }
}

TEST_F(ServerMetricsTest, ExpositionPassesPromtool) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool is not installed (scripts/install-deps.sh "
                    "installs it with the prometheus package)";
  }
  Submit();
  Connect("g1", 1, 2);
  Pass();
  metrics_.ObserveSchedulingPass(absl::Milliseconds(2));
  std::ostringstream text;
  pm::TextSerializer().Serialize(text, metrics_.Collect());
  const std::string path = dir_.File("metrics.txt");
  std::ofstream(path) << text.str();
  const std::string cmd = "promtool check metrics < " + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  EXPECT_EQ(pclose(p), 0) << out << "\n--- exposition:\n" << text.str();
  EXPECT_EQ(out, "") << text.str();
}

}  // namespace
}  // namespace trainyard::server
