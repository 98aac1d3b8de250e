#include "server/scheduler_snapshot.h"

#include <limits>

#include "common/proto_time.h"
#include "engine/job_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/placement_policy.h"

namespace trainyard::server {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'000'000);

JobRecord Record(const std::string& id, v1::JobState state, int32_t gpus = 0,
                 const std::string& worker = "w1") {
  JobRecord r;
  r.job.set_id(id);
  r.job.set_tenant("team-a");
  r.job.set_state(state);
  r.job.set_worker_id(worker);
  r.job.set_attempt(1);
  r.job.mutable_spec()->set_priority(3);
  r.job.mutable_spec()->mutable_resources()->set_gpus(gpus);
  r.job.mutable_spec()->mutable_batch()->set_micro_batch(50);
  v1::Attempt* a = r.job.add_attempts();
  a->set_number(1);
  *a->mutable_start_time() = ToProtoTime(kNow - absl::Seconds(40));
  for (int32_t g = 0; g < gpus; ++g) r.gpu_indices.push_back(g);
  return r;
}

scheduler::WorkerCapacity Worker(const std::string& id, int32_t gpus = 0) {
  scheduler::WorkerCapacity w;
  w.id = id;
  w.cpu_slots = 4;
  for (int32_t g = 0; g < gpus; ++g) w.gpus.push_back(g);
  return w;
}

TEST(WorkSinceCheckpointTest, StepsSinceTheCheckpointAtTheReportedRate) {
  JobRecord r = Record("j-1", v1::RUNNING, /*gpus=*/2);
  r.job.mutable_progress()->set_step(300);
  r.job.mutable_progress()->set_samples_per_second(1000);  // 20 steps/s
  r.job.mutable_last_checkpoint()->set_step(100);
  // 200 steps at 20 steps/s on 2 GPUs.
  EXPECT_DOUBLE_EQ(WorkSinceCheckpoint(r.job, kNow), 20.0);
}

TEST(WorkSinceCheckpointTest, CountsFromTheResumedStepAndGradAccum) {
  JobRecord r = Record("j-1", v1::RUNNING);
  r.job.mutable_spec()->mutable_batch()->set_grad_accum(2);  // 100/step
  r.job.mutable_progress()->set_step(150);
  r.job.mutable_progress()->set_samples_per_second(1000);  // 10 steps/s
  r.job.mutable_attempts(0)->set_resumed_from_step(120);
  EXPECT_DOUBLE_EQ(WorkSinceCheckpoint(r.job, kNow), 3.0);
}

TEST(WorkSinceCheckpointTest, WithoutARateTheWholeAttemptIsAtRisk) {
  JobRecord r = Record("j-1", v1::RUNNING, /*gpus=*/1);
  EXPECT_DOUBLE_EQ(WorkSinceCheckpoint(r.job, kNow), 40.0);
  r.job.clear_attempts();
  EXPECT_DOUBLE_EQ(WorkSinceCheckpoint(r.job, kNow), 0.0);
}

TEST(WorkSinceCheckpointTest, NeverNegative) {
  JobRecord r = Record("j-1", v1::RUNNING);
  r.job.mutable_progress()->set_step(10);
  r.job.mutable_progress()->set_samples_per_second(100);
  r.job.mutable_last_checkpoint()->set_step(50);  // progress is older
  EXPECT_DOUBLE_EQ(WorkSinceCheckpoint(r.job, kNow), 0.0);
}

TEST(RunningJobsOfTest, CarriesTenantPriorityHoldingsAndPreemptibility) {
  std::vector<JobRecord> active = {
      Record("j-1", v1::RUNNING, 1), Record("j-2", v1::SCHEDULED),
      Record("j-3", v1::PREEMPTING), Record("j-4", v1::RUNNING)};
  active[3].cancel_reason = "user";
  std::vector<scheduler::RunningJob> out =
      RunningJobsOf(active, {Worker("w1", 1)}, kNow);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].tenant, "team-a");
  EXPECT_EQ(out[0].priority, 3);
  EXPECT_EQ(out[0].gpu_indices, std::vector<int32_t>{0});
  EXPECT_EQ(out[0].cpu_slots, 0);
  EXPECT_TRUE(out[0].preemptible);
  EXPECT_GT(out[0].work_since_checkpoint, 0);
  EXPECT_EQ(out[1].cpu_slots, 1);
  EXPECT_FALSE(out[1].preemptible) << "not started yet";
  EXPECT_TRUE(out[2].preemptible) << "already stopping: a free victim";
  EXPECT_EQ(out[2].priority, std::numeric_limits<int32_t>::min());
  EXPECT_EQ(out[2].work_since_checkpoint, 0);
  EXPECT_FALSE(out[3].preemptible) << "a cancel is pending";
}

