// Administrators' drains through the server's logic: a first-fit scheduler
// loop, a real store, fake workers.
#include "server/worker_drains.h"

#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_test_fixture.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

class WorkerDrainsTest : public ServerLogicTest {
 protected:
  WorkerDrainsTest() { MakeDrains(); }

  void MakeDrains() {
    drains_ = std::make_unique<WorkerDrains>(store_.get(), registry_.get(),
                                             &clock_, [this] { ++wakes_; });
  }

  // A restarted server: the store's drains are loaded again.
  void Restart() {
    Boot();
    MakeDrains();
    ASSERT_TRUE(drains_->Load().ok());
  }

  absl::StatusOr<v1::WorkerDrain> Drain(const std::string& worker,
                                        const std::string& reason = "",
                                        bool keep_jobs = false) {
    return drains_->Drain(worker, reason, keep_jobs);
  }

  WorkerStatus Status(const std::string& worker) {
    std::optional<WorkerStatus> s = registry_->Find(worker);
    EXPECT_TRUE(s.has_value()) << worker;
    return s.value_or(WorkerStatus{});
  }

  std::unique_ptr<WorkerDrains> drains_;
};

TEST_F(WorkerDrainsTest, ADrainedWorkerGetsNoNewJobs) {
  Connect("w1");
  FakeWorker& w2 = Connect("w2");
  const int wakes = wakes_;
  auto drain = Drain("w1", "replacing a fan");
  ASSERT_TRUE(drain.ok()) << drain.status();
  EXPECT_EQ(drain->reason(), "replacing a fan");
  EXPECT_TRUE(drain->has_drain_time());
  EXPECT_GT(wakes_, wakes);

  const WorkerStatus w1 = Status("w1");
  EXPECT_EQ(w1.state, v1::WORKER_DRAINING);
  EXPECT_FALSE(w1.schedulable);
  ASSERT_TRUE(w1.drain.has_value());
  EXPECT_EQ(w1.drain->reason(), "replacing a fan");

  const std::string job = Submit();
  Pass();
  EXPECT_EQ(Job(job).job.worker_id(), "w2");
  EXPECT_EQ(w2.Assignments().size(), 1u);
  const std::string second = Submit();
  Pass();  // w2 is full and w1 drained: the job waits
  EXPECT_EQ(Job(second).job.state(), v1::QUEUED);
}

// A job with no room among the workers taking jobs says that draining
// workers were left out, instead of "no worker is connected".
TEST_F(WorkerDrainsTest, WaitReasonsCountTheDrainingWorkers) {
  Connect("w1", 1, /*gpus=*/2);
  ASSERT_TRUE(Drain("w1").ok());
  const std::string job = Submit();
  Pass();
  EXPECT_EQ(Job(job).job.state(), v1::QUEUED);
  EXPECT_EQ(Job(job).job.state_reason(),
            "no worker is taking jobs (1 worker draining: w1)");
  Connect("w2", 1, /*gpus=*/1);
  const std::string gpus = Submit(0, /*gpus=*/2);
  Pass();
  EXPECT_THAT(Job(gpus).job.state_reason(),
              HasSubstr("infeasible: needs 2 whole GPUs"));
  EXPECT_THAT(Job(gpus).job.state_reason(),
              HasSubstr("(not counting 1 worker draining: w1)"));
}

TEST_F(WorkerDrainsTest, ItsRunningJobIsPreemptedAndResumesElsewhere) {
  FakeWorker& w1 = Connect("w1");
  const std::string job = RunJobOn(w1);
  FakeWorker& w2 = Connect("w2");
  ASSERT_TRUE(Drain("w1", "driver upgrade").ok());
  Pass();

  EXPECT_EQ(Job(job).job.state(), v1::PREEMPTING);
  EXPECT_EQ(Job(job).job.state_reason(),
            "worker w1 is drained: driver upgrade");
  std::vector<v1::Preempt> sent = w1.Preempts();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].job_id(), job);
  Pass();  // already stopping: told once
  EXPECT_THAT(w1.Preempts(), IsEmpty());

  ASSERT_TRUE(w1.Exited(job, 1, 3).ok());  // yard-train checkpointed, exit 3
  EXPECT_EQ(Job(job).job.state(), v1::QUEUED);
  Pass();
  ASSERT_EQ(w2.Assignments().size(), 1u);
  EXPECT_EQ(Job(job).job.worker_id(), "w2");
  EXPECT_EQ(Job(job).job.attempt(), 2);
}

