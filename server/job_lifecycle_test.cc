// Job lifecycle driven through the logic classes: submissions, the
// scheduler pass, fake workers' reports, cancellation.
#include "server/job_lifecycle.h"

#include <filesystem>

#include "common/field_errors.h"
#include "common/proto_time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/job_state.h"
#include "server/server_test_fixture.h"

namespace trainyard::server {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class JobLifecycleTest : public ServerLogicTest {
 protected:
  // Submits a job allowed `max_restarts` restarts; returns its id.
  std::string SubmitWithRestarts(int32_t max_restarts,
                                 const std::string& request_id = "") {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec();
    req.mutable_spec()->set_max_restarts(max_restarts);
    req.set_request_id(request_id);
    auto submitted = lifecycle_->Submit(req);
    EXPECT_TRUE(submitted.ok()) << submitted.status();
    return submitted.ok() ? submitted->job.id() : "";
  }
};

std::vector<v1::JobState> StateChanges(JobStore& store, const std::string& id) {
  std::vector<v1::JobState> out;
  auto events = store.ReadEvents(id, 0, 1000);
  EXPECT_TRUE(events.ok()) << events.status();
  for (const auto& e : *events) {
    if (e.has_state_change()) out.push_back(e.state_change().to());
  }
  return out;
}

TEST_F(JobLifecycleTest, SubmitStoresTheSpecWithDefaultsAndWakesScheduler) {
  const std::string id = Submit();
  EXPECT_EQ(id, "j-000001");
  JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::QUEUED);
  EXPECT_EQ(r.job.tenant(), "default");
  EXPECT_EQ(r.job.name(), "test");
  EXPECT_EQ(r.job.spec().log_every_steps(), 10);  // a default, now explicit
  EXPECT_TRUE(r.job.spec().optimizer().has_lr());
  EXPECT_GT(wakes_, 0);
}

TEST_F(JobLifecycleTest, SubmitRejectsBadSpecsNamingTheField) {
  v1::SubmitJobRequest empty;
  auto r = lifecycle_->Submit(empty);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("spec"));

  v1::SubmitJobRequest bad;
  *bad.mutable_spec() = Spec();
  bad.mutable_spec()->mutable_batch()->set_micro_batch(0);
  r = lifecycle_->Submit(bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("batch.micro_batch"));

  v1::SubmitJobRequest escape;
  *escape.mutable_spec() = Spec();
  escape.mutable_spec()->mutable_data()->mutable_mnist()->set_images(
      "../../etc/passwd");
  EXPECT_EQ(lifecycle_->Submit(escape).status().code(),
            absl::StatusCode::kInvalidArgument);

  v1::SubmitJobRequest unknown;
  *unknown.mutable_spec() = Spec();
  unknown.mutable_spec()
      ->mutable_model()
      ->mutable_mlp()
      ->GetReflection()
      ->MutableUnknownFields(
          unknown.mutable_spec()->mutable_model()->mutable_mlp())
      ->AddVarint(77, 1);
  r = lifecycle_->Submit(unknown);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("spec.model.mlp"));
  EXPECT_THAT(r.status().message(), HasSubstr("77"));

  v1::SubmitJobRequest long_id;
  *long_id.mutable_spec() = Spec();
  long_id.set_request_id(std::string(200, 'x'));
  EXPECT_THAT(lifecycle_->Submit(long_id).status().message(),
              HasSubstr("request_id"));
  EXPECT_TRUE(store_->ListJobs({})->jobs.empty());
}

