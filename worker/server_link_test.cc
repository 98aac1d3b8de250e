#include "worker/server_link.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/fake_worker_service.h"

namespace trainyard::worker {
namespace {

using testing::CountHeartbeats;
using testing::FakeServer;
using testing::FakeServerHub;
using testing::FindUpdate;
using testing::HasHello;
using testing::Received;
using trainyard::v1::JobUpdate;
using trainyard::v1::RunningJobRef;
using trainyard::v1::ServerMessage;

RunningJobRef Ref(const std::string& job, int attempt) {
  RunningJobRef r;
  r.set_job_id(job);
  r.set_attempt(attempt);
  return r;
}

// Stands in for the Worker: a fixed identity, a settable running list, and
// a record of the server messages delivered.
class FakeDelegate : public ServerLink::Delegate {
 public:
  trainyard::v1::WorkerHello Hello() override {
    trainyard::v1::WorkerHello hello;
    hello.set_worker_id("w1");
    hello.set_hostname("host");
    hello.set_cpu_slots(2);
    return hello;
  }
  std::vector<RunningJobRef> RunningJobs() override {
    absl::MutexLock lock(&mu_);
    return running_;
  }
  void OnServerMessage(const ServerMessage& m) override {
    absl::MutexLock lock(&mu_);
    messages_.push_back(m);
  }
  void SetRunning(std::vector<RunningJobRef> running) {
    absl::MutexLock lock(&mu_);
    running_ = std::move(running);
  }
  bool WaitMessages(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return messages_.size() >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(20));
  }
  std::vector<ServerMessage> messages() {
    absl::MutexLock lock(&mu_);
    return messages_;
  }

 private:
  absl::Mutex mu_;
  std::vector<RunningJobRef> running_ ABSL_GUARDED_BY(mu_);
  std::vector<ServerMessage> messages_ ABSL_GUARDED_BY(mu_);
};

JobUpdate Exited(const std::string& job, int attempt) {
  JobUpdate u;
  u.set_job_id(job);
  u.set_attempt(attempt);
  u.mutable_exited()->set_exit_code(0);
  return u;
}

std::vector<std::string> Refs(
    const google::protobuf::RepeatedPtrField<RunningJobRef>& refs) {
  std::vector<std::string> out;
  for (const auto& r : refs)
    out.push_back(r.job_id() + "/" + std::to_string(r.attempt()));
  return out;
}

class ServerLinkTest : public ::testing::Test {
 protected:
  std::unique_ptr<ServerLink> MakeLink(const std::string& address) {
    ServerLinkOptions options;
    options.server_address = address;
    options.initial_backoff = absl::Milliseconds(10);
    options.max_backoff = absl::Milliseconds(200);
    return std::make_unique<ServerLink>(options, &delegate_);
  }
  const Received* Hello(int stream) {
    for (const Received& r : received_) {
      if (r.stream == stream && r.message.has_hello()) return &r;
    }
    return nullptr;
  }

