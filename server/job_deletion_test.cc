// Tests for JobLifecycle::Delete and SweepDeletedCheckpoints: a finished
// job goes with its checkpoints, anything else is refused, and no failure
// loses or half-deletes a job.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/job_lifecycle.h"
#include "server/server_test_fixture.h"

namespace trainyard::server {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

void WriteFile(const fs::path& path, size_t bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << std::string(bytes, 'x');
}

class JobDeletionTest : public ServerLogicTest {
 protected:
  // A job run to `code` (0: SUCCEEDED) on w1, with `bytes` of checkpoint
  // files in its checkpoint dir (two files, one in a subdirectory).
  std::string FinishedJob(int code = 0, size_t bytes = 3000) {
    if (w1_ == nullptr) w1_ = &Connect("w1");
    const std::string id = RunJobOn(*w1_);
    const std::string dir = Job(id).job.checkpoint_dir();
    EXPECT_EQ(dir, dir_.File("ckpt/" + id));
    WriteFile(fs::path(dir) / "step_00000010" / "model.safetensors",
              bytes - 1000);
    WriteFile(fs::path(dir) / "latest.json", 1000);
    EXPECT_TRUE(w1_->Exited(id, 1, code).ok());
    return id;
  }

  FakeWorker* w1_ = nullptr;
};

TEST_F(JobDeletionTest, AFinishedJobGoesWithItsCheckpoints) {
  const std::string done = FinishedJob();
  const std::string failed = FinishedJob(/*code=*/1);
  ASSERT_EQ(Job(failed).job.state(), v1::FAILED);
  for (const std::string& id : {done, failed}) {
    absl::StatusOr<DeletedJob> deleted = lifecycle_->Delete(id, false);
    ASSERT_TRUE(deleted.ok()) << deleted.status();
    EXPECT_EQ(deleted->checkpoint_dir, dir_.File("ckpt/" + id));
    EXPECT_EQ(deleted->checkpoint_bytes, 3000);
    EXPECT_FALSE(fs::exists(dir_.File("ckpt/" + id)));
    EXPECT_EQ(store_->GetJob(id).status().code(), absl::StatusCode::kNotFound);
  }
  EXPECT_TRUE(fs::is_empty(dir_.File("ckpt")));
  absl::StatusOr<DeletedJob> again = lifecycle_->Delete(done, false);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kNotFound);
}

// A user's delete and the retention's may meet on the same job: exactly
// one deletes it, the other finds it gone, and no directory is left behind
// or moved back.
TEST_F(JobDeletionTest, ConcurrentDeletesOfOneJobDeleteItOnce) {
  std::vector<std::string> ids;
  for (int i = 0; i < 30; ++i) ids.push_back(FinishedJob());
  std::atomic<int> deleted = 0, not_found = 0, other = 0;
  auto delete_all = [&] {
    for (const std::string& id : ids) {
      absl::StatusOr<DeletedJob> d = lifecycle_->Delete(id, false);
      if (d.ok()) {
        ++deleted;
      } else if (absl::IsNotFound(d.status())) {
        ++not_found;
      } else {
        ++other;
        ADD_FAILURE() << id << ": " << d.status();
      }
    }
  };
  std::thread a(delete_all), b(delete_all);
  a.join();
  b.join();
  EXPECT_EQ(deleted, 30);
  EXPECT_EQ(not_found, 30);
  EXPECT_EQ(other, 0);
  EXPECT_TRUE(fs::is_empty(dir_.File("ckpt")));
}