// A dry run answers what a submission would (the spec with its defaults,
// or the same error) and stores nothing, nor wakes the scheduler.
TEST_F(JobLifecycleTest, ValidateOnlyChecksLikeASubmitAndStoresNothing) {
  const int wakes_before = wakes_;
  v1::SubmitJobRequest dry;
  *dry.mutable_spec() = Spec();
  dry.set_validate_only(true);
  dry.set_request_id("not-used-yet");
  auto ok = lifecycle_->Submit(dry);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_FALSE(ok->already_existed);
  EXPECT_EQ(ok->job.id(), "");
  EXPECT_EQ(ok->job.state(), v1::JOB_STATE_UNSPECIFIED);
  EXPECT_EQ(ok->job.name(), "test");
  EXPECT_EQ(ok->job.tenant(), "default");
  EXPECT_EQ(ok->job.spec().log_every_steps(), 10);  // defaults applied
  EXPECT_TRUE(store_->ListJobs({})->jobs.empty());
  EXPECT_EQ(wakes_, wakes_before);

  v1::SubmitJobRequest bad = dry;
  bad.mutable_spec()->mutable_optimizer()->set_lr(-1);
  auto refused = lifecycle_->Submit(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("optimizer.lr"));

  v1::SubmitJobRequest unknown_dependency = dry;
  unknown_dependency.mutable_spec()->add_depends_on("j-000042");
  auto missing = lifecycle_->Submit(unknown_dependency);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("j-000042 not found"));
  EXPECT_TRUE(store_->ListJobs({})->jobs.empty());

  // A request id a real submission used is checked as the submission
  // would: another spec under it is ALREADY_EXISTS, the same spec names
  // the job it made.
  const std::string first = Submit(0, 0, "req-1");
  v1::SubmitJobRequest reused = dry;
  reused.set_request_id("req-1");
  reused.mutable_spec()->set_steps(99);
  auto conflict = lifecycle_->Submit(reused);
  EXPECT_EQ(conflict.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(conflict.status().message(),
              HasSubstr("request_id: req-1 was already used by job " + first));
  EXPECT_EQ(FieldViolations(conflict.status()).at(0).field, "request_id");
  *reused.mutable_spec() = Job(first).job.spec();
  auto same = lifecycle_->Submit(reused);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE(same->already_existed);
  EXPECT_EQ(same->job.id(), first);
  EXPECT_EQ(store_->ListJobs({})->jobs.size(), 1u);
  EXPECT_EQ(Job(first).job.spec().steps(), 10);
  // Another tenant's request ids are its own.
  v1::SubmitJobRequest theirs = dry;
  theirs.set_request_id("req-1");
  theirs.mutable_spec()->set_steps(99);
  auto other = lifecycle_->Submit(theirs, "team-b");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE(other->already_existed);
}

TEST_F(JobLifecycleTest, FailedWritesReturnErrorsAndChangeNothing) {
  const std::string id = Submit();
  fail_writes_ = true;
  v1::SubmitJobRequest req;
  *req.mutable_spec() = Spec();
  EXPECT_EQ(lifecycle_->Submit(req).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(lifecycle_->Cancel(id, "").status().code(),
            absl::StatusCode::kUnavailable);
  fail_writes_ = false;
  EXPECT_EQ(store_->ListJobs({})->jobs.size(), 1u);
  EXPECT_EQ(Job(id).job.state(), v1::QUEUED);
  EXPECT_EQ(Job(id).last_sequence, 1);
}

TEST_F(JobLifecycleTest, RequestIdMakesSubmitIdempotent) {
  const std::string first = Submit(0, 0, "req-7");
  v1::SubmitJobRequest again;
  *again.mutable_spec() = Spec();
  again.set_request_id("req-7");
  auto r = lifecycle_->Submit(again);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->already_existed);
  EXPECT_EQ(r->job.id(), first);
  again.mutable_spec()->set_steps(99);
  auto different = lifecycle_->Submit(again);
  EXPECT_EQ(different.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(different.status().message(), HasSubstr(first));
}

// yard-train exit 4: it stopped itself because its worker stopped renewing
// the lease. Not the job's failure: it goes back to the queue without
// using a restart.
TEST_F(JobLifecycleTest, ALeaseLostExitRequeuesWithoutARestart) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_EQ(w.Assignments().size(), 1u);
  ASSERT_TRUE(w.Started(id, 1).ok());
  ASSERT_TRUE(w.Exited(id, 1, 4).ok());
  const JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::QUEUED);
  EXPECT_THAT(r.job.state_reason(),
              HasSubstr("stopped on worker w1: the worker stopped renewing "
                        "its lease"));
  EXPECT_EQ(r.job.restarts(), 0);
}