  FakeServerHub hub_;
  FakeDelegate delegate_;
  std::vector<Received> received_;
};

TEST_F(ServerLinkTest, SendsHelloThenHeartbeatsWithRunningJobs) {
  auto server = FakeServer::Start(hub_);
  ASSERT_NE(server, nullptr);
  delegate_.SetRunning({Ref("a", 1)});
  auto link = MakeLink(server->address());
  link->Start();
  ASSERT_TRUE(
      hub_.WaitFor([](const auto& r) { return CountHeartbeats(r, 1) >= 2; }));
  received_ = hub_.received();
  ASSERT_TRUE(received_[0].message.has_hello());
  const auto& hello = received_[0].message.hello();
  EXPECT_EQ(hello.worker_id(), "w1");
  EXPECT_EQ(hello.cpu_slots(), 2);
  EXPECT_THAT(Refs(hello.running()), ::testing::ElementsAre("a/1"));
  for (const Received& r : received_) {
    if (r.message.has_heartbeat()) {
      EXPECT_THAT(Refs(r.message.heartbeat().running()),
                  ::testing::ElementsAre("a/1"));
    }
  }
  EXPECT_TRUE(link->connected());
}

TEST_F(ServerLinkTest, DeliversServerMessagesInOrder) {
  auto server = FakeServer::Start(hub_);
  ASSERT_NE(server, nullptr);
  auto link = MakeLink(server->address());
  link->Start();
  ASSERT_TRUE(hub_.WaitFor([](const auto& r) { return HasHello(r, 1); }));
  ServerMessage assign, cancel;
  assign.mutable_assignment()->set_job_id("j");
  cancel.mutable_cancel()->set_job_id("j");
  hub_.Send(assign);
  hub_.Send(cancel);
  ASSERT_TRUE(delegate_.WaitMessages(2));
  EXPECT_TRUE(delegate_.messages()[0].has_assignment());
  EXPECT_TRUE(delegate_.messages()[1].has_cancel());
}

TEST_F(ServerLinkTest, ReportsQueuedWhileDisconnectedFollowTheHello) {
  // Find a free port, then leave it closed while the link tries it.
  int port;
  {
    auto probe = FakeServer::Start(hub_);
    ASSERT_NE(probe, nullptr);
    port = probe->port();
  }
  auto link = MakeLink("127.0.0.1:" + std::to_string(port));
  link->Start();
  JobUpdate progress;
  progress.set_job_id("b");
  progress.set_attempt(1);
  progress.mutable_trainer()->mutable_progress()->set_step(3);
  link->Report(progress);
  link->Report(Exited("b", 1));
  EXPECT_FALSE(link->connected());
  EXPECT_EQ(link->queued(), 2u);

  auto server = FakeServer::Start(hub_, port);
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(hub_.WaitFor([](const auto& r) {
    return FindUpdate(r, "b", 1, JobUpdate::kExited) >= 0;
  }));
  received_ = hub_.received();
  const Received* hello = Hello(1);
  ASSERT_NE(hello, nullptr);
  // b's exit is not yet delivered when the hello goes out: it counts as
  // running so the server does not declare it lost first.
  EXPECT_THAT(Refs(hello->message.hello().running()),
              ::testing::ElementsAre("b/1"));
  const int progress_at = FindUpdate(received_, "b", 1, JobUpdate::kTrainer);
  const int exit_at = FindUpdate(received_, "b", 1, JobUpdate::kExited);
  EXPECT_EQ(received_[0].message.has_hello(), true);
  EXPECT_LT(progress_at, exit_at);
  EXPECT_EQ(link->queued(), 0u);
}

TEST_F(ServerLinkTest, ReconnectsAfterServerRestart) {
  auto server = FakeServer::Start(hub_);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  auto link = MakeLink(server->address());
  link->Start();
  ASSERT_TRUE(
      hub_.WaitFor([](const auto& r) { return CountHeartbeats(r, 1) >= 1; }));

  server->Kill();
  delegate_.SetRunning({Ref("a", 3)});
  link->Report(Exited("gone", 1));
  server = FakeServer::Start(hub_, port);
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(hub_.WaitFor([](const auto& r) {
    return FindUpdate(r, "gone", 1, JobUpdate::kExited) >= 0 &&
           CountHeartbeats(r, 2) >= 1;
  }));
  received_ = hub_.received();
  const Received* hello = Hello(2);
  ASSERT_NE(hello, nullptr);
  EXPECT_THAT(Refs(hello->message.hello().running()),
              ::testing::UnorderedElementsAre("a/3", "gone/1"));
  EXPECT_EQ(
      received_[FindUpdate(received_, "gone", 1, JobUpdate::kExited)].stream,
      2);
}

TEST_F(ServerLinkTest, ShutdownFlushesQueuedReports) {
  auto server = FakeServer::Start(hub_);
  ASSERT_NE(server, nullptr);
  auto link = MakeLink(server->address());
  link->Start();
  ASSERT_TRUE(hub_.WaitFor([](const auto& r) { return HasHello(r, 1); }));
  link->Report(Exited("last", 1));
  link->Shutdown(absl::Seconds(10));
  EXPECT_GE(FindUpdate(hub_.received(), "last", 1, JobUpdate::kExited), 0);
  EXPECT_FALSE(link->connected());
}

TEST_F(ServerLinkTest, ShutdownWithoutServerReturns) {
  auto link = MakeLink("127.0.0.1:1");
  link->Start();
  link->Report(Exited("x", 1));
  link->Shutdown(absl::Seconds(1));
  EXPECT_EQ(link->queued(), 1u);  // nobody to send it to
}

TEST_F(ServerLinkTest, ShutdownBeforeStartIsFine) {
  auto link = MakeLink("127.0.0.1:1");
  link->Shutdown(absl::Seconds(1));
  link->Start();  // no effect after shutdown
  EXPECT_FALSE(link->connected());
}

}  // namespace
}  // namespace trainyard::worker
