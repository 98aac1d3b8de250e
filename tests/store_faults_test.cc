// Store faults with a real yard-server: a full disk under the state dir
// fails writes with RESOURCE_EXHAUSTED while reads and health go on, and
// writes succeed again once space returns, with nothing acknowledged lost;
// a corrupt or foreign state file is refused at start and left untouched,
// and so is a copy of the live store made without its WAL.
//
// The full disk is a small tmpfs mounted for the test; where the test may
// not mount (no CAP_SYS_ADMIN) that test skips.
#include <sys/mount.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/harness.h"

namespace trainyard::itest {
namespace {
namespace v1 = trainyard::v1;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class StoreFaultsTest : public ClusterTest {
 protected:
  void TearDown() override {
    ClusterTest::TearDown();  // the server goes before its disk
    if (!mount_.empty()) umount2(mount_.c_str(), MNT_DETACH);
  }

  // Mounts a tmpfs of `size` at dir()/small; false where not allowed.
  bool MountSmallDisk(const std::string& size) {
    const std::string at = dir().Subdir("small");
    if (mount("tmpfs", at.c_str(), "tmpfs", 0,
              absl::StrCat("size=", size).c_str()) != 0) {
      return false;
    }
    mount_ = at;
    return true;
  }

  // Fills the small disk with a ballast file until the disk is full.
  void FillDisk() {
    std::FILE* f = std::fopen((mount_ + "/ballast").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string chunk(4096, 'x');
    while (std::fwrite(chunk.data(), 1, chunk.size(), f) == chunk.size() &&
           std::fflush(f) == 0) {
    }
    std::fclose(f);
  }

  std::string mount_;
};

TEST_F(StoreFaultsTest, FullDiskFailsWritesServesReadsAndRecovers) {
  if (!MountSmallDisk("4m")) {
    GTEST_SKIP() << "cannot mount a tmpfs here (errno " << errno << ")";
  }
  YARD_ASSERT_OK(StartServer({.state_dir = mount_ + "/state"}));
  const v1::JobSpec spec = MnistSpec{.name = "disk"}.ToProto();
  std::vector<std::string> acked;
  for (int i = 0; i < 5; ++i) {
    YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse r,
                        Submit(spec, absl::StrCat("before-", i)));
    acked.push_back(r.job().id());
  }

  FillDisk();
  // A commit may still fit in pages the WAL already holds; the disk runs
  // out within a bounded number of submissions.
  absl::Status failure;
  std::string failed_request;
  for (int i = 0; i < 5000 && failure.ok(); ++i) {
    failed_request = absl::StrCat("during-", i);
    absl::StatusOr<v1::SubmitJobResponse> r = Submit(spec, failed_request);
    if (r.ok()) {
      acked.push_back(r->job().id());
    } else {
      failure = r.status();
    }
  }
  ASSERT_FALSE(failure.ok()) << "the disk never filled up";
  EXPECT_EQ(failure.code(), absl::StatusCode::kResourceExhausted) << failure;
  EXPECT_NE(failure.message().find("store: "), std::string::npos) << failure;
  EXPECT_NE(failure.message().find("full"), std::string::npos) << failure;

  // Reads and health go on while writes fail.
  YARD_ASSERT_OK(CheckHealth(*stubs().channel));
  YARD_ASSIGN_OR_FAIL(v1::Job first, GetJob(jobs(), acked.front()));
  EXPECT_EQ(first.state(), v1::QUEUED);
  {
    v1::ListJobsRequest req;
    req.set_page_size(500);
    v1::ListJobsResponse resp;
    auto ctx = ContextWithTimeout(RpcTimeout());
    ASSERT_TRUE(jobs().ListJobs(ctx.get(), req, &resp).ok());
    EXPECT_EQ(resp.jobs_size(), static_cast<int>(acked.size()))
        << "the failed submission must leave no job behind";
  }

