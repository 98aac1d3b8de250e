// The yard-worker binary itself, as a process: usage errors, SIGTERM (jobs
// checkpoint, exits reported, exit 0) and SIGKILL (its jobs die with it).
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/child_process.h"
#include "worker/fake_worker_service.h"
#include "worker/test_scripts.h"

namespace trainyard::worker {
namespace {

using testing::FakeServer;
using testing::FakeServerHub;
using testing::FindUpdate;
using ::testing::HasSubstr;
using testing::Received;
using trainyard::v1::JobUpdate;

// Polls a pidfd (or any fd) for readability until the timeout.
bool AwaitReadable(int fd, int timeout_ms = 20'000) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1;
}

// `token`: the YARD_TOKEN the worker sees (the fake server checks none).
std::unique_ptr<ChildProcess> RunWorker(std::vector<std::string> args,
                                        const std::string& token = "join") {
  SpawnRequest r;
  r.path = YARD_WORKER_BIN;
  // Tests run side by side: never the fixed default metrics port.
  r.argv = {r.path, "--metrics-listen=127.0.0.1:0"};
  r.argv.insert(r.argv.end(), args.begin(), args.end());
  r.env = EnvironmentWith({"YARD_SERVER=", "YARD_TOKEN=" + token});
  auto child = SpawnChild(r);
  return child.ok() ? *std::move(child) : nullptr;
}

// Waits for the worker to exit and returns what it wrote on stderr.
std::string StderrOfExited(ChildProcess& worker) {
  EXPECT_TRUE(AwaitReadable(worker.pid_fd()));
  std::string err(4096, '\0');
  err.resize(
      std::max<ssize_t>(0, read(worker.stderr_fd(), err.data(), err.size())));
  return err;
}

TEST(WorkerBinaryTest, UsageErrorIsOneLineAndExitTwo) {
  auto worker = RunWorker({"--server", "127.0.0.1:1"});
  ASSERT_NE(worker, nullptr);
  const std::string err = StderrOfExited(*worker);
  EXPECT_EQ(worker->Wait().exit_code, 2);
  EXPECT_EQ(err, "yard-worker: --work-dir DIR is required\n");
}

TEST(WorkerBinaryTest, AJoinTokenIsRequired) {
  testing::TempDir tmp;
  auto worker = RunWorker({"--server", "127.0.0.1:1", "--work-dir",
                           tmp.Sub("work")},
                          /*token=*/"");
  ASSERT_NE(worker, nullptr);
  const std::string err = StderrOfExited(*worker);
  EXPECT_EQ(worker->Wait().exit_code, 2);
  EXPECT_THAT(err, HasSubstr("a worker join token is required"));
}

class WorkerProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = FakeServer::Start(hub_);
    ASSERT_NE(server_, nullptr);
    std::filesystem::create_directories(tmp_.Sub("data"));
    worker_ = RunWorker({"--server", server_->address(), "--work-dir",
                         tmp_.Sub("work"), "--data-root", tmp_.Sub("data"),
                         "--train-bin", testing::WriteFakeTrainer(tmp_.path()),
                         "--name", "bin-test", "--shutdown-grace-ms", "20000"});
    ASSERT_NE(worker_, nullptr);
    ASSERT_TRUE(
        hub_.WaitFor([](const auto& r) { return testing::HasHello(r, 1); }));
  }

  void TearDown() override {
    if (worker_ != nullptr && !worker_->HasExited()) {
      kill(worker_->pid(), SIGKILL);
      worker_->Wait();
    }
  }

  // Assigns a job and returns the pid of its process.
  int StartJob(const std::string& job, const std::string& mode) {
    trainyard::v1::ServerMessage m;
    *m.mutable_assignment() =
        testing::MakeAssignment(job, 1, mode, tmp_.Sub("ckpt"));
    hub_.Send(m);
    // The started TrainerEvent means the fake trainer has set its traps.
    EXPECT_TRUE(hub_.WaitFor([&](const auto& r) {
      return FindUpdate(r, job, 1, JobUpdate::kTrainer) >= 0;
    }));
    const auto r = hub_.received();
    const int i = FindUpdate(r, job, 1, JobUpdate::kStarted);
    return i < 0 ? -1 : r[i].message.update().started().pid();
  }

  FakeServerHub hub_;
  std::unique_ptr<FakeServer> server_;
  testing::TempDir tmp_;
  std::unique_ptr<ChildProcess> worker_;
};

TEST_F(WorkerProcessTest, SigtermStopsJobsReportsExitsAndExitsZero) {
  ASSERT_GT(StartJob("j1", "wait_term"), 0);
  kill(worker_->pid(), SIGTERM);
  ASSERT_TRUE(AwaitReadable(worker_->pid_fd()));
  EXPECT_EQ(worker_->Wait().exit_code, 0);
  const auto r = hub_.received();
  const int exit_at = FindUpdate(r, "j1", 1, JobUpdate::kExited);
  ASSERT_GE(exit_at, 0);
  EXPECT_EQ(r[exit_at].message.update().exited().exit_code(), 3);
  EXPECT_FALSE(r[exit_at].message.update().exited().cancelled());
  EXPECT_EQ(r[0].message.hello().worker_id(), "bin-test");
}

TEST_F(WorkerProcessTest, JobsDieWithAKilledWorker) {
  const int job_pid = StartJob("j1", "ignore_term");
  ASSERT_GT(job_pid, 0);
  FileDescriptor job(static_cast<int>(syscall(SYS_pidfd_open, job_pid, 0)));
  ASSERT_TRUE(job.valid());
  kill(worker_->pid(), SIGKILL);
  EXPECT_EQ(worker_->Wait().signal, SIGKILL);
  // PR_SET_PDEATHSIG: the job must not outlive its worker.
  EXPECT_TRUE(AwaitReadable(job.get()));
}

}  // namespace
}  // namespace trainyard::worker