// The worker shut down, and its stop killed the job before the job could
// checkpoint (yard-train still loading, or past the grace period): not the
// job's failure either. Its own crash meanwhile still is one.
TEST_F(JobLifecycleTest, AWorkerShutdownKillRequeuesWithoutARestart) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_EQ(w.Assignments().size(), 1u);
  ASSERT_TRUE(w.Started(id, 1).ok());
  ASSERT_TRUE(w.Update(id, 1, [](v1::JobUpdate& u) {
                 u.mutable_exited()->set_signal(15);
                 u.mutable_exited()->set_error("killed by signal 15");
                 u.mutable_exited()->set_worker_shutdown(true);
               }).ok());
  JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::QUEUED);
  EXPECT_EQ(r.job.state_reason(),
            "stopped on worker w1 as it shut down (signal 15, before the job "
            "checkpointed); will resume from its latest checkpoint");
  EXPECT_EQ(r.job.restarts(), 0);

  Pass();
  ASSERT_TRUE(w.Started(id, 2).ok());
  ASSERT_TRUE(w.Update(id, 2, [](v1::JobUpdate& u) {
                 u.mutable_exited()->set_signal(11);
                 u.mutable_exited()->set_error("killed by signal 11");
               }).ok());
  r = Job(id);
  EXPECT_EQ(r.job.state(), v1::FAILED);
  EXPECT_EQ(r.job.state_reason(), "killed by signal 11");
}

TEST_F(JobLifecycleTest, RunsToSuccessThroughTheWholeProtocol) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  auto assigned = w.Assignments();
  ASSERT_EQ(assigned.size(), 1u);
  EXPECT_EQ(assigned[0].job_id(), id);
  EXPECT_EQ(assigned[0].attempt(), 1);
  EXPECT_EQ(assigned[0].checkpoint_dir(),
            absl::StrCat(dir_.File("ckpt"), "/", id));
  EXPECT_EQ(assigned[0].spec().steps(), 10);
  EXPECT_EQ(Job(id).job.state(), v1::SCHEDULED);
  EXPECT_EQ(Job(id).job.checkpoint_dir(), assigned[0].checkpoint_dir());

  ASSERT_TRUE(w.Started(id, 1).ok());
  EXPECT_EQ(Job(id).job.state(), v1::RUNNING);
  ASSERT_TRUE(w.Update(id, 1, [](v1::JobUpdate& u) {
                 u.mutable_trainer()->mutable_progress()->set_step(5);
                 u.mutable_trainer()->mutable_progress()->set_loss(0.5);
               }).ok());
  ASSERT_TRUE(w.Update(id, 1, [](v1::JobUpdate& u) {
                 u.mutable_trainer()->mutable_eval()->set_accuracy(0.95);
               }).ok());
  ASSERT_TRUE(w.Update(id, 1, [](v1::JobUpdate& u) {
                 u.mutable_trainer()->mutable_checkpoint()->set_step(10);
                 u.mutable_trainer()->mutable_checkpoint()->set_path("/c/10");
               }).ok());
  ASSERT_TRUE(w.Update(id, 1, [](v1::JobUpdate& u) {
                 u.mutable_trainer()->mutable_finished()->set_eval_accuracy(
                     0.96);
               }).ok());
  ASSERT_TRUE(w.Update(id, 1, [](v1::JobUpdate& u) {
                 u.set_log("step 5 loss 0.5\n");
               }).ok());
  JobRecord mid = Job(id);
  EXPECT_EQ(mid.job.progress().step(), 5);
  EXPECT_DOUBLE_EQ(mid.job.last_eval().accuracy(), 0.95);
  EXPECT_EQ(mid.job.last_checkpoint().path(), "/c/10");
  ASSERT_TRUE(w.Exited(id, 1, 0).ok());
  ASSERT_TRUE(w.Update(id, 1, [](v1::JobUpdate& u) {
                 u.set_log("bye\n");
               }).ok());  // late bytes of the same attempt are kept

  JobRecord done = Job(id);
  EXPECT_EQ(done.job.state(), v1::SUCCEEDED);
  EXPECT_DOUBLE_EQ(done.job.result().eval_accuracy(), 0.96);
  EXPECT_TRUE(done.job.has_end_time());
  ASSERT_EQ(done.job.attempts_size(), 1);
  EXPECT_EQ(done.job.attempts(0).outcome(), v1::SUCCEEDED);
  EXPECT_THAT(
      StateChanges(*store_, id),
      ElementsAre(v1::QUEUED, v1::SCHEDULED, v1::RUNNING, v1::SUCCEEDED));
  EXPECT_EQ(store_->ReadLog(id, 0, 1000)->data, "step 5 loss 0.5\nbye\n");
  EXPECT_TRUE(w.link->Take().empty());  // nothing stale was stopped
}

