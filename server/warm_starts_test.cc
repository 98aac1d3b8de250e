// Tests for warm starts (spec.warm_start): the submit-time checks, the
// pick of a checkpoint once the source job has ended, its way to the
// worker, the cancel when there is none to start from, and checkpoints kept
// from `yard delete` while a job still needs them.
#include "server/warm_starts.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "engine/core/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_test_fixture.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;

class WarmStartsTest : public ServerLogicTest {
 protected:
  absl::StatusOr<SubmitResult> SubmitFrom(
      const std::string& source, int64_t step = 0, bool best = false,
      const std::string& tenant = "default") {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec();
    req.mutable_spec()->mutable_warm_start()->set_job(source);
    req.mutable_spec()->mutable_warm_start()->set_step(step);
    req.mutable_spec()->mutable_warm_start()->set_best(best);
    return lifecycle_->Submit(req, tenant);
  }
  std::string From(const std::string& source, int64_t step = 0) {
    absl::StatusOr<SubmitResult> r = SubmitFrom(source, step);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job.id() : "";
  }
  // What the trainer of `job` leaves on the checkpoint root.
  void WriteCheckpoint(const std::string& job, int64_t step) {
    const std::string dir = absl::StrCat(Job(job).job.checkpoint_dir(), "/",
                                         engine::CheckpointDirName(step));
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/meta.json") << "{}";
    std::ofstream(dir + "/model.safetensors") << "x";
  }
};

TEST_F(WarmStartsTest, AJobStartsFromTheCheckpointItsSourceEndedWith) {
  FakeWorker& w = Connect("w1", /*slots=*/2);
  const std::string source = RunJobOn(w);
  const std::string next = From(source);
  WriteCheckpoint(source, 5);
  Pass();
  EXPECT_TRUE(w.Assignments().empty()) << "a slot is free, but it must wait";
  EXPECT_EQ(Job(next).job.state_reason(),
            "waiting for job " + source +
                " (RUNNING) to end: it is the warm "
                "start");
  WriteCheckpoint(source, 10);
  ASSERT_TRUE(w.Exited(source, 1, 0).ok());
  Pass();
  const std::vector<v1::Assignment> sent = w.Assignments();
  ASSERT_EQ(sent.size(), 1u);
  const std::string newest =
      Job(source).job.checkpoint_dir() + "/step-00000010";
  EXPECT_EQ(sent[0].warm_start_checkpoint(), newest);
  EXPECT_EQ(Job(next).job.warm_start_checkpoint(), newest);
  EXPECT_EQ(Job(next).job.warm_start_step(), 10);

  // Every later attempt gets the same checkpoint, even one written since.
  WriteCheckpoint(source, 20);
  ASSERT_TRUE(w.Started(next, 1).ok());
  ASSERT_TRUE(w.Exited(next, 1, 1, "crash").ok());
  ASSERT_EQ(Job(next).job.state(), v1::FAILED) << "no restarts allowed";
  const std::string third = From(source, 5);
  Pass();
  ASSERT_EQ(w.Assignments().at(0).warm_start_checkpoint(),
            Job(source).job.checkpoint_dir() + "/step-00000005");
  ASSERT_TRUE(w.Started(third, 1).ok());

  // Its checkpoints are kept while a job needs them.
  absl::StatusOr<DeletedJob> deleted = lifecycle_->Delete(source, false);
  EXPECT_EQ(deleted.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(deleted.status().message(),
            "job " + source + "'s checkpoints are the warm start of job " +
                third +
                " (RUNNING): delete it with --keep-checkpoints, or once that "
                "job has ended");
  EXPECT_TRUE(std::filesystem::exists(newest + "/meta.json"));
  EXPECT_EQ(Job(source).job.state(), v1::SUCCEEDED) << "nothing deleted";
  ASSERT_TRUE(w.Exited(third, 1, 0).ok());
  EXPECT_TRUE(lifecycle_->Delete(source, false).ok());
  EXPECT_FALSE(std::filesystem::exists(newest));
}

TEST_F(WarmStartsTest, AJobWithNoCheckpointToStartFromIsCancelled) {
  FakeWorker& w = Connect("w1", /*slots=*/2);
  const std::string source = RunJobOn(w);
  const std::string newest = From(source);
  const std::string step = From(source, 7);
  absl::StatusOr<SubmitResult> best = SubmitFrom(source, 0, /*best=*/true);
  ASSERT_TRUE(best.ok()) << best.status();
  WriteCheckpoint(source, 5);
  ASSERT_TRUE(w.Exited(source, 1, 1, "crash").ok());
  Pass();
  EXPECT_EQ(Job(newest).job.state(), v1::SCHEDULED) << "a failed run's "
                                                       "checkpoint serves";
  EXPECT_EQ(Job(step).job.state(), v1::CANCELLED);
  EXPECT_EQ(Job(step).job.state_reason(),
            "warm_start: job " + source +
                " has no checkpoint of step 7 (it has steps 5)");
  EXPECT_EQ(Job(best->job.id()).job.state(), v1::CANCELLED);
  EXPECT_THAT(Job(best->job.id()).job.state_reason(),
              HasSubstr("has no best checkpoint"));

  // A source deleted before the pass saw it end (its checkpoints kept).
  const std::string other = Submit(0, /*gpus=*/1);  // never placed
  const std::string orphan = From(other);
  ASSERT_TRUE(lifecycle_->Cancel(other, "").ok());
  ASSERT_TRUE(lifecycle_->Delete(other, /*keep_checkpoints=*/true).ok());
  Pass();
  EXPECT_EQ(Job(orphan).job.state(), v1::CANCELLED);
  EXPECT_EQ(Job(orphan).job.state_reason(), "warm_start: job " + other +
                                                " was deleted before this job "
                                                "started");
}

TEST_F(WarmStartsTest, SubmitRefusesASourceThatCannotServe) {
  absl::StatusOr<SubmitResult> r = SubmitFrom("j-999999");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "warm_start.job: job j-999999 not found");

  const std::string theirs = Submit();  // the "default" tenant's
  r = SubmitFrom(theirs, 0, false, "team-b");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "warm_start.job: job " + theirs + " not found");

  // Ended without a checkpoint: refused now, not cancelled later.
  ASSERT_TRUE(lifecycle_->Cancel(theirs, "").ok());
  r = SubmitFrom(theirs);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(),
            "warm_start: job " + theirs + " has no checkpoint yet");
  r = SubmitFrom(theirs, 3, true);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "warm_start.best: not with warm_start.step: give one or the other");
  auto page = store_->ListJobs({});
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->jobs.size(), 1u) << "no refused job was stored";
}