TEST(RunningJobsOfTest, LeavesOutJobsTheSnapshotCannotPlace) {
  std::vector<JobRecord> active = {Record("j-1", v1::RUNNING, 0, "gone"),
                                   Record("j-2", v1::RUNNING, 2, "w1")};
  // w1 has one GPU only: a stale record naming GPU 1 is left out.
  EXPECT_TRUE(RunningJobsOf(active, {Worker("w1", 1)}, kNow).empty());
}

v1::GangPart* AddPart(JobRecord& r, const std::string& worker,
                      int32_t first_rank, std::vector<int32_t> gpus) {
  v1::GangPart* part = r.job.add_gang_parts();
  part->set_worker_id(worker);
  part->set_first_rank(first_rank);
  part->set_ranks(gpus.empty() ? 1 : static_cast<int32_t>(gpus.size()));
  for (int32_t g : gpus) part->add_gpu_indices(g);
  return part;
}

// A job spread over workers carries each part still running on a
// schedulable worker, with what it holds there, as UsageByWorker counts it.
TEST(RunningJobsOfTest, CarriesTheLivePartsOfASpreadJob) {
  JobRecord r = Record("j-1", v1::RUNNING, /*gpus=*/6);
  r.gpu_indices = {0, 1};
  v1::GangPart* shared = AddPart(r, "w2", 2, {0});
  v1::GpuGrant* grant = shared->add_gpu_grants();
  grant->set_index(0);
  grant->set_shared(true);
  grant->set_memory_bytes(int64_t{5} << 30);
  grant->set_compute_milli(300);
  AddPart(r, "w3", 3, {1});
  AddPart(r, "draining", 4, {0});  // not schedulable now
  AddPart(r, "w4", 5, {0})->set_exited(true);
  const std::vector<scheduler::WorkerCapacity> workers = {
      Worker("w1", 2), Worker("w2", 1), Worker("w3", 2), Worker("w4", 1)};
  std::vector<scheduler::RunningJob> out = RunningJobsOf({r}, workers, kNow);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].gpu_indices, (std::vector<int32_t>{0, 1}));
  ASSERT_EQ(out[0].more_parts.size(), 2u);
  const scheduler::RunningPart& on_w2 = out[0].more_parts[0];
  EXPECT_EQ(on_w2.worker_id, "w2");
  EXPECT_EQ(on_w2.gpu_indices, std::vector<int32_t>{0});
  EXPECT_EQ(on_w2.gpu_memory_bytes, int64_t{5} << 30);
  EXPECT_EQ(on_w2.gpu_compute_milli, 300);
  EXPECT_EQ(on_w2.cpu_slots, 0);
  const scheduler::RunningPart& on_w3 = out[0].more_parts[1];
  EXPECT_EQ(on_w3.worker_id, "w3");
  EXPECT_EQ(on_w3.gpu_indices, std::vector<int32_t>{1});
  EXPECT_EQ(on_w3.gpu_memory_bytes, 0) << "no grant: the GPU whole";
  // The snapshot takes them as they are.
  EXPECT_TRUE(scheduler::ClusterSnapshot::Create(workers, {}, {}, out).ok());
}

TEST(RunningJobsOfTest, CpuPartsHoldASlotPerRankAndStalePartsAreLeftOut) {
  JobRecord r = Record("j-1", v1::PREEMPTING);
  r.job.mutable_spec()->mutable_resources()->set_cpu_ranks(4);
  AddPart(r, "w2", 2, {})->set_ranks(2);
  AddPart(r, "w3", 4, {7});  // w3 has no GPU 7: a stale record
  std::vector<scheduler::RunningJob> out =
      RunningJobsOf({r}, {Worker("w1"), Worker("w2"), Worker("w3", 1)}, kNow);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].cpu_slots, 2) << "ranks 0 and 1 on its own worker";
  ASSERT_EQ(out[0].more_parts.size(), 1u);
  EXPECT_EQ(out[0].more_parts[0].worker_id, "w2");
  EXPECT_EQ(out[0].more_parts[0].cpu_slots, 2);
  EXPECT_TRUE(out[0].preemptible) << "already stopping: a free victim";
}