TEST_F(JobLifecycleTest, AnEarlyStopIsASuccessThatSaysSo) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_TRUE(w.Started(id, 1).ok());
  ASSERT_TRUE(w.Update(id, 1, [](v1::JobUpdate& u) {
                 v1::TrainFinished* f = u.mutable_trainer()->mutable_finished();
                 f->set_step(6);
                 f->set_stopped_early(
                     "eval loss did not improve on 0.3 (step 2) for 2 "
                     "evaluations");
               }).ok());
  ASSERT_TRUE(w.Exited(id, 1, 0).ok());
  JobRecord done = Job(id);
  EXPECT_EQ(done.job.state(), v1::SUCCEEDED);
  EXPECT_EQ(done.job.state_reason(),
            "finished: stopped early at step 6 (eval.patience)");
  EXPECT_EQ(done.job.result().step(), 6);
}

TEST_F(JobLifecycleTest, FailedExitRecordsTheErrorTail) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_TRUE(w.Started(id, 1).ok());
  ASSERT_TRUE(w.Exited(id, 1, 1, "RuntimeError: data file is corrupt").ok());
  JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::FAILED);
  EXPECT_EQ(r.job.state_reason(), "RuntimeError: data file is corrupt");
  EXPECT_EQ(r.job.attempts(0).outcome(), v1::FAILED);
}

TEST_F(JobLifecycleTest, FailedAttemptsRestartUntilMaxRestartsIsSpent) {
  const std::string id = SubmitWithRestarts(2);
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_EQ(w.Assignments().size(), 1u);
  ASSERT_TRUE(w.Started(id, 1).ok());
  ASSERT_TRUE(w.Exited(id, 1, 1, "CUDA error: an illegal memory access").ok());
  JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::QUEUED);
  EXPECT_EQ(r.job.state_reason(),
            "restart 1 of 2 in 10s from the latest checkpoint after: CUDA "
            "error: an illegal memory access");
  EXPECT_EQ(r.job.restarts(), 1);
  // The attempt failed, though the job goes on.
  EXPECT_EQ(r.job.attempts(0).outcome(), v1::FAILED);
  EXPECT_EQ(FromProtoTime(r.job.restart_after()),
            clock_.Now() + absl::Seconds(10));

  // It waits out its backoff in the queue, keeping its reason.
  Pass();
  EXPECT_TRUE(w.Assignments().empty());
  AdvanceWithHeartbeats(absl::Seconds(9));
  Pass();
  EXPECT_TRUE(w.Assignments().empty());
  EXPECT_EQ(Job(id).job.state_reason(), r.job.state_reason());
  AdvanceWithHeartbeats(absl::Seconds(1));
  Pass();  // attempt 2 dies by a signal: restarted too, after twice as long
  ASSERT_EQ(w.Assignments().size(), 1u);
  ASSERT_TRUE(w.Started(id, 2).ok());
  ASSERT_TRUE(w.Update(id, 2, [](v1::JobUpdate& u) {
                 u.mutable_exited()->set_signal(11);
               }).ok());
  EXPECT_EQ(Job(id).job.state(), v1::QUEUED);
  EXPECT_THAT(Job(id).job.state_reason(),
              HasSubstr("restart 2 of 2 in 20s from the latest checkpoint "
                        "after: killed by signal 11"));
  AdvanceWithHeartbeats(absl::Seconds(19));
  Pass();
  EXPECT_TRUE(w.Assignments().empty());

  AdvanceWithHeartbeats(absl::Seconds(1));
  Pass();  // attempt 3 fails with no restart left
  ASSERT_TRUE(w.Started(id, 3).ok());
  ASSERT_TRUE(w.Exited(id, 3, 1, "CUDA error: an illegal memory access").ok());
  r = Job(id);
  EXPECT_EQ(r.job.state(), v1::FAILED);
  EXPECT_EQ(r.job.state_reason(), "CUDA error: an illegal memory access");
  EXPECT_EQ(r.job.restarts(), 2);
  ASSERT_EQ(r.job.attempts_size(), 3);
  EXPECT_EQ(r.job.attempts(2).outcome(), v1::FAILED);
}

