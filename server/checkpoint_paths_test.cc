#include "server/checkpoint_paths.h"

#include <filesystem>
#include <fstream>

#include "common/test_dir.h"
#include "gtest/gtest.h"

namespace trainyard::server {
namespace {

namespace fs = std::filesystem;

void WriteFile(const fs::path& path) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << "x";
}

TEST(CheckpointPathsTest, JobNumbersAreReadOnlyFromJobIds) {
  EXPECT_EQ(JobNumberOf("j-000042"), 42);
  EXPECT_EQ(JobNumberOf("j-1234567"), 1234567);
  EXPECT_EQ(JobNumberOf("j-42"), std::nullopt);  // not how ids are written
  EXPECT_EQ(JobNumberOf("j-000000"), std::nullopt);
  EXPECT_EQ(JobNumberOf(".deleting-j-000001"), std::nullopt);
  EXPECT_EQ(JobNumberOf("j-000001.stale-1"), std::nullopt);
  EXPECT_EQ(JobNumberOf("j-00000x"), std::nullopt);
  EXPECT_EQ(JobNumberOf(".yard-server.lock"), std::nullopt);
  EXPECT_EQ(JobNumberOf("j-9223372036854775807"), std::nullopt);
}

// A store that moved with its state dir: the job's directory and its
// checkpoints' paths follow the root it runs under now.
TEST(CheckpointPathsTest, AJobsPathsFollowTheCurrentRoot) {
  v1::Job job;
  job.set_id("j-000007");
  job.set_checkpoint_dir("/old/state/checkpoints/j-000007");
  job.mutable_last_checkpoint()->set_path(
      "/old/state/checkpoints/j-000007/step-00000300");
  job.mutable_result()->set_checkpoint_path(
      "/old/state/checkpoints/j-000007/step-00000300");
  job.mutable_result()->set_best_checkpoint_path(
      "/old/state/checkpoints/j-000007/step-00000200");
  job.mutable_spec()->mutable_warm_start()->set_job("j-000003");
  job.set_warm_start_checkpoint(
      "/old/state/checkpoints/j-000003/step-00000100");
  PlaceCheckpointsUnder("/new/ckpt", job);
  EXPECT_EQ(job.checkpoint_dir(), "/new/ckpt/j-000007");
  EXPECT_EQ(job.last_checkpoint().path(), "/new/ckpt/j-000007/step-00000300");
  EXPECT_EQ(job.result().checkpoint_path(), "/new/ckpt/j-000007/step-00000300");
  EXPECT_EQ(job.result().best_checkpoint_path(),
            "/new/ckpt/j-000007/step-00000200");
  EXPECT_EQ(job.warm_start_checkpoint(), "/new/ckpt/j-000003/step-00000100");

  // Whatever was stored, the directory is ROOT/<id>; a path outside the
  // old directory is left as the trainer wrote it.
  job.set_checkpoint_dir("/somewhere/else");
  job.mutable_last_checkpoint()->set_path("/tmp/elsewhere/step-1");
  PlaceCheckpointsUnder("/new/ckpt", job);
  EXPECT_EQ(job.checkpoint_dir(), "/new/ckpt/j-000007");
  EXPECT_EQ(job.last_checkpoint().path(), "/tmp/elsewhere/step-1");

  // A job that never started has no directory; no root changes nothing.
  v1::Job queued;
  queued.set_id("j-000008");
  PlaceCheckpointsUnder("/new/ckpt", queued);
  EXPECT_EQ(queued.checkpoint_dir(), "");
  job.set_checkpoint_dir("/old/j-000007");
  PlaceCheckpointsUnder("", job);
  EXPECT_EQ(job.checkpoint_dir(), "/old/j-000007");
}

TEST(CheckpointPathsTest, FindsTheJobDirectoriesOfARoot) {
  TestDir dir;
  WriteFile(dir.File("j-000002/step-00000010/meta.json"));
  WriteFile(dir.File("j-000011/latest.json"));
  WriteFile(dir.File(".deleting-j-000099/x"));
  WriteFile(dir.File("j-000050.stale-1/x"));
  WriteFile(dir.File(".yard-server.lock"));
  absl::StatusOr<JobDirs> found = FindJobDirs(dir.path());
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->count, 2);
  EXPECT_EQ(found->highest, 11);
  found = FindJobDirs(dir.File("missing"));
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->count, 0);
  EXPECT_EQ(found->highest, 0);
}

TEST(CheckpointPathsTest, AFirstAttemptNeverStartsOnAnotherJobsCheckpoints) {
  TestDir dir;
  // Nothing there, or an empty directory: nothing to move.
  EXPECT_EQ(*SetAsideStaleCheckpoints(dir.path(), "j-000001"), "");
  fs::create_directory(dir.File("j-000001"));
  EXPECT_EQ(*SetAsideStaleCheckpoints(dir.path(), "j-000001"), "");
  EXPECT_TRUE(fs::exists(dir.File("j-000001")));

  WriteFile(dir.File("j-000002/step-00000300/model.safetensors"));
  WriteFile(dir.File("j-000002.stale-1/kept"));  // set aside before
  absl::StatusOr<std::string> aside =
      SetAsideStaleCheckpoints(dir.path(), "j-000002");
  ASSERT_TRUE(aside.ok()) << aside.status();
  EXPECT_EQ(*aside, dir.File("j-000002.stale-2"));
  EXPECT_FALSE(fs::exists(dir.File("j-000002")));
  EXPECT_TRUE(fs::exists(dir.File("j-000002.stale-2/step-00000300")));
  EXPECT_TRUE(fs::exists(dir.File("j-000002.stale-1/kept")));

  // A symlink planted there is moved as a link, never followed.
  WriteFile(dir.File("target/file"));
  fs::create_directory_symlink(dir.File("target"), dir.File("j-000003"));
  aside = SetAsideStaleCheckpoints(dir.path(), "j-000003");
  ASSERT_TRUE(aside.ok()) << aside.status();
  EXPECT_TRUE(fs::is_symlink(*aside));
  EXPECT_TRUE(fs::exists(dir.File("target/file")));
}

}  // namespace
}  // namespace trainyard::server
