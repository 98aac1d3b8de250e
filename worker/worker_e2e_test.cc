// The whole worker (JobRunner + ServerLink) against the fake server, with
// the fake yard-train: what the server sees when it assigns, cancels, stops,
// restarts, and when the worker shuts down.
#include <filesystem>
#include <string>

#include "common/proto_time.h"
#include "common/test_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/fake_worker_service.h"
#include "worker/test_scripts.h"
#include "worker/worker.h"

namespace trainyard::worker {
namespace {

using testing::FakeServer;
using testing::FakeServerHub;
using testing::FindUpdate;
using testing::HasHello;
using ::testing::HasSubstr;
using testing::Received;
using trainyard::v1::JobUpdate;
using trainyard::v1::ServerMessage;
using trainyard::v1::TrainerEvent;

bool HasTrainerEvent(const std::vector<Received>& r, const std::string& job,
                     TrainerEvent::EventCase kind) {
  for (const Received& m : r) {
    const auto& msg = m.message;
    if (msg.has_update() && msg.update().job_id() == job &&
        msg.update().has_trainer() &&
        msg.update().trainer().event_case() == kind) {
      return true;
    }
  }
  return false;
}

const trainyard::v1::JobExited* ExitOf(const std::vector<Received>& r,
                                       const std::string& job, int attempt) {
  const int i = FindUpdate(r, job, attempt, JobUpdate::kExited);
  return i < 0 ? nullptr : &r[i].message.update().exited();
}

class WorkerE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = FakeServer::Start(hub_);
    ASSERT_NE(server_, nullptr);
    std::filesystem::create_directories(tmp_.File("data"));
    WorkerConfig config;
    config.worker_id = "worker-1";
    config.hostname = "node-a";
    config.runner.work_dir = tmp_.File("work");
    config.runner.data_root = tmp_.File("data");
    config.runner.train_bin = testing::WriteFakeTrainer(tmp_.path());
    config.runner.cpu_slots = 2;
    config.link.server_address = server_->address();
    config.link.initial_backoff = absl::Milliseconds(10);
    config.link.max_backoff = absl::Milliseconds(200);
    worker_ = std::make_unique<Worker>(config);
    worker_->Start();
    ASSERT_TRUE(hub_.WaitFor([](const auto& r) { return HasHello(r, 1); }));
  }

  void Assign(const std::string& job, const std::string& mode,
              int attempt = 1) {
    ServerMessage m;
    *m.mutable_assignment() =
        testing::MakeAssignment(job, attempt, mode, tmp_.File("ckpt/" + job));
    hub_.Send(m);
  }

  bool WaitExit(const std::string& job, int attempt = 1) {
    return hub_.WaitFor(
        [&](const auto& r) { return ExitOf(r, job, attempt) != nullptr; });
  }

  bool WaitStarted(const std::string& job) {
    return hub_.WaitFor([&](const auto& r) {
      return HasTrainerEvent(r, job, TrainerEvent::kStarted);
    });
  }

  FakeServerHub hub_;
  std::unique_ptr<FakeServer> server_;
  TestDir tmp_;
  std::unique_ptr<Worker> worker_;
};

TEST_F(WorkerE2eTest, HelloDescribesTheWorker) {
  const auto received = hub_.received();
  const auto& hello = received[0].message.hello();
  EXPECT_EQ(hello.worker_id(), "worker-1");
  EXPECT_EQ(hello.hostname(), "node-a");
  EXPECT_EQ(hello.version(), kWorkerVersion);
  EXPECT_EQ(hello.cpu_slots(), 2);
  EXPECT_EQ(hello.devices_size(), 0);
  EXPECT_EQ(hello.running_size(), 0);
}

TEST_F(WorkerE2eTest, AssignmentIsStartedReportedAndExited) {
  Assign("j1", "succeed");
  ASSERT_TRUE(WaitExit("j1"));
  const auto r = hub_.received();
  const int started = FindUpdate(r, "j1", 1, JobUpdate::kStarted);
  const int trainer = FindUpdate(r, "j1", 1, JobUpdate::kTrainer);
  const int exited = FindUpdate(r, "j1", 1, JobUpdate::kExited);
  ASSERT_GE(started, 0);
  EXPECT_LT(started, trainer);
  EXPECT_LT(trainer, exited);
  EXPECT_TRUE(HasTrainerEvent(r, "j1", TrainerEvent::kProgress));
  EXPECT_TRUE(HasTrainerEvent(r, "j1", TrainerEvent::kFinished));
  std::string log;
  for (const Received& m : r) {
    if (m.message.has_update() && m.message.update().has_log())
      log += m.message.update().log();
  }
  EXPECT_THAT(log, HasSubstr("plain stdout line"));
  EXPECT_EQ(ExitOf(r, "j1", 1)->exit_code(), 0);
  EXPECT_FALSE(ExitOf(r, "j1", 1)->cancelled());
}