TEST_F(WorkerDrainsTest, KeepJobsLetsRunningJobsFinishThere) {
  FakeWorker& w1 = Connect("w1", /*slots=*/2);
  const std::string job = RunJobOn(w1);
  ASSERT_TRUE(Drain("w1", "", /*keep_jobs=*/true).ok());
  const std::string waiting = Submit();
  Pass();
  EXPECT_EQ(Job(job).job.state(), v1::RUNNING);
  EXPECT_THAT(w1.Preempts(), IsEmpty());
  EXPECT_EQ(Job(waiting).job.state(), v1::QUEUED);  // the free slot is unused

  // Draining again without keep_jobs moves it after all.
  ASSERT_TRUE(Drain("w1").ok());
  Pass();
  EXPECT_EQ(Job(job).job.state(), v1::PREEMPTING);
  EXPECT_EQ(Job(job).job.state_reason(), "worker w1 is drained");
}

TEST_F(WorkerDrainsTest, AJobOnlyScheduledAtTheDrainMovesOnceItRuns) {
  FakeWorker& w1 = Connect("w1");
  const std::string job = Submit();
  Pass();
  ASSERT_EQ(w1.Assignments().size(), 1u);
  ASSERT_TRUE(Drain("w1").ok());
  Pass();
  EXPECT_EQ(Job(job).job.state(), v1::SCHEDULED);
  ASSERT_TRUE(w1.Started(job, 1).ok());
  Pass();
  EXPECT_EQ(Job(job).job.state(), v1::PREEMPTING);
  EXPECT_EQ(w1.Preempts().size(), 1u);
}

TEST_F(WorkerDrainsTest, ACancelledJobIsLeftToStop) {
  FakeWorker& w1 = Connect("w1");
  const std::string job = RunJobOn(w1);
  ASSERT_TRUE(lifecycle_->Cancel(job, "not needed").ok());
  ASSERT_TRUE(Drain("w1").ok());
  w1.link->Take();
  Pass();
  EXPECT_THAT(w1.Preempts(), IsEmpty());
  ASSERT_TRUE(w1.Exited(job, 1, 0, "", /*cancelled=*/true).ok());
  EXPECT_EQ(Job(job).job.state(), v1::CANCELLED);
}

TEST_F(WorkerDrainsTest, TheDrainHoldsAcrossReconnectsAndRestarts) {
  Connect("w1");
  ASSERT_TRUE(Drain("w1", "bad DIMM").ok());
  Connect("w1");  // a new session of the same worker
  EXPECT_EQ(Status("w1").state, v1::WORKER_DRAINING);
  EXPECT_FALSE(Status("w1").schedulable);

  Restart();
  // Not back yet, but still drained: draining it again replaces the reason.
  EXPECT_FALSE(registry_->Find("w1").has_value());
  ASSERT_TRUE(Drain("w1", "bad DIMM, waiting for the part").ok());
  Connect("w1");
  const WorkerStatus back = Status("w1");
  EXPECT_EQ(back.state, v1::WORKER_DRAINING);
  EXPECT_FALSE(back.schedulable);
  EXPECT_EQ(back.drain->reason(), "bad DIMM, waiting for the part");
  const std::string job = Submit();
  Pass();
  EXPECT_EQ(Job(job).job.state(), v1::QUEUED);

  ASSERT_TRUE(drains_->Undrain("w1").ok());
  EXPECT_EQ(Status("w1").state, v1::WORKER_READY);
  EXPECT_TRUE(Status("w1").schedulable);
  EXPECT_FALSE(Status("w1").drain.has_value());
  Pass();
  EXPECT_EQ(Job(job).job.worker_id(), "w1");
  Restart();
  Connect("w1");
  EXPECT_FALSE(Status("w1").drain.has_value());
}

TEST_F(WorkerDrainsTest, AWorkerShuttingDownStaysDrainingWhenUndrained) {
  FakeWorker& w1 = Connect("w1");
  ASSERT_TRUE(Drain("w1").ok());
  v1::WorkerMessage bye;
  bye.mutable_heartbeat()->set_draining(true);
  ASSERT_TRUE(w1.Send(bye).ok());
  ASSERT_TRUE(drains_->Undrain("w1").ok());
  EXPECT_EQ(Status("w1").state, v1::WORKER_DRAINING);
  EXPECT_FALSE(Status("w1").schedulable);
  // Its own drain is not an administrator's to undo.
  absl::Status again = drains_->Undrain("w1");
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.message(), HasSubstr("'w1' is not drained"));
}