TEST(PendingJobOfTest, CarriesTenantPriorityOrderAndNeeds) {
  JobRecord r = Record("j-9", v1::QUEUED, /*gpus=*/2);
  r.create_seq = 17;
  scheduler::PendingJob p = PendingJobOf(r);
  EXPECT_EQ(p.id, "j-9");
  EXPECT_EQ(p.tenant, "team-a");
  EXPECT_EQ(p.priority, 3);
  EXPECT_EQ(p.submit_order, 17);
  EXPECT_EQ(p.gpus, 2);
}

// Only failed attempts count: a preempted or lost attempt says nothing bad
// of its worker.
TEST(AvoidedWorkersOfTest, TheWorkersOfFailedAttempts) {
  JobRecord r = Record("j-9", v1::QUEUED, /*gpus=*/2);
  auto add = [&](const std::string& worker, v1::JobState outcome,
                 std::vector<std::string> more = {}) {
    v1::Attempt& a = *r.job.add_attempts();
    a.set_worker_id(worker);
    a.set_outcome(outcome);
    for (const std::string& m : more) a.add_more_workers(m);
  };
  add("w1", v1::FAILED);
  add("w2", v1::QUEUED);
  add("w3", v1::FAILED, {"w4", "w5"});
  const JobRecord fresh = Record("j-10", v1::QUEUED, /*gpus=*/1);
  const scheduler::AvoidedWorkers avoided = AvoidedWorkersOf({r, fresh});
  ASSERT_EQ(avoided.size(), 1u) << "a job that never failed avoids nothing";
  EXPECT_THAT(avoided.at("j-9"),
              ::testing::ElementsAre("w1", "w3", "w4", "w5"));
}

// An MNIST MLP job as stored (defaults applied).
JobRecord MlpRecord(const std::string& id, int32_t gpus, int64_t seq = 1) {
  JobRecord r = Record(id, v1::QUEUED, gpus);
  r.create_seq = seq;
  v1::JobSpec& spec = *r.job.mutable_spec();
  v1::MlpModel& mlp = *spec.mutable_model()->mutable_mlp();
  mlp.add_hidden(512);
  mlp.add_hidden(256);
  mlp.set_input_dim(784);
  mlp.set_num_classes(10);
  spec.mutable_data()->mutable_mnist()->set_images("i.gz");
  spec.mutable_batch()->set_micro_batch(128);
  spec.mutable_resources()->set_cpu_threads(1);
  return r;
}

TEST(GpuMemoryEstimateTest, IsTheEnginesEstimateOnAGpu) {
  const JobRecord r = MlpRecord("j", 1);
  const int64_t expected =
      engine::EstimateSpecMemory(r.job.spec(), engine::DeviceKind::kCuda)
          .total();
  EXPECT_EQ(GpuMemoryEstimate(r.job.spec()), expected);
  EXPECT_GT(expected, engine::kCudaOverheadBytes);
  JobRecord gpt = Record("g", v1::QUEUED, 2);
  v1::GptModel& m = *gpt.job.mutable_spec()->mutable_model()->mutable_gpt();
  m.set_n_layer(4);
  m.set_n_head(4);
  m.set_d_model(128);
  m.set_seq_len(64);
  m.set_vocab_size(65);
  EXPECT_GT(GpuMemoryEstimate(gpt.job.spec()), engine::kCudaOverheadBytes);
  EXPECT_EQ(GpuMemoryEstimate(MlpRecord("c", 0).job.spec()), 0)
      << "a CPU-slot job asks no GPU memory";
}

TEST(PendingJobOfTest, GpuJobCarriesItsEstimateAndLetsTheGpuDecide) {
  scheduler::PendingJob p = PendingJobOf(MlpRecord("j", 2), int64_t{3} << 30);
  EXPECT_EQ(p.gpus, 2);
  EXPECT_TRUE(p.gpu_memory_estimated);
  EXPECT_EQ(p.gpu_memory_bytes, int64_t{3} << 30);
  EXPECT_EQ(p.gpu_compute_milli, 0) << "no declared share";
  EXPECT_TRUE(PendingJobOf(MlpRecord("j", 2)).whole_gpus())
      << "without an estimate: whole GPUs";
}

TEST(PendingJobOfTest, ADeclaredComputeShareIsCarried) {
  JobRecord r = MlpRecord("j", 1);
  r.job.mutable_spec()->mutable_resources()->set_gpu_compute_milli(250);
  scheduler::PendingJob p = PendingJobOf(r, int64_t{3} << 30);
  EXPECT_EQ(p.gpu_compute_milli, 250);
  EXPECT_EQ(PendingJobOf(MlpRecord("j", 1), int64_t{3} << 30).gpu_compute_milli,
            0)
      << "undeclared: in proportion to memory";
}

