// The yard-worker binary itself, as a process: usage errors, SIGTERM (jobs
// checkpoint, exits reported, exit 0) and SIGKILL (its jobs die with it).
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/test_dir.h"
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
using testing::HasHello;
using ::testing::HasSubstr;
using testing::Received;
using trainyard::v1::JobUpdate;

// Polls a pidfd (or any fd) for readability until the timeout.
bool AwaitReadable(int fd, int timeout_ms = 20'000) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1;
}

// `token`: the YARD_TOKEN the worker sees (the fake server checks none);
// `env`: more KEY=VALUE for its environment.
std::unique_ptr<ChildProcess> RunWorker(std::vector<std::string> args,
                                        const std::string& token = "join",
                                        std::vector<std::string> env = {}) {
  SpawnRequest r;
  r.path = YARD_WORKER_BIN;
  // Tests run side by side: never the fixed default metrics port.
  r.argv = {r.path, "--metrics-listen=127.0.0.1:0"};
  r.argv.insert(r.argv.end(), args.begin(), args.end());
  env.push_back("YARD_SERVER=");
  env.push_back("YARD_TOKEN=" + token);
  r.env = EnvironmentWith(env);
  auto child = SpawnChild(r);
  return child.ok() ? *std::move(child) : nullptr;
}

// Waits for the worker to exit and returns what it wrote on stderr.
std::string StderrOfExited(ChildProcess& worker) {
  EXPECT_TRUE(AwaitReadable(worker.pid_fd()));
  std::string err;
  char buf[4096];
  ssize_t n;
  while ((n = read(worker.stderr_fd(), buf, sizeof(buf))) > 0) {
    err.append(buf, static_cast<size_t>(n));
  }
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
  TestDir tmp;
  auto worker =
      RunWorker({"--server", "127.0.0.1:1", "--work-dir", tmp.File("work")},
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
    std::filesystem::create_directories(tmp_.File("data"));
    worker_ = RunWorker({"--server", server_->address(), "--work-dir",
                         tmp_.File("work"), "--data-root", tmp_.File("data"),
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
        testing::MakeAssignment(job, 1, mode, tmp_.File("ckpt"));
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
  TestDir tmp_;
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

// The worker on a "GPU node": the fake NVML stands in for the driver's
// libnvidia-ml.so.1, found through LD_LIBRARY_PATH as the real one would be
// through the loader's cache.
class WorkerGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = FakeServer::Start(hub_);
    ASSERT_NE(server_, nullptr);
    std::filesystem::create_directories(tmp_.File("driver"));
    std::filesystem::create_symlink(FAKE_NVML_PATH,
                                    tmp_.File("driver/libnvidia-ml.so.1"));
  }

  void TearDown() override {
    if (worker_ != nullptr && !worker_->HasExited()) {
      kill(worker_->pid(), SIGKILL);
      worker_->Wait();
    }
  }

  // Starts the worker with `env` on top of the fake driver.
  void Start(std::vector<std::string> args, std::vector<std::string> env) {
    const char* path = std::getenv("LD_LIBRARY_PATH");
    env.push_back("LD_LIBRARY_PATH=" + tmp_.File("driver") +
                  (path != nullptr ? std::string(":") + path : ""));
    std::vector<std::string> all = {
        "--server",    server_->address(),
        "--work-dir",  tmp_.File("work"),
        "--data-root", tmp_.path(),
        "--train-bin", testing::WriteFakeTrainer(tmp_.path()),
        "--name",      "gpu-node"};
    all.insert(all.end(), args.begin(), args.end());
    worker_ = RunWorker(all, "join", env);
    ASSERT_NE(worker_, nullptr);
  }

  // The hello, and the first heartbeat with device figures.
  std::pair<trainyard::v1::WorkerHello, trainyard::v1::Heartbeat> Connected() {
    EXPECT_TRUE(hub_.WaitFor([](const auto& r) {
      for (const Received& m : r) {
        if (m.message.heartbeat().devices_size() > 0) return true;
      }
      return false;
    }));
    std::pair<trainyard::v1::WorkerHello, trainyard::v1::Heartbeat> out;
    for (const Received& m : hub_.received()) {
      if (m.message.has_hello()) out.first = m.message.hello();
      if (m.message.heartbeat().devices_size() > 0) {
        out.second = m.message.heartbeat();
        break;
      }
    }
    return out;
  }

  // Runs a one-GPU job on GPU `index` to its end; returns the job's log.
  std::string RunJobOnGpu(const std::string& job, int32_t index) {
    EXPECT_TRUE(hub_.WaitFor([](const auto& r) { return HasHello(r, 1); }));
    trainyard::v1::ServerMessage m;
    trainyard::v1::Assignment& a = *m.mutable_assignment();
    a = testing::MakeAssignment(job, 1, "succeed", tmp_.File("ckpt"));
    a.mutable_spec()->mutable_resources()->set_gpus(1);
    a.add_gpu_indices(index);
    hub_.Send(m);
    EXPECT_TRUE(hub_.WaitFor([&](const auto& r) {
      return FindUpdate(r, job, 1, JobUpdate::kExited) >= 0;
    }));
    std::string log;
    for (const Received& r : hub_.received()) {
      const JobUpdate& u = r.message.update();
      if (u.job_id() != job) continue;
      if (u.has_exited()) {
        EXPECT_EQ(u.exited().exit_code(), 0) << u.exited().error();
      }
      log += u.log();
    }
    return log;
  }

  // SIGTERM, then what the worker logged.
  std::string StopAndReadLog() {
    kill(worker_->pid(), SIGTERM);
    std::string err = StderrOfExited(*worker_);
    EXPECT_EQ(worker_->Wait().exit_code, 0);
    return err;
  }

  FakeServerHub hub_;
  std::unique_ptr<FakeServer> server_;
  TestDir tmp_;
  std::unique_ptr<ChildProcess> worker_;
};

TEST_F(WorkerGpuTest, HelloCarriesCapacityAndHeartbeatsLiveFigures) {
  Start({}, {"CUDA_VISIBLE_DEVICES=0,1"});
  auto [hello, heartbeat] = Connected();
  ASSERT_EQ(hello.devices_size(), 2);
  EXPECT_EQ(hello.devices(0).index(), 0);
  EXPECT_EQ(hello.devices(0).name(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(hello.devices(0).uuid(),
            "GPU-a0a0a0a0-0000-4000-8000-000000000000");
  EXPECT_EQ(hello.devices(0).memory_bytes(), 85520809984);
  EXPECT_EQ(hello.devices(0).compute_capability(), 90);
  EXPECT_EQ(hello.devices(1).index(), 1);
  ASSERT_EQ(heartbeat.devices_size(), 2);
  EXPECT_EQ(heartbeat.devices(0).index(), 0);
  EXPECT_EQ(heartbeat.devices(0).memory_used_bytes(), int64_t{1} << 30);
  EXPECT_EQ(heartbeat.devices(0).utilization_percent(), 75);
  EXPECT_EQ(heartbeat.devices(0).temperature_celsius(), 61);
  EXPECT_EQ(heartbeat.devices(0).power_milliwatts(), 350500);
  EXPECT_EQ(heartbeat.devices(1).temperature_celsius(), 0);  // unsupported
  const std::string log = StopAndReadLog();
  EXPECT_THAT(log, HasSubstr("GPU 1: NVIDIA H100 80GB HBM3 (GPU-b1b1b1b1"));
  EXPECT_THAT(log, HasSubstr("2 GPU(s)"));
}

TEST_F(WorkerGpuTest, OffersOnlyTheGpusCudaVisibleDevicesLeaves) {
  Start({}, {"CUDA_VISIBLE_DEVICES=GPU-b1b1"});
  auto [hello, heartbeat] = Connected();
  ASSERT_EQ(hello.devices_size(), 1);
  EXPECT_EQ(hello.devices(0).index(), 1);  // the index a job's env names
  ASSERT_EQ(heartbeat.devices_size(), 1);
  EXPECT_EQ(heartbeat.devices(0).index(), 1);
  EXPECT_EQ(heartbeat.devices(0).power_milliwatts(), 70250);
}

// Jobs get their GPU's UUID from NVML in CUDA_VISIBLE_DEVICES (an MPS
// server may renumber indices), also when the worker itself was started
// with a CUDA_VISIBLE_DEVICES.
TEST_F(WorkerGpuTest, JobsSeeTheirGpuByUuid) {
  Start({}, {"CUDA_VISIBLE_DEVICES=GPU-b1b1,0"});
  EXPECT_THAT(RunJobOnGpu("on-1", 1),
              HasSubstr("job: on-1/1 gpus=[GPU-b1b1b1b1-1111-4111-8111-"
                        "111111111111]\n"));
  EXPECT_THAT(RunJobOnGpu("on-0", 0),
              HasSubstr("job: on-0/1 gpus=[GPU-a0a0a0a0-0000-4000-8000-"
                        "000000000000]\n"));
}

// A GPU whose UUID NVML gives empty goes by its index, and the worker says
// so when it starts.
TEST_F(WorkerGpuTest, AGpuWithoutAUuidGoesByIndex) {
  Start({}, {"FAKE_NVML_BAD_UUID_1=1"});
  EXPECT_THAT(RunJobOnGpu("on-1", 1), HasSubstr("job: on-1/1 gpus=[1]\n"));
  EXPECT_THAT(RunJobOnGpu("on-0", 0),
              HasSubstr("gpus=[GPU-a0a0a0a0-0000-4000-8000-000000000000]"));
  EXPECT_THAT(StopAndReadLog(), HasSubstr("GPU 1: NVML gives no usable UUID"));
}

TEST_F(WorkerGpuTest, NoDriverStartsWithCpuSlotsOnlyAndSaysWhy) {
  Start({}, {"FAKE_NVML_INIT_RESULT=9"});
  ASSERT_TRUE(hub_.WaitFor([](const auto& r) { return HasHello(r, 1); }));
  EXPECT_EQ(hub_.received()[0].message.hello().devices_size(), 0);
  const std::string log = StopAndReadLog();
  EXPECT_THAT(log, HasSubstr("no GPUs: nvmlInit failed: Driver Not Loaded (is "
                             "the NVIDIA driver loaded?); offering CPU slots "
                             "only"));
  EXPECT_THAT(log, HasSubstr("0 GPU(s)"));
}

TEST_F(WorkerGpuTest, GpusThatCannotBeHadAreAUsageError) {
  Start({"--gpus", "5"}, {"CUDA_VISIBLE_DEVICES=0,1"});
  std::string err = StderrOfExited(*worker_);
  EXPECT_EQ(worker_->Wait().exit_code, 2);
  EXPECT_THAT(err, HasSubstr("yard-worker: --gpus: \"5\" names no GPU"));

  Start({"--gpus", "0"}, {"FAKE_NVML_INIT_RESULT=9"});
  err = StderrOfExited(*worker_);
  EXPECT_EQ(worker_->Wait().exit_code, 2);
  EXPECT_THAT(err, HasSubstr("yard-worker: --gpus 0: nvmlInit failed"));
}

TEST_F(WorkerGpuTest, GpusNoneOffersNone) {
  Start({"--gpus=none"}, {"CUDA_VISIBLE_DEVICES=0,1"});
  ASSERT_TRUE(hub_.WaitFor([](const auto& r) { return HasHello(r, 1); }));
  EXPECT_EQ(hub_.received()[0].message.hello().devices_size(), 0);
  EXPECT_THAT(StopAndReadLog(), HasSubstr("no GPUs: --gpus none"));
}

}  // namespace
}  // namespace trainyard::worker