TEST_F(JobDeletionTest, KeepCheckpointsLeavesTheDirectory) {
  const std::string id = FinishedJob();
  absl::StatusOr<DeletedJob> deleted = lifecycle_->Delete(id, true);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->checkpoint_dir, "");
  EXPECT_EQ(deleted->checkpoint_bytes, 0);
  EXPECT_TRUE(fs::exists(dir_.File("ckpt/" + id + "/latest.json")));
  EXPECT_EQ(store_->GetJob(id).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobDeletionTest, AJobThatHasNotEndedIsRefusedAndKept) {
  const std::string queued = Submit();
  absl::StatusOr<DeletedJob> refused = lifecycle_->Delete(queued, false);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr(queued + " is QUEUED: only a job that has ended"));

  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_TRUE(w.Started(queued, 1).ok());
  WriteFile(dir_.File("ckpt/" + queued + "/latest.json"), 10);
  refused = lifecycle_->Delete(queued, false);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("is RUNNING"));
  EXPECT_EQ(Job(queued).job.state(), v1::RUNNING);
  EXPECT_TRUE(fs::exists(dir_.File("ckpt/" + queued + "/latest.json")));
  EXPECT_EQ(lifecycle_->Delete("", false).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(JobDeletionTest, AFailedStoreWriteLeavesJobAndCheckpointsWhole) {
  const std::string id = FinishedJob();
  fail_writes_ = true;
  absl::StatusOr<DeletedJob> deleted = lifecycle_->Delete(id, false);
  fail_writes_ = false;
  EXPECT_EQ(deleted.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Job(id).job.state(), v1::SUCCEEDED);
  EXPECT_TRUE(fs::exists(dir_.File("ckpt/" + id + "/latest.json")));
  EXPECT_FALSE(fs::exists(dir_.File("ckpt/.deleting-" + id)));
  ASSERT_TRUE(lifecycle_->Delete(id, false).ok());
}

// Only the job's own directory, CHECKPOINT_ROOT/<id>, is removed, whatever
// path its record holds; a symlink there is removed as a link, never
// followed; and a job that never started owns no directory there.
TEST_F(JobDeletionTest, NeverRemovesWhatTheServerDidNotName) {
  const std::string moved = FinishedJob();
  ASSERT_TRUE(store_
                  ->UpdateJob(moved, Durability::kTransition,
                              [&](JobRecord& r, auto&) {
                                r.job.set_checkpoint_dir(
                                    dir_.File("elsewhere"));
                                return true;
                              })
                  .ok());
  WriteFile(dir_.File("elsewhere/latest.json"), 10);
  absl::StatusOr<DeletedJob> deleted = lifecycle_->Delete(moved, false);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->checkpoint_dir, dir_.File("ckpt/" + moved));
  EXPECT_FALSE(fs::exists(dir_.File("ckpt/" + moved)));
  EXPECT_TRUE(fs::exists(dir_.File("elsewhere/latest.json")));

  const std::string never_started = Submit();
  ASSERT_TRUE(lifecycle_->Cancel(never_started, "").ok());
  WriteFile(dir_.File("ckpt/" + never_started + "/latest.json"), 10);
  deleted = lifecycle_->Delete(never_started, false);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->checkpoint_dir, "");
  EXPECT_TRUE(fs::exists(dir_.File("ckpt/" + never_started + "/latest.json")));
  fs::remove_all(dir_.File("ckpt/" + never_started));

  const std::string linked = FinishedJob();
  const fs::path own = dir_.File("ckpt/" + linked);
  fs::rename(own, dir_.File("target"));
  fs::create_directory_symlink(dir_.File("target"), own);
  deleted = lifecycle_->Delete(linked, false);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->checkpoint_dir, own.string());
  EXPECT_FALSE(fs::exists(fs::symlink_status(own)));
  EXPECT_TRUE(fs::exists(dir_.File("target/latest.json")));
}

// The state dir moved (or --checkpoint-root changed) after the job ran:
// deleting it removes its directory where it is now.
TEST_F(JobDeletionTest, ADeletionAfterTheRootMovedRemovesTheDirectoryThere) {
  const std::string id = FinishedJob();
  fs::rename(dir_.File("ckpt"), dir_.File("moved"));
  checkpoint_root_ = dir_.File("moved");
  w1_ = nullptr;
  Boot();
  absl::StatusOr<DeletedJob> deleted = lifecycle_->Delete(id, false);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->checkpoint_dir, dir_.File("moved/" + id));
  EXPECT_EQ(deleted->checkpoint_bytes, 3000);
  EXPECT_TRUE(fs::is_empty(dir_.File("moved")));
}

TEST(SweepDeletedCheckpointsTest, RemovesOnlyDirectoriesMovedAsideToDelete) {
  TestDir dir;
  WriteFile(dir.File(".deleting-j-000001/step/model.safetensors"), 10);
  WriteFile(dir.File(".deleting-j-000002/latest.json"), 10);
  WriteFile(dir.File("j-000003/latest.json"), 10);
  EXPECT_EQ(SweepDeletedCheckpoints(dir.path()), 2);
  EXPECT_FALSE(fs::exists(dir.File(".deleting-j-000001")));
  EXPECT_TRUE(fs::exists(dir.File("j-000003/latest.json")));
  EXPECT_EQ(SweepDeletedCheckpoints(dir.File("missing")), 0);
}

}  // namespace
}  // namespace trainyard::server
