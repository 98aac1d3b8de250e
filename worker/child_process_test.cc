#include "worker/child_process.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::worker {
namespace {

using ::testing::HasSubstr;

SpawnRequest Shell(const std::string& script) {
  SpawnRequest r;
  r.path = "/bin/sh";
  r.argv = {"/bin/sh", "-c", script};
  r.env = EnvironmentWith({"FOO=bar"});
  return r;
}

// Reads `fd` to end of file; false if that takes longer than `timeout`.
bool ReadAll(int fd, std::string& out, int timeout_ms = 10'000) {
  char buf[4096];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) return true;
    out.append(buf, static_cast<size_t>(n));
  }
}

// Waits for the child to exit, up to `timeout_ms`.
bool AwaitExit(ChildProcess& child, int timeout_ms = 10'000) {
  pollfd p{child.pid_fd(), POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1;
}

TEST(ChildProcessTest, CapturesOutputAndExitCode) {
  auto child =
      SpawnChild(Shell("echo out; echo err >&2; echo \"$FOO\"; cat; exit 4"));
  ASSERT_TRUE(child.ok()) << child.status();
  std::string out, err;
  ASSERT_TRUE(ReadAll((*child)->stdout_fd(), out));
  ASSERT_TRUE(ReadAll((*child)->stderr_fd(), err));
  EXPECT_EQ(out, "out\nbar\n");  // stdin is /dev/null: cat ends at once
  EXPECT_EQ(err, "err\n");
  const ExitStatus status = (*child)->Wait();
  EXPECT_EQ(status.exit_code, 4);
  EXPECT_EQ(status.signal, 0);
  EXPECT_EQ(DescribeExit(status), "exited with code 4");
}

TEST(ChildProcessTest, MissingExecutableIsAnError) {
  SpawnRequest r = Shell("true");
  r.path = "/nonexistent/yard-train";
  auto child = SpawnChild(r);
  ASSERT_FALSE(child.ok());
  EXPECT_THAT(child.status().message(),
              HasSubstr("cannot execute /nonexistent/yard-train"));
  EXPECT_THAT(child.status().message(), HasSubstr("No such file or directory"));
}

TEST(ChildProcessTest, BadWorkingDirectoryIsAnError) {
  SpawnRequest r = Shell("true");
  r.cwd = "/nonexistent-dir";
  auto child = SpawnChild(r);
  ASSERT_FALSE(child.ok());
  EXPECT_THAT(child.status().message(),
              HasSubstr("cannot enter directory /nonexistent-dir"));
}

TEST(ChildProcessTest, EmptyRequestIsAnError) {
  EXPECT_FALSE(SpawnChild(SpawnRequest{}).ok());
}

TEST(ChildProcessTest, RunsInItsOwnProcessGroupAndDiesWithIt) {
  // The shell's background sleep holds stdout open: end of file means the
  // whole group is gone.
  auto child = SpawnChild(Shell("sleep 1000 & echo started; wait"));
  ASSERT_TRUE(child.ok()) << child.status();
  char c;
  ASSERT_EQ(read((*child)->stdout_fd(), &c, 1), 1);
  EXPECT_EQ(getpgid((*child)->pid()), (*child)->pid());
  EXPECT_FALSE((*child)->HasExited());
  (*child)->SignalGroup(SIGKILL);
  std::string rest;
  EXPECT_TRUE(ReadAll((*child)->stdout_fd(), rest));
  // The pipes close a moment before the kernel marks the process exited.
  EXPECT_TRUE(AwaitExit(**child));
  EXPECT_TRUE((*child)->HasExited());
  const ExitStatus status = (*child)->Wait();
  EXPECT_EQ(status.signal, SIGKILL);
  EXPECT_THAT(DescribeExit(status), HasSubstr("killed by signal 9"));
}

TEST(ChildProcessTest, ChildSeesSigtermThatTheParentBlocks) {
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, &old);
  auto child = SpawnChild(Shell("echo ready; exec sleep 1000"));
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(child.ok()) << child.status();
  std::string out;
  char c;
  ASSERT_EQ(read((*child)->stdout_fd(), &c, 1), 1);
  (*child)->SignalGroup(SIGTERM);
  const bool exited = AwaitExit(**child);
  if (!exited) (*child)->SignalGroup(SIGKILL);
  EXPECT_TRUE(exited);
  EXPECT_EQ((*child)->Wait().signal, SIGTERM);
}

// PR_SET_PDEATHSIG follows the spawning thread: when it ends, the kernel
// kills the child. (This is why every job is spawned on its own thread.)
TEST(ChildProcessTest, DiesWhenTheSpawningThreadEnds) {
  std::unique_ptr<ChildProcess> child;
  std::thread spawner([&child] {
    auto spawned = SpawnChild(Shell("exec sleep 1000"));
    if (spawned.ok()) child = *std::move(spawned);
  });
  spawner.join();
  ASSERT_NE(child, nullptr);
  const bool exited = AwaitExit(*child);
  if (!exited) child->SignalGroup(SIGKILL);
  EXPECT_TRUE(exited);
  EXPECT_EQ(child->Wait().signal, SIGKILL);
}

TEST(EnvironmentWithTest, ReplacesAndAdds) {
  setenv("YARD_TEST_VAR", "old", 1);
  auto env = EnvironmentWith({"YARD_TEST_VAR=new", "YARD_OTHER=1"});
  int seen = 0;
  for (const std::string& kv : env) {
    if (kv.rfind("YARD_TEST_VAR=", 0) == 0) {
      EXPECT_EQ(kv, "YARD_TEST_VAR=new");
      ++seen;
    }
  }
  EXPECT_EQ(seen, 1);
  EXPECT_THAT(env, ::testing::Contains("YARD_OTHER=1"));
  unsetenv("YARD_TEST_VAR");
}

}  // namespace
}  // namespace trainyard::worker
