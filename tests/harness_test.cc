// Tests of the harness itself (no Trainyard binaries needed): processes are
// started in their own group, waited for with a deadline, and stopped.
#include "tests/harness.h"

#include <signal.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace trainyard::itest {
namespace {

class HarnessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = TestDir::Create("HarnessTest");
    ASSERT_TRUE(d.ok()) << d.status();
    dir_ = std::move(*d);
  }
  std::unique_ptr<TestDir> dir_;
};

TEST_F(HarnessTest, RunCommandCapturesOutputAndExitCode) {
  CommandResult r =
      RunCommand({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"},
                 dir_->LogPrefix("sh"), absl::Seconds(10));
  EXPECT_TRUE(r.status.Exited(3)) << r.DebugString();
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
  EXPECT_FALSE(r.timed_out);
}

TEST_F(HarnessTest, RunCommandKillsAtTheDeadline) {
  CommandResult r =
      RunCommand({"/bin/sh", "-c", "exec sleep 30"}, dir_->LogPrefix("sleep"),
                 absl::Milliseconds(200));
  EXPECT_TRUE(r.timed_out) << r.DebugString();
  EXPECT_TRUE(r.status.Killed(SIGTERM)) << r.DebugString();
}

TEST_F(HarnessTest, MissingProgramIsAClearError) {
  ProcessOptions p;
  p.argv = {BinDir() + "/no-such-program"};
  p.stdout_path = dir_->path() + "/o";
  p.stderr_path = dir_->path() + "/e";
  auto child = ChildProcess::Start(p);
  ASSERT_FALSE(child.ok());
  EXPECT_NE(child.status().message().find("no-such-program"),
            std::string::npos);
}

TEST_F(HarnessTest, StopReachesTheWholeGroupAndChildrenAreVisible) {
  ProcessOptions p;
  p.argv = {"/bin/sh", "-c", "sleep 30 & sleep 30 & wait"};
  p.stdout_path = dir_->path() + "/o";
  p.stderr_path = dir_->path() + "/e";
  auto child = ChildProcess::Start(p);
  ASSERT_TRUE(child.ok()) << child.status();
  std::vector<pid_t> kids;
  // A forked child is named "sh" until it has exec'd sleep.
  YARD_ASSERT_OK(PollUntil("two sleeps", absl::Seconds(10), [&] {
    kids = ChildPidsOf((*child)->pid());
    return kids.size() == 2 && ProcessName(kids[0]) == "sleep" &&
           ProcessName(kids[1]) == "sleep";
  }));
  EXPECT_TRUE((*child)->Running());
  ExitStatus s = (*child)->Stop(absl::Seconds(10));
  EXPECT_TRUE(s.Killed(SIGTERM)) << s.ToString();
  for (pid_t k : kids) {
    YARD_ASSERT_OK(PollUntil(absl::StrCat("pid ", k, " to end"),
                             absl::Seconds(10),
                             [&] { return !ProcessAlive(k); }));
  }
}

TEST_F(HarnessTest, WaitForExitReturnsNulloptWhileRunning) {
  ProcessOptions p;
  p.argv = {"/bin/sh", "-c", "exec sleep 30"};
  p.stdout_path = dir_->path() + "/o";
  p.stderr_path = dir_->path() + "/e";
  auto child = ChildProcess::Start(p);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_FALSE((*child)->WaitForExit(absl::Milliseconds(50)).has_value());
  ExitStatus s = (*child)->Kill();
  EXPECT_TRUE(s.Killed(SIGKILL)) << s.ToString();
}

TEST(PollUntilTest, TimesOutNamingWhatWasAwaited) {
  absl::Status s =
      PollUntil("the moon", absl::Milliseconds(30), [] { return false; });
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("the moon"), std::string::npos);
}

TEST(LastLinesTest, KeepsTheTail) {
  EXPECT_EQ(LastLines("a\nb\nc\n", 2), "b\nc\n");
  EXPECT_EQ(LastLines("a\nb\nc", 5), "a\nb\nc\n");
  EXPECT_EQ(LastLines("", 5), "");
}

}  // namespace
}  // namespace trainyard::itest