TEST_F(WorkerE2eTest, HeartbeatsListRunningJobs) {
  Assign("j1", "wait_term");
  ASSERT_TRUE(WaitStarted("j1"));
  ASSERT_TRUE(hub_.WaitFor([](const auto& r) {
    for (const Received& m : r) {
      if (m.message.has_heartbeat() &&
          m.message.heartbeat().running_size() == 1 &&
          m.message.heartbeat().running(0).job_id() == "j1") {
        return true;
      }
    }
    return false;
  }));
}

TEST_F(WorkerE2eTest, CancelFromTheServer) {
  Assign("j1", "wait_term");
  ASSERT_TRUE(WaitStarted("j1"));
  ServerMessage unknown;
  unknown.mutable_cancel()->set_job_id("nope");
  unknown.mutable_cancel()->set_attempt(1);
  hub_.Send(unknown);  // ignored with a log line
  ServerMessage cancel;
  cancel.mutable_cancel()->set_job_id("j1");
  cancel.mutable_cancel()->set_attempt(1);
  cancel.mutable_cancel()->set_grace_ms(30'000);
  hub_.Send(cancel);
  ASSERT_TRUE(WaitExit("j1"));
  const auto r = hub_.received();
  EXPECT_EQ(ExitOf(r, "j1", 1)->exit_code(), 3);
  EXPECT_TRUE(ExitOf(r, "j1", 1)->cancelled());
  EXPECT_TRUE(HasTrainerEvent(r, "j1", TrainerEvent::kInterrupted));
  EXPECT_EQ(ExitOf(r, "nope", 1), nullptr);
}

TEST_F(WorkerE2eTest, PreemptFromTheServer) {
  Assign("j1", "wait_term");
  ASSERT_TRUE(WaitStarted("j1"));
  ServerMessage preempt;
  preempt.mutable_preempt()->set_job_id("j1");
  preempt.mutable_preempt()->set_attempt(1);
  preempt.mutable_preempt()->set_grace_ms(30'000);
  hub_.Send(preempt);
  ASSERT_TRUE(WaitExit("j1"));
  const auto r = hub_.received();
  EXPECT_EQ(ExitOf(r, "j1", 1)->exit_code(), 3);
  EXPECT_FALSE(ExitOf(r, "j1", 1)->cancelled()) << "the server re-queues it";
  EXPECT_TRUE(HasTrainerEvent(r, "j1", TrainerEvent::kInterrupted));
}

TEST_F(WorkerE2eTest, StopAttemptKillsAtOnce) {
  Assign("j1", "ignore_term");
  ASSERT_TRUE(WaitStarted("j1"));
  ServerMessage stop;
  stop.mutable_stop_attempt()->set_job_id("j1");
  stop.mutable_stop_attempt()->set_attempt(1);
  hub_.Send(stop);
  ASSERT_TRUE(WaitExit("j1"));
  EXPECT_EQ(ExitOf(hub_.received(), "j1", 1)->signal(), SIGKILL);
}

TEST_F(WorkerE2eTest, JobsSurviveServerRestartAndAreListedInTheNewHello) {
  Assign("j1", "wait_term");
  ASSERT_TRUE(WaitStarted("j1"));
  const int port = server_->port();
  server_->Kill();
  server_ = FakeServer::Start(hub_, port);
  ASSERT_NE(server_, nullptr);
  ASSERT_TRUE(hub_.WaitFor([](const auto& r) { return HasHello(r, 2); }));
  const auto r = hub_.received();
  for (const Received& m : r) {
    if (m.stream == 2 && m.message.has_hello()) {
      ASSERT_EQ(m.message.hello().running_size(), 1);
      EXPECT_EQ(m.message.hello().running(0).job_id(), "j1");
      EXPECT_EQ(m.message.hello().running(0).attempt(), 1);
    }
  }
  EXPECT_EQ(ExitOf(r, "j1", 1), nullptr);  // still running

  ServerMessage cancel;
  cancel.mutable_cancel()->set_job_id("j1");
  cancel.mutable_cancel()->set_attempt(1);
  hub_.Send(cancel);
  ASSERT_TRUE(WaitExit("j1"));
  const auto after = hub_.received();
  EXPECT_EQ(after[FindUpdate(after, "j1", 1, JobUpdate::kExited)].stream, 2);
}

TEST_F(WorkerE2eTest, ExitWhileDisconnectedIsReportedAfterReconnect) {
  Assign("j1", "wait_term");
  ASSERT_TRUE(WaitStarted("j1"));
  const int port = server_->port();
  server_->Kill();
  const absl::Time cancelled_at = absl::Now();
  ASSERT_TRUE(worker_->runner().Cancel("j1", 1, absl::Seconds(30)));
  ASSERT_TRUE(worker_->runner().WaitIdle(absl::Now() + absl::Seconds(20)));
  const absl::Time idle_at = absl::Now();
  server_ = FakeServer::Start(hub_, port);
  ASSERT_NE(server_, nullptr);
  ASSERT_TRUE(hub_.WaitFor([](const auto& r) {
    return FindUpdate(r, "j1", 1, JobUpdate::kExited) >= 0;
  }));
  const auto r = hub_.received();
  const int exit_at = FindUpdate(r, "j1", 1, JobUpdate::kExited);
  EXPECT_EQ(r[exit_at].stream, 2);
  EXPECT_EQ(r[exit_at].message.update().exited().exit_code(), 3);
  // It says when the process ended, not when the report could be sent:
  // the server charges the attempt up to then.
  const absl::Time exited =
      FromProtoTime(r[exit_at].message.update().exited().exit_time());
  EXPECT_GE(exited, cancelled_at);
  EXPECT_LE(exited, idle_at);
  for (const Received& m : r) {
    if (m.stream == 2 && m.message.has_hello()) {
      ASSERT_EQ(m.message.hello().running_size(), 1);  // exit not yet heard
      EXPECT_EQ(m.message.hello().running(0).job_id(), "j1");
      // ... but ended, and when: the server need not count it as running
      // until the report comes.
      EXPECT_EQ(FromProtoTime(m.message.hello().running(0).exit_time()),
                exited);
    }
  }
}

TEST_F(WorkerE2eTest, JobsStopWhenTheServerNoLongerHearsTheWorker) {
  Assign("j1", "ignore_term");  // stopped even if it ignores SIGTERM
  ASSERT_TRUE(WaitStarted("j1"));
  hub_.set_silent(true);  // heartbeats arrive but none is answered
  const absl::Time silent_at = absl::Now();
  ASSERT_TRUE(WaitExit("j1"));
  // Not before the lease (2 s), less one heartbeat interval, has passed.
  EXPECT_GE(absl::Now() - silent_at, absl::Milliseconds(1800));
  const auto r = hub_.received();  // outlives `exit`, which points into it
  const auto* exit = ExitOf(r, "j1", 1);
  ASSERT_NE(exit, nullptr);
  EXPECT_EQ(exit->signal(), SIGKILL);
  EXPECT_TRUE(exit->lost_server()) << exit->DebugString();
  EXPECT_FALSE(exit->cancelled());
  EXPECT_GE(FromProtoTime(exit->exit_time()),
            silent_at + absl::Milliseconds(1800));
  EXPECT_LE(FromProtoTime(exit->exit_time()), absl::Now());
  EXPECT_TRUE(worker_->runner().Running().empty());
  // The worker gave up the silent stream and opened another.
  ASSERT_TRUE(hub_.WaitFor([](const auto& r) { return HasHello(r, 2); }));
}

TEST_F(WorkerE2eTest, ShutdownStopsJobsAndReportsTheirExits) {
  Assign("j1", "wait_term");
  ASSERT_TRUE(WaitStarted("j1"));
  worker_->Shutdown(absl::Seconds(30), absl::Seconds(10));
  const auto r = hub_.received();
  const auto* exit = ExitOf(r, "j1", 1);
  ASSERT_NE(exit, nullptr);
  EXPECT_EQ(exit->exit_code(), 3);
  EXPECT_FALSE(exit->cancelled());
  EXPECT_TRUE(worker_->runner().Running().empty());

  worker_->runner().Start(testing::MakeAssignment("late", 1, "succeed", ""));
  EXPECT_TRUE(worker_->runner().Running().empty());
}

}  // namespace
}  // namespace trainyard::worker
