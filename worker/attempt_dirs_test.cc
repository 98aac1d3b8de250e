// Tests for PruneAttemptDirs: the most recently used ended attempts stay,
// running ones and anything that is not an attempt directory are never
// touched, and job directories left empty go.
#include "worker/attempt_dirs.h"

#include <filesystem>
#include <fstream>

#include "common/test_dir.h"
#include "gtest/gtest.h"
#include "worker/test_scripts.h"

namespace trainyard::worker {
namespace {

namespace fs = std::filesystem;

class PruneAttemptDirsTest : public ::testing::Test {
 protected:
  // jobs/<job>/<attempt> with a log last written `age_s` seconds ago (the
  // directory itself older still).
  fs::path Attempt(const std::string& job, int attempt, int age_s) {
    const fs::path dir = fs::path(jobs_) / job / std::to_string(attempt);
    fs::create_directories(dir);
    std::ofstream(dir / "spec.json") << "{}";
    std::ofstream(dir / "log") << "a log line\n";
    const auto now = fs::file_time_type::clock::now();
    fs::last_write_time(dir, now - std::chrono::hours(100));
    fs::last_write_time(dir / "log", now - std::chrono::seconds(age_s));
    return dir;
  }

  TestDir tmp_;
  const std::string jobs_ = tmp_.File("jobs");
};

TEST_F(PruneAttemptDirsTest, KeepsTheLastUsedEndedAttemptsAndTheRunningOnes) {
  const fs::path old1 = Attempt("j-1", 1, 500);
  const fs::path old2 = Attempt("j-1", 2, 400);
  const fs::path recent = Attempt("j-2", 1, 10);
  const fs::path middle = Attempt("j-3", 1, 100);
  const fs::path running = Attempt("j-4", 1, 9000);  // quiet, but running
  EXPECT_EQ(PruneAttemptDirs(jobs_, {{"j-4", 1}}, /*keep=*/2), 2);
  EXPECT_FALSE(fs::exists(old1));
  EXPECT_FALSE(fs::exists(old2));
  EXPECT_FALSE(fs::exists(fs::path(jobs_) / "j-1")) << "left empty: removed";
  EXPECT_TRUE(fs::exists(recent / "log"));
  EXPECT_TRUE(fs::exists(middle / "log"));
  EXPECT_TRUE(fs::exists(running / "log"));
  EXPECT_EQ(PruneAttemptDirs(jobs_, {{"j-4", 1}}, 2), 0);
  EXPECT_EQ(PruneAttemptDirs(jobs_, {{"j-4", 1}}, 0), 2);
  EXPECT_TRUE(fs::exists(running / "log"));
  EXPECT_EQ(PruneAttemptDirs(jobs_, {}, 0), 1);
  EXPECT_TRUE(fs::is_empty(jobs_));
}

TEST_F(PruneAttemptDirsTest, LeavesWhatIsNotAnAttemptDirectory) {
  const fs::path attempt = Attempt("j-1", 1, 50);
  const fs::path checkpoints = fs::path(jobs_) / "j-1" / "checkpoints";
  fs::create_directories(checkpoints);
  std::ofstream(checkpoints / "latest") << "step-10";
  std::ofstream(fs::path(jobs_) / "j-1" / "note") << "kept";
  std::ofstream(fs::path(jobs_) / "stray") << "kept";
  fs::create_directories(tmp_.File("elsewhere/1"));
  fs::create_directory_symlink(tmp_.File("elsewhere"),
                               fs::path(jobs_) / "j-link");
  EXPECT_EQ(PruneAttemptDirs(jobs_, {}, 0), 1);
  EXPECT_FALSE(fs::exists(attempt));
  EXPECT_TRUE(fs::exists(checkpoints / "latest"));
  EXPECT_TRUE(fs::exists(fs::path(jobs_) / "j-1" / "note"));
  EXPECT_TRUE(fs::exists(fs::path(jobs_) / "stray"));
  EXPECT_TRUE(fs::exists(tmp_.File("elsewhere/1"))) << "links not followed";
}

TEST_F(PruneAttemptDirsTest, AMissingJobsDirectoryIsNothingToDo) {
  EXPECT_EQ(PruneAttemptDirs(tmp_.File("none"), {}, 0), 0);
}

}  // namespace
}  // namespace trainyard::worker
