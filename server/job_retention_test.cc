// Tests for JobRetention: ended jobs are deleted once the retention period
// has passed since they ended, never earlier and never a job still queued or
// running; a failed deletion is retried; and ParseRetention's format.
#include "server/job_retention.h"

#include <filesystem>
#include <fstream>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_test_fixture.h"

namespace trainyard::server {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class JobRetentionTest : public ServerLogicTest {
 protected:
  // A job run to `code` (0: SUCCEEDED) on w1 with 1000 bytes of
  // checkpoint in its directory.
  std::string FinishedJob(int code = 0) {
    if (w1_ == nullptr) w1_ = &Connect("w1");
    const std::string id = RunJobOn(*w1_);
    std::ofstream(CheckpointFile(id)) << std::string(1000, 'x');
    EXPECT_TRUE(w1_->Exited(id, 1, code).ok());
    return id;
  }

  std::string CheckpointFile(const std::string& id) {
    fs::create_directories(dir_.File("ckpt/" + id));
    return dir_.File("ckpt/" + id + "/latest.json");
  }

  bool Exists(const std::string& id) { return store_->GetJob(id).ok(); }

  JobRetention Retention(absl::Duration keep_for, bool keep_checkpoints) {
    JobRetentionOptions o;
    o.keep_for = keep_for;
    o.keep_checkpoints = keep_checkpoints;
    o.on_deleted = [this](const DeletedJob& d) {
      deleted_bytes_ += d.checkpoint_bytes;
    };
    return JobRetention(store_.get(), lifecycle_.get(), &clock_, o);
  }

  RetentionSweep Sweep(JobRetention& retention) {
    absl::StatusOr<RetentionSweep> sweep = retention.Sweep();
    EXPECT_TRUE(sweep.ok()) << sweep.status();
    return sweep.ok() ? *sweep : RetentionSweep{};
  }