  // Space returns: the same request now creates a job (it was never
  // stored), and everything acknowledged survives a crash.
  std::filesystem::remove(mount_ + "/ballast");
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse retried,
                      Submit(spec, failed_request));
  EXPECT_FALSE(retried.already_existed());
  acked.push_back(retried.job().id());
  YARD_ASSERT_OK(KillAndRestartServer());
  for (const std::string& id : acked) {
    YARD_ASSIGN_OR_FAIL(v1::Job job, GetJob(jobs(), id));
    EXPECT_EQ(job.state(), v1::QUEUED) << id;
  }
  std::printf("store faults: %zu submissions acknowledged, 1 refused with %s\n",
              acked.size(), failure.ToString().c_str());
}

// Starts yard-server on `state_dir` and expects it to refuse to start.
CommandResult StartRefused(TestDir& dir, const std::string& state_dir) {
  return RunCommand({BinPath("yard-server"), "--listen", "127.0.0.1:0",
                     "--metrics-listen", "", "--state-dir", state_dir},
                    dir.LogPrefix("refused-server"), Scaled(absl::Seconds(30)));
}

TEST_F(StoreFaultsTest, CorruptOrForeignStateFileIsRefusedAndLeftAlone) {
  // Not a database at all.
  const std::string corrupt = dir().Subdir("corrupt");
  std::string garbage = "SQLite format 3";
  garbage.append(8192, '\x5a');
  std::ofstream(corrupt + "/trainyard.db", std::ios::binary) << garbage;
  CommandResult r = StartRefused(dir(), corrupt);
  EXPECT_NE(r.exit_code(), 0) << r.DebugString();
  EXPECT_FALSE(r.timed_out) << r.DebugString();
  EXPECT_NE(r.err.find("trainyard.db"), std::string::npos) << r.DebugString();
  EXPECT_EQ(ReadAll(corrupt + "/trainyard.db"), garbage) << "never overwrite";

  // Another program's SQLite database.
  const std::string foreign = dir().Subdir("foreign");
  CommandResult made =
      RunCommand({"/usr/bin/env", "python3", "-c",
                  "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); "
                  "c.execute('create table accounts(x)'); c.commit()",
                  foreign + "/trainyard.db"},
                 dir().LogPrefix("make-foreign"), Scaled(absl::Seconds(30)));
  if (made.exit_code() != 0) GTEST_SKIP() << "no python3 sqlite3 here";
  const std::string before = ReadAll(foreign + "/trainyard.db");
  r = StartRefused(dir(), foreign);
  EXPECT_NE(r.exit_code(), 0) << r.DebugString();
  EXPECT_NE(r.err.find("not a Trainyard job store"), std::string::npos)
      << r.DebugString();
  EXPECT_EQ(ReadAll(foreign + "/trainyard.db"), before) << "never overwrite";
}

// `cp state/trainyard.db` of a running server copies the file without its
// WAL, which holds nearly everything (the copy has no tables at all). Put
// back beside the old auth.db and checkpoints it must not start as a new
// store numbering jobs from j-000001 again, whose first job would resume
// from the old j-000001's checkpoints: the server refuses, saying how to
// proceed, and leaves the copy as it is.
TEST_F(StoreFaultsTest, ACopyOfTheLiveStoreWithoutItsWalIsRefused) {
  YARD_ASSERT_OK(StartServer());
  const std::string state = server().options().state_dir;
  const v1::JobSpec spec = MnistSpec{.name = "copied"}.ToProto();
  for (int i = 0; i < 3; ++i) {
    YARD_ASSERT_OK(Submit(spec).status());
  }
  const std::string copy = ReadAll(state + "/trainyard.db");  // the cp
  ASSERT_TRUE(server().process().Signal(SIGTERM));
  ASSERT_TRUE(server().process().WaitForExit(StartTimeout()).has_value());
  std::ofstream(state + "/trainyard.db", std::ios::binary | std::ios::trunc)
      << copy;
  // What the old j-000001 left.
  std::filesystem::create_directories(state +
                                      "/checkpoints/j-000001/step-00000300");
  CommandResult r = StartRefused(dir(), state);
  EXPECT_NE(r.exit_code(), 0) << r.DebugString();
  EXPECT_FALSE(r.timed_out) << r.DebugString();
  EXPECT_NE(r.err.find("trainyard.db is not a job store yet"),
            std::string::npos)
      << r.DebugString();
  EXPECT_NE(r.err.find("--new-job-store"), std::string::npos)
      << r.DebugString();
  EXPECT_EQ(ReadAll(state + "/trainyard.db"), copy) << "never overwrite";
}

}  // namespace
}  // namespace trainyard::itest