TEST_F(JobLifecycleTest, UsageErrorsAndRefusalsAreNeverRestarted) {
  const std::string id = SubmitWithRestarts(5);
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_EQ(w.Assignments().size(), 1u);
  ASSERT_TRUE(w.Exited(id, 1, 2, "data.mnist.images: no such file").ok());
  EXPECT_EQ(Job(id).job.state(), v1::FAILED);
  EXPECT_EQ(Job(id).job.restarts(), 0);

  const std::string other = SubmitWithRestarts(5, "refused");
  for (int attempt = 1; attempt <= 3; ++attempt) {
    Pass();
    ASSERT_EQ(w.Assignments().size(), 1u) << "attempt " << attempt;
    ASSERT_TRUE(w.Exited(other, attempt, -1, "cannot create the job dir").ok());
    AdvanceWithHeartbeats(absl::Seconds(2));  // the wait after a refusal
  }
  EXPECT_EQ(Job(other).job.state(), v1::FAILED);
  EXPECT_THAT(Job(other).job.state_reason(), HasSubstr("refusals in a row"));
  EXPECT_EQ(Job(other).job.restarts(), 0);
}

TEST(RestartBackoffTest, DoublesUpToItsCap) {
  const absl::Duration s = absl::Seconds(1);
  EXPECT_EQ(RestartBackoff(10 * s, 1), 10 * s);
  EXPECT_EQ(RestartBackoff(10 * s, 2), 20 * s);
  EXPECT_EQ(RestartBackoff(10 * s, 5), 160 * s);
  EXPECT_EQ(RestartBackoff(10 * s, 6), kMaxRestartBackoff);
  EXPECT_EQ(RestartBackoff(10 * s, 100), kMaxRestartBackoff);
  EXPECT_EQ(RestartBackoff(absl::ZeroDuration(), 3), absl::ZeroDuration());
  // A base over the cap is kept as it is.
  EXPECT_EQ(RestartBackoff(absl::Minutes(10), 4), absl::Minutes(10));
}