TEST(PendingJobOfTest, CpuSlotJobIsUnchangedByEstimates) {
  scheduler::PendingJob p = PendingJobOf(MlpRecord("c", 0), int64_t{3} << 30);
  EXPECT_EQ(p.gpus, 0);
  EXPECT_EQ(p.cpu_slots, 1);
  EXPECT_FALSE(p.gpu_memory_estimated);
  EXPECT_EQ(p.cpu_milli, 0);
  EXPECT_EQ(p.memory_bytes, 0);
}

TEST(PendingJobCacheTest, EstimatesEachQueuedJobOnceAndForgetsTheGone) {
  int calls = 0;
  PendingJobCache cache([&](const v1::JobSpec& spec) {
    ++calls;
    return GpuMemoryEstimate(spec);
  });
  std::vector<JobRecord> queued = {MlpRecord("a", 1, 1), MlpRecord("b", 0, 2),
                                   MlpRecord("c", 1, 3)};
  std::vector<scheduler::PendingJob> first = cache.Of(queued);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[0].id, "a");
  EXPECT_EQ(first[2].id, "c");
  EXPECT_TRUE(first[0].gpu_memory_estimated);
  EXPECT_EQ(calls, 3);
  for (int pass = 0; pass < 5; ++pass) {
    std::vector<scheduler::PendingJob> again = cache.Of(queued);
    EXPECT_EQ(again[0].gpu_memory_bytes, first[0].gpu_memory_bytes);
  }
  EXPECT_EQ(calls, 3) << "estimated once per job, not per pass";
  queued.erase(queued.begin());  // "a" was placed
  cache.Of(queued);
  EXPECT_EQ(cache.size(), 3u) << "kept while they do not outnumber the queue";
  queued.erase(queued.begin());  // "b" too
  cache.Of(queued);
  EXPECT_EQ(cache.size(), 1u);
  queued.push_back(MlpRecord("a", 1, 1));  // back in the queue (preempted)
  cache.Of(queued);
  EXPECT_EQ(calls, 4);
}

// Workers as the server describes them today: GPU indices without memory,
// and CPU slots. Estimated jobs then take whole GPUs and CPU-slot jobs take
// slots, exactly as before estimates, under every policy.
TEST(PendingJobCacheTest, WorkersWithoutGpuMemoryPlaceAsBefore) {
  PendingJobCache cache;
  std::vector<JobRecord> queued = {MlpRecord("g1", 1, 1), MlpRecord("c1", 0, 2),
                                   MlpRecord("g2", 1, 3), MlpRecord("c2", 0, 4),
                                   MlpRecord("g3", 1, 5)};
  scheduler::WorkerCapacity gpu_worker = Worker("gpu", 2);
  gpu_worker.cpu_slots = gpu_worker.free_cpu_slots = 0;
  gpu_worker.free_gpus = gpu_worker.gpus;
  scheduler::WorkerCapacity cpu_worker = Worker("cpu");
  cpu_worker.cpu_slots = cpu_worker.free_cpu_slots = 1;
  auto snapshot = scheduler::ClusterSnapshot::Create({gpu_worker, cpu_worker},
                                                     cache.Of(queued));
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  for (const std::string& name : scheduler::PlacementPolicyNames()) {
    scheduler::Plan plan =
        (*scheduler::MakePlacementPolicy(name))->Place(*snapshot);
    ASSERT_TRUE(scheduler::CheckPlan(*snapshot, plan).ok()) << name;
    std::vector<std::string> placed;
    for (const scheduler::Placement& p : plan.placements) {
      placed.push_back(
          p.job_id + "@" + p.worker_id + ":" +
          std::to_string(p.gpu_indices.empty() ? -1 : p.gpu_indices[0]));
    }
    EXPECT_EQ(placed,
              (std::vector<std::string>{"g1@gpu:0", "c1@cpu:-1", "g2@gpu:1"}))
        << name;
    ASSERT_EQ(plan.waits.size(), 2u) << name;
    EXPECT_EQ(plan.waits[0].job_id, "c2") << name;
    EXPECT_THAT(plan.waits[0].reason, ::testing::HasSubstr("a CPU slot"))
        << name;
    EXPECT_EQ(plan.waits[1].job_id, "g3") << name;
    EXPECT_THAT(plan.waits[1].reason, ::testing::HasSubstr("GPU with")) << name;
  }
}

}  // namespace
}  // namespace trainyard::server
