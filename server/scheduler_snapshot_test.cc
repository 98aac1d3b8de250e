#include "server/scheduler_snapshot.h"

#include <limits>

#include "common/proto_time.h"
#include "gtest/gtest.h"

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

}  // namespace
}  // namespace trainyard::server