// A restart avoids the workers its failed attempts ran on while another has
// room, and goes back to one of them rather than wait when none has.
TEST_F(JobLifecycleTest, ARestartPrefersAWorkerItHasNotFailedOn) {
  const std::string id = SubmitWithRestarts(3);
  FakeWorker& w1 = Connect("w1");
  FakeWorker& w2 = Connect("w2");
  Pass();
  ASSERT_EQ(w1.Assignments().size(), 1u);  // first fit
  ASSERT_TRUE(w1.Started(id, 1).ok());
  ASSERT_TRUE(w1.Exited(id, 1, 1, "CUDA error: uncorrectable ECC error").ok());
  AdvanceWithHeartbeats(absl::Seconds(10));
  Pass();
  EXPECT_TRUE(w1.Assignments().empty());
  ASSERT_EQ(w2.Assignments().size(), 1u);

  // Failed on both: it takes the first that fits again.
  ASSERT_TRUE(w2.Started(id, 2).ok());
  ASSERT_TRUE(w2.Exited(id, 2, 1, "CUDA error: uncorrectable ECC error").ok());
  AdvanceWithHeartbeats(absl::Seconds(20));
  Pass();
  ASSERT_EQ(w1.Assignments().size(), 1u);
  ASSERT_TRUE(w1.Exited(id, 3, 0).ok());
  ASSERT_EQ(Job(id).job.state(), v1::SUCCEEDED);

  // The only other worker is busy: the restart does not wait for it.
  const std::string again = SubmitWithRestarts(1, "again");
  Pass();
  ASSERT_EQ(w1.Assignments().size(), 1u);
  ASSERT_TRUE(w1.Started(again, 1).ok());
  const std::string busy = RunJobOn(w2);
  ASSERT_TRUE(w1.Exited(again, 1, 1, "killed by the OOM killer").ok());
  AdvanceWithHeartbeats(absl::Seconds(10));
  Pass();
  ASSERT_EQ(w1.Assignments().size(), 1u);
  EXPECT_EQ(Job(again).job.worker_id(), "w1");
  EXPECT_EQ(Job(busy).job.worker_id(), "w2");
}

TEST_F(JobLifecycleTest, ExitWithoutStartedStillPassesThroughRunning) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_TRUE(w.Exited(id, 1, 0, "", false).ok());
  EXPECT_THAT(
      StateChanges(*store_, id),
      ElementsAre(v1::QUEUED, v1::SCHEDULED, v1::RUNNING, v1::SUCCEEDED));
}

TEST_F(JobLifecycleTest, InterruptedRunGoesBackToTheQueue) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_TRUE(w.Started(id, 1).ok());
  ASSERT_EQ(w.Assignments().size(), 1u);
  ASSERT_TRUE(w.Exited(id, 1, 3).ok());
  EXPECT_EQ(Job(id).job.state(), v1::QUEUED);
  EXPECT_THAT(Job(id).job.state_reason(), HasSubstr("interrupted"));
  Pass();
  auto again = w.Assignments();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].attempt(), 2);
}

// The state dir moved (or --checkpoint-root changed) while a job was
// queued between attempts: it resumes from its checkpoints where they are
// now, not from its old path (which the worker would create empty).
TEST_F(JobLifecycleTest, AResumedJobFollowsTheCheckpointRootWhereItMoved) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  auto first = w.Assignments();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].checkpoint_dir(), dir_.File("ckpt/" + id));
  ASSERT_TRUE(w.Started(id, 1).ok());
  fs::create_directories(dir_.File("ckpt/" + id + "/step-00000005"));
  ASSERT_TRUE(w.Exited(id, 1, 3).ok());  // interrupted: queued again
  ASSERT_EQ(Job(id).job.state(), v1::QUEUED);

  fs::rename(dir_.File("ckpt"), dir_.File("moved"));
  checkpoint_root_ = dir_.File("moved");
  Boot();
  EXPECT_EQ(Job(id).job.checkpoint_dir(), dir_.File("moved/" + id));
  FakeWorker& back = Connect("w1");
  Pass();
  auto again = back.Assignments();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].attempt(), 2);
  EXPECT_EQ(again[0].checkpoint_dir(), dir_.File("moved/" + id));
  // Its own checkpoints, so not set aside.
  EXPECT_TRUE(fs::exists(dir_.File("moved/" + id + "/step-00000005")));
  EXPECT_FALSE(fs::exists(dir_.File("ckpt")));
}