  FakeWorker* w1_ = nullptr;
  int64_t deleted_bytes_ = 0;
};

TEST_F(JobRetentionTest, EndedJobsGoWhenTheirPeriodHasPassedAndNoSooner) {
  const absl::Time t0 = clock_.Now();
  const std::string succeeded = FinishedJob();
  AdvanceWithHeartbeats(absl::Hours(1));
  const std::string failed = FinishedJob(/*code=*/1);
  ASSERT_EQ(Job(failed).job.state(), v1::FAILED);
  const std::string running = RunJobOn(*w1_);
  const std::string queued = Submit(0, /*gpus=*/1);  // never placed
  const std::string cancelled = Submit();
  ASSERT_TRUE(lifecycle_->Cancel(cancelled, "").ok());
  JobRetention retention = Retention(absl::Hours(2), false);

  AdvanceWithHeartbeats(absl::Minutes(59));  // t0 + 1h59m
  RetentionSweep sweep = Sweep(retention);
  EXPECT_EQ(sweep.deleted, 0);
  EXPECT_EQ(sweep.next_expiry, t0 + absl::Hours(2));

  AdvanceWithHeartbeats(absl::Minutes(1));  // t0 + 2h: the first one's is up
  sweep = Sweep(retention);
  EXPECT_EQ(sweep.deleted, 1);
  EXPECT_EQ(sweep.checkpoint_bytes, 1000);
  EXPECT_EQ(deleted_bytes_, 1000);
  EXPECT_FALSE(Exists(succeeded));
  EXPECT_FALSE(fs::exists(dir_.File("ckpt/" + succeeded)));
  EXPECT_TRUE(Exists(failed));
  EXPECT_TRUE(fs::exists(CheckpointFile(failed)));
  EXPECT_EQ(sweep.next_expiry, t0 + absl::Hours(3));

  AdvanceWithHeartbeats(absl::Hours(10));
  sweep = Sweep(retention);
  EXPECT_EQ(sweep.deleted, 2);  // the failed one and the cancelled one
  EXPECT_EQ(sweep.next_expiry, absl::InfiniteFuture());
  EXPECT_FALSE(Exists(failed));
  EXPECT_FALSE(Exists(cancelled));
  EXPECT_TRUE(Exists(running)) << "a job holding a worker is never deleted";
  EXPECT_TRUE(Exists(queued)) << "a queued job is never deleted";
  EXPECT_EQ(Job(running).job.state(), v1::RUNNING);
}

TEST_F(JobRetentionTest, KeepingCheckpointsDeletesOnlyTheRecord) {
  const std::string id = FinishedJob();
  JobRetention retention = Retention(absl::Minutes(5), true);
  clock_.Advance(absl::Minutes(5));
  RetentionSweep sweep = Sweep(retention);
  EXPECT_EQ(sweep.deleted, 1);
  EXPECT_EQ(sweep.checkpoint_bytes, 0);
  EXPECT_FALSE(Exists(id));
  EXPECT_TRUE(fs::exists(CheckpointFile(id)));
}

// The state dir moved after the job ran: the retention frees its
// checkpoints where they are now.
TEST_F(JobRetentionTest, ExpiredJobsCheckpointsGoAfterTheRootMoved) {
  const std::string id = FinishedJob();
  fs::rename(dir_.File("ckpt"), dir_.File("moved"));
  checkpoint_root_ = dir_.File("moved");
  w1_ = nullptr;
  Boot();
  JobRetention retention = Retention(absl::Minutes(5), false);
  clock_.Advance(absl::Minutes(5));
  RetentionSweep sweep = Sweep(retention);
  EXPECT_EQ(sweep.deleted, 1);
  EXPECT_EQ(sweep.checkpoint_bytes, 1000);
  EXPECT_EQ(deleted_bytes_, 1000);
  EXPECT_FALSE(Exists(id));
  EXPECT_TRUE(fs::is_empty(dir_.File("moved")));
}

TEST_F(JobRetentionTest, AFailedDeletionKeepsTheJobWholeAndIsRetried) {
  const std::string id = FinishedJob();
  JobRetention retention = Retention(absl::Minutes(5), false);
  clock_.Advance(absl::Minutes(6));
  fail_writes_ = true;
  RetentionSweep sweep = Sweep(retention);
  EXPECT_EQ(sweep.deleted, 0);
  EXPECT_EQ(sweep.failed, 1);
  EXPECT_TRUE(Exists(id));
  EXPECT_TRUE(fs::exists(CheckpointFile(id)));
  fail_writes_ = false;
  sweep = Sweep(retention);
  EXPECT_EQ(sweep.deleted, 1);
  EXPECT_EQ(sweep.failed, 0);
  EXPECT_FALSE(Exists(id));
}

TEST_F(JobRetentionTest, ASweepDeletesAtMostItsShareAndTheNextFollowsAtOnce) {
  const std::string a = FinishedJob();
  const std::string b = FinishedJob();
  const std::string c = FinishedJob();
  JobRetentionOptions o;
  o.keep_for = absl::Minutes(5);
  o.max_per_sweep = 2;
  JobRetention retention(store_.get(), lifecycle_.get(), &clock_, o);
  AdvanceWithHeartbeats(absl::Minutes(6));
  RetentionSweep sweep = Sweep(retention);
  EXPECT_EQ(sweep.deleted, 2);
  EXPECT_EQ(sweep.next_expiry, clock_.Now()) << "more may be left";
  sweep = Sweep(retention);
  EXPECT_EQ(sweep.deleted, 1);
  EXPECT_EQ(sweep.next_expiry, absl::InfiniteFuture());
  EXPECT_FALSE(Exists(a) || Exists(b) || Exists(c));
}

TEST_F(JobRetentionTest, AJobDeletedByHandMeanwhileIsSkipped) {
  const std::string id = FinishedJob();
  JobRetention retention = Retention(absl::Minutes(5), false);
  clock_.Advance(absl::Minutes(6));
  // The sweep reads the ended jobs before it deletes them; a user's delete
  // between the two is the same as one before the read here.
  ASSERT_TRUE(lifecycle_->Delete(id, false).ok());
  RetentionSweep sweep = Sweep(retention);
  EXPECT_EQ(sweep.deleted, 0);
  EXPECT_EQ(sweep.failed, 0);
}

TEST_F(JobRetentionTest, TheThreadDeletesAJobOnceItExpires) {
  const std::string id = FinishedJob();
  absl::Notification deleted;
  JobRetentionOptions o;
  o.keep_for = absl::Hours(1);
  o.max_sweep_interval = absl::Milliseconds(100);
  o.on_deleted = [&deleted](const DeletedJob&) { deleted.Notify(); };
  JobRetention retention(store_.get(), lifecycle_.get(), &clock_, o);
  retention.Start();
  clock_.Advance(absl::Hours(1));
  EXPECT_TRUE(deleted.WaitForNotificationWithTimeout(absl::Seconds(30)));
  retention.Stop();
  EXPECT_FALSE(Exists(id));
}

TEST(ParseRetentionTest, TakesAWholeNumberWithAUnit) {
  EXPECT_EQ(*ParseRetention("0"), absl::ZeroDuration());
  EXPECT_EQ(*ParseRetention("30d"), absl::Hours(30 * 24));
  EXPECT_EQ(*ParseRetention("36h"), absl::Hours(36));
  EXPECT_EQ(*ParseRetention("90m"), absl::Minutes(90));
  EXPECT_EQ(*ParseRetention("45s"), absl::Seconds(45));
  EXPECT_EQ(*ParseRetention("3650d"), kMaxJobRetention);
}

TEST(ParseRetentionTest, BadValuesAreNamed) {
  for (const char* bad : {"", "7", "d", "1.5d", "-1d", "+1d", "7 d", "1w",
                          "3651d", "99999999999999999999s", "0x10s"}) {
    absl::StatusOr<absl::Duration> d = ParseRetention(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(d.status().message(),
                HasSubstr(absl::StrCat("retention \"", bad, "\"")));
  }
}

}  // namespace
}  // namespace trainyard::server