TEST(CheckWarmStartsTest, UnreadableCheckpointsKeepTheJobWaiting) {
  TestDir dir;
  const std::string not_a_dir = dir.File("file");
  std::ofstream(not_a_dir) << "x";
  JobRecord r;
  r.job.set_id("j-2");
  r.job.set_state(v1::QUEUED);
  r.job.mutable_spec()->mutable_warm_start()->set_job("j-1");
  WarmStartCheck c = CheckWarmStarts({r}, [&](const std::string& id) {
    v1::Job source;
    source.set_id(id);
    source.set_state(v1::SUCCEEDED);
    source.set_checkpoint_dir(not_a_dir);
    return absl::StatusOr<v1::Job>(source);
  });
  EXPECT_TRUE(c.failures.empty()) << c.failures[0].reason;
  ASSERT_EQ(c.waits.size(), 1u);
  EXPECT_THAT(c.waits[0].reason,
              HasSubstr("waiting to read the checkpoints of job j-1, its warm "
                        "start: warm_start: job j-1: cannot open its "
                        "checkpoint directory"));
}

TEST(CheckWarmStartsTest, AStoreErrorKeepsTheJobWaiting) {
  JobRecord r;
  r.job.set_id("j-2");
  r.job.set_state(v1::QUEUED);
  r.job.mutable_spec()->mutable_warm_start()->set_job("j-1");
  JobRecord picked = r;
  picked.job.set_id("j-3");
  picked.job.set_warm_start_checkpoint("/ck/j-1/step-00000001");
  JobRecord plain;
  plain.job.set_id("j-4");
  WarmStartCheck c =
      CheckWarmStarts({r, picked, plain}, [](const std::string&) {
        return absl::StatusOr<v1::Job>(absl::UnavailableError("disk I/O"));
      });
  ASSERT_EQ(c.waits.size(), 1u);
  EXPECT_EQ(c.waits[0].job_id, "j-2");
  EXPECT_EQ(c.waits[0].reason,
            "waiting for job j-1 (state unknown: disk I/O) to end: it is the "
            "warm start");
  EXPECT_TRUE(c.failures.empty());
  EXPECT_TRUE(c.picks.empty());
}

}  // namespace
}  // namespace trainyard::server