// A directory of the new job's id that it did not write (left by a job of
// an older or discarded store) is moved aside before its first attempt: a
// job never resumes from another job's checkpoints.
TEST_F(JobLifecycleTest, AFirstAttemptSetsAsideCheckpointsItDidNotWrite) {
  const std::string id = Submit();
  fs::create_directories(dir_.File("ckpt/" + id + "/step-00000300"));
  FakeWorker& w = Connect("w1");
  Pass();
  auto first = w.Assignments();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].checkpoint_dir(), dir_.File("ckpt/" + id));
  EXPECT_FALSE(fs::exists(dir_.File("ckpt/" + id)));
  EXPECT_TRUE(fs::exists(dir_.File("ckpt/" + id + ".stale-1/step-00000300")));
  // What its first attempt writes stays for the next one.
  ASSERT_TRUE(w.Started(id, 1).ok());
  fs::create_directories(dir_.File("ckpt/" + id + "/step-00000010"));
  ASSERT_TRUE(w.Exited(id, 1, 3).ok());
  Pass();
  ASSERT_EQ(w.Assignments().size(), 1u);
  EXPECT_TRUE(fs::exists(dir_.File("ckpt/" + id + "/step-00000010")));
  EXPECT_FALSE(fs::exists(dir_.File("ckpt/" + id + ".stale-2")));
}

TEST_F(JobLifecycleTest, CancelQueuedIsImmediateAndTerminalIsRefused) {
  const std::string id = Submit();
  auto cancelled = lifecycle_->Cancel(id, "");
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::CANCELLED);
  auto again = lifecycle_->Cancel(id, "");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(again.status().message(),
            absl::StrCat("job ", id, " is already CANCELLED"));
  auto unknown = lifecycle_->Cancel("j-999999", "");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), HasSubstr("j-999999"));
}

TEST_F(JobLifecycleTest, CancelScheduledStopsTheAttemptAtOnce) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  w.link->Take();
  ASSERT_EQ(lifecycle_->Cancel(id, "changed my mind")->state(), v1::CANCELLED);
  auto sent = w.link->Take();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].stop_attempt().job_id(), id);
  // The worker's late JobStarted is for a dead attempt: stopped again.
  ASSERT_TRUE(w.Started(id, 1).ok());
  EXPECT_EQ(Job(id).job.state(), v1::CANCELLED);
  ASSERT_EQ(w.link->Take().size(), 1u);
}

TEST_F(JobLifecycleTest, CancelRunningWaitsForTheWorkerToStopIt) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_TRUE(w.Started(id, 1).ok());
  w.link->Take();
  auto r = lifecycle_->Cancel(id, "");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->state(), v1::RUNNING);
  EXPECT_THAT(r->state_reason(), HasSubstr("cancel requested"));
  auto sent = w.link->Take();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].cancel().job_id(), id);
  EXPECT_EQ(sent[0].cancel().attempt(), 1);
  EXPECT_GT(sent[0].cancel().grace_ms(), 0);
  ASSERT_TRUE(w.Exited(id, 1, 3, "", /*cancelled=*/true).ok());
  EXPECT_EQ(Job(id).job.state(), v1::CANCELLED);
  EXPECT_EQ(Job(id).job.state_reason(), "cancelled by user");
}

TEST_F(JobLifecycleTest, CancelRunningOnALostWorkerEndsCancelled) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_TRUE(w.Started(id, 1).ok());
  w.session->Close();  // the stream breaks; the lease still runs
  ASSERT_EQ(lifecycle_->Cancel(id, "")->state(), v1::RUNNING);
  clock_.Advance(kLease + absl::Seconds(1));
  Pass();
  EXPECT_EQ(Job(id).job.state(), v1::CANCELLED);
}

TEST_F(JobLifecycleTest, AFinishedTrainerOnALostWorkerSucceedsNotRequeues) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_TRUE(w.Started(id, 1).ok());
  // TrainFinished arrives (after the final checkpoint), then the worker is
  // silent before its exit is reported.
  ASSERT_TRUE(w.Update(id, 1, [](v1::JobUpdate& u) {
                 u.mutable_trainer()->mutable_finished()->set_step(10);
               }).ok());
  w.session->Close();
  clock_.Advance(kLease + absl::Seconds(1));
  Pass();
  const v1::Job job = Job(id).job;
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.state_reason();
  EXPECT_THAT(job.state_reason(), HasSubstr("worker w1 lost"));
  EXPECT_EQ(job.attempts_size(), 1) << "never run a second time";
}