TEST_F(WorkerDrainsTest, BadRequestsNameWhatIsWrongAndChangeNothing) {
  Connect("w1");
  auto empty = Drain("");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("worker_id"));
  auto wordy = Drain("w1", std::string(kMaxDrainReason + 1, 'x'));
  EXPECT_EQ(wordy.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wordy.status().message(),
              HasSubstr("reason: at most 256 bytes of UTF-8, got 257"));
  auto unknown = Drain("w9");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), HasSubstr("no worker 'w9'"));
  EXPECT_EQ(drains_->Undrain("w9").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(drains_->Undrain("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(drains_->Undrain("w1").code(),
            absl::StatusCode::kFailedPrecondition);

  fail_writes_ = true;  // the store cannot commit: the worker stays as it was
  EXPECT_FALSE(Drain("w1").ok());
  EXPECT_TRUE(Status("w1").schedulable);
  fail_writes_ = false;
  ASSERT_TRUE(Drain("w1").ok());
  fail_writes_ = true;
  EXPECT_FALSE(drains_->Undrain("w1").ok());
  EXPECT_EQ(Status("w1").state, v1::WORKER_DRAINING);
  fail_writes_ = false;
  Restart();
  EXPECT_EQ(store_->ListWorkerDrains()->size(), 1u);
}

// A worker gone for good is forgotten: out of the list (and so of the lost
// count), its drain ended in the store; its job was re-queued when it was
// lost. Should it come back, it joins as a new worker.
TEST_F(WorkerDrainsTest, ALostWorkerIsForgottenWithItsDrain) {
  FakeWorker& w1 = Connect("w1");
  const std::string job = RunJobOn(w1);
  ASSERT_TRUE(Drain("w1", "dead PSU", /*keep_jobs=*/true).ok());
  EXPECT_EQ(drains_->Forget("w1").code(),
            absl::StatusCode::kFailedPrecondition);  // connected
  EXPECT_THAT(drains_->Forget("w1").message(), HasSubstr("connected"));

  clock_.Advance(kLease + absl::Seconds(1));
  Pass();
  EXPECT_EQ(Status("w1").state, v1::WORKER_LOST);
  EXPECT_EQ(Job(job).job.state(), v1::QUEUED);
  fail_writes_ = true;  // the store cannot drop the drain: nothing forgotten
  EXPECT_FALSE(drains_->Forget("w1").ok());
  EXPECT_EQ(Status("w1").state, v1::WORKER_LOST);
  EXPECT_TRUE(Status("w1").drain.has_value());
  fail_writes_ = false;
  const int wakes = wakes_;
  ASSERT_TRUE(drains_->Forget("w1").ok());
  EXPECT_GT(wakes_, wakes);
  EXPECT_FALSE(registry_->Find("w1").has_value());
  EXPECT_FALSE(registry_->Knows("w1"));
  EXPECT_EQ(store_->ListWorkerDrains()->size(), 0u);
  EXPECT_EQ(drains_->Forget("w1").code(), absl::StatusCode::kNotFound);

  // Back under the same name: a new worker, undrained, that runs the job.
  FakeWorker& again = Connect("w1");
  EXPECT_TRUE(Status("w1").schedulable);
  Pass();
  ASSERT_EQ(again.Assignments().size(), 1u);
  EXPECT_EQ(Job(job).job.worker_id(), "w1");
}

TEST_F(WorkerDrainsTest, OnlyLostOrAbsentDrainedWorkersAreForgotten) {
  EXPECT_EQ(drains_->Forget("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(drains_->Forget("").message(), HasSubstr("worker_id"));
  EXPECT_EQ(drains_->Forget("w9").code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(drains_->Forget("w9").message(), HasSubstr("no worker 'w9'"));

  // A worker whose stream ended keeps its lease (it may reconnect).
  FakeWorker& w1 = Connect("w1");
  w1.session->Close();
  absl::Status early = drains_->Forget("w1");
  EXPECT_EQ(early.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(early.message(), HasSubstr("declared lost if not back within"));
  EXPECT_TRUE(registry_->Find("w1").has_value());

  // Drained, then a server restart: known only by its drain, and forgotten
  // with it.
  ASSERT_TRUE(Drain("w1", "retired").ok());
  Restart();
  ASSERT_TRUE(registry_->Knows("w1"));
  ASSERT_TRUE(drains_->Forget("w1").ok());
  EXPECT_FALSE(registry_->Knows("w1"));
  Restart();
  EXPECT_FALSE(registry_->Knows("w1"));
}

TEST(DrainPreemptionsTest, AGangMovesWhenAnyOfItsWorkersIsDrained) {
  JobRecord gang;
  gang.job.set_id("j-000001");
  gang.job.set_state(v1::RUNNING);
  gang.job.set_worker_id("w1");
  gang.job.add_gang_parts()->set_worker_id("w2");
  JobRecord elsewhere;
  elsewhere.job.set_id("j-000002");
  elsewhere.job.set_state(v1::RUNNING);
  elsewhere.job.set_worker_id("w3");
  WorkerStatus w1;
  w1.id = "w1";
  WorkerStatus w2;
  w2.id = "w2";
  w2.drain.emplace().set_reason("cabling");
  WorkerStatus w3;
  w3.id = "w3";
  w3.drain.emplace().set_keep_jobs(true);

  std::vector<DrainPreemption> out =
      DrainPreemptions({gang, elsewhere}, {w1, w2, w3});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].job_id, "j-000001");
  EXPECT_EQ(out[0].worker_id, "w1");  // preempted on rank 0's worker
  EXPECT_EQ(out[0].reason, "worker w2 is drained: cabling");
}

}  // namespace
}  // namespace trainyard::server