TEST_F(JobLifecycleTest, HigherPriorityRunsFirstAndSlotsAreNeverOverCommitted) {
  const std::string low = Submit(0);
  const std::string high = Submit(5);
  const std::string low2 = Submit(0);
  FakeWorker& w = Connect("w1", /*slots=*/2);
  Pass();
  auto first = w.Assignments();
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].job_id(), high);
  EXPECT_EQ(first[1].job_id(), low);
  EXPECT_EQ(Job(low2).job.state(), v1::QUEUED);
  EXPECT_THAT(Job(low2).job.state_reason(),
              HasSubstr("waiting for a CPU slot"));
  Pass();  // nothing frees up, nothing more is placed
  EXPECT_TRUE(w.Assignments().empty());
  ASSERT_TRUE(w.Exited(high, 1, 0).ok());
  Pass();
  auto next = w.Assignments();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].job_id(), low2);
}

TEST_F(JobLifecycleTest, InfeasibleJobIsToldAtOnceAndWaitReasonWrittenOnce) {
  const std::string gpu_job = Submit(0, /*gpus=*/2);
  Connect("w1", 1, /*gpus=*/1);
  Pass();
  JobRecord r = Job(gpu_job);
  EXPECT_EQ(r.job.state(), v1::QUEUED);
  EXPECT_THAT(r.job.state_reason(), HasSubstr("infeasible"));
  const auto update_time = r.job.update_time().SerializeAsString();
  clock_.Advance(absl::Seconds(1));
  Pass();
  EXPECT_EQ(Job(gpu_job).job.update_time().SerializeAsString(), update_time);
}

TEST_F(JobLifecycleTest, GpuJobsGetDistinctGpus) {
  const std::string a = Submit(0, 1);
  const std::string b = Submit(0, 1);
  FakeWorker& w = Connect("g1", 0, /*gpus=*/2);
  Pass();
  auto sent = w.Assignments();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_THAT(sent[0].gpu_indices(), ElementsAre(0));
  EXPECT_THAT(sent[1].gpu_indices(), ElementsAre(1));
  EXPECT_EQ(Job(b).gpu_indices, std::vector<int32_t>{1});
  const std::string c = Submit(0, 1);
  ASSERT_TRUE(w.Exited(a, 1, 0).ok());
  Pass();
  sent = w.Assignments();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].job_id(), c);
  EXPECT_THAT(sent[0].gpu_indices(), ElementsAre(0));
}

TEST_F(JobLifecycleTest, UndeliverableAssignmentGoesStraightBack) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  w.link->Take();
  w.link->set_fail_sends(true);
  Pass();
  JobRecord r = Job(id);
  EXPECT_EQ(r.job.state(), v1::QUEUED);
  EXPECT_EQ(r.job.attempt(), 1);
  EXPECT_EQ(r.job.attempts(0).outcome(), v1::QUEUED);
  EXPECT_THAT(r.job.attempts(0).reason(), HasSubstr("went away"));
}

TEST_F(JobLifecycleTest, TrainerEventsOfStaleAttemptsAreIgnoredAndStopped) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_TRUE(w.Started(id, 1).ok());
  w.link->Take();
  ASSERT_TRUE(w.Update(id, 7, [](v1::JobUpdate& u) {
                 u.mutable_trainer()->mutable_progress()->set_step(99);
               }).ok());
  ASSERT_TRUE(w.Update(id, 7, [](v1::JobUpdate& u) { u.set_log("x"); }).ok());
  EXPECT_EQ(Job(id).job.progress().step(), 0);
  EXPECT_EQ(store_->ReadLog(id, 0, 10)->end, 0);
  auto sent = w.link->Take();
  ASSERT_EQ(sent.size(), 1u);  // one StopAttempt per attempt
  EXPECT_EQ(sent[0].stop_attempt().attempt(), 7);
  ASSERT_TRUE(w.Update("j-424242", 1, [](v1::JobUpdate& u) {
                 u.mutable_started();
               }).ok());
  EXPECT_EQ(w.link->Take().size(), 1u);  // unknown jobs are stopped too
  EXPECT_EQ(w.Update(id, 1, [](v1::JobUpdate&) {}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trainyard::server
