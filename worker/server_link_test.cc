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
  void OnLeaseExpired() override {
    absl::MutexLock lock(&mu_);
    ++lease_expired_;
  }
  int lease_expired() {
    absl::MutexLock lock(&mu_);
    return lease_expired_;
  }
  bool WaitLeaseExpired(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto expired = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return lease_expired_ > 0;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&expired), timeout);
  }

  void OnConnectFailed(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    failures_.push_back(status);
  }
  // The statuses of the first `n` failed tries, once there are that many.
  std::vector<absl::Status> WaitFailures(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return failures_.size() >= n;
    };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(20));
    return std::vector<absl::Status>(
        failures_.begin(), failures_.begin() + std::min(n, failures_.size()));
  }

 private:
  std::vector<absl::Status> failures_ ABSL_GUARDED_BY(mu_);
  int lease_expired_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Mutex mu_;
  std::vector<RunningJobRef> running_ ABSL_GUARDED_BY(mu_);
  std::vector<ServerMessage> messages_ ABSL_GUARDED_BY(mu_);
};

JobUpdate Checkpoint(const std::string& job, int attempt) {
  JobUpdate u;
  u.set_job_id(job);
  u.set_attempt(attempt);
  u.mutable_trainer()->mutable_checkpoint()->set_step(100);
  return u;
}

// The updates of `stream` for the attempt, in arrival order.
std::vector<JobUpdate> UpdatesOn(const std::vector<Received>& r, int stream,
                                 const std::string& job, int attempt) {
  std::vector<JobUpdate> out;
  for (const Received& m : r) {
    if (m.stream == stream && m.message.has_update() &&
        m.message.update().job_id() == job &&
        m.message.update().attempt() == attempt) {
      out.push_back(m.message.update());
    }
  }
  return out;
}

// True when a heartbeat on `stream` lists nothing running.
bool IdleHeartbeatOn(const std::vector<Received>& r, int stream) {
  for (const Received& m : r) {
    if (m.stream == stream && m.message.has_heartbeat() &&
        m.message.heartbeat().running_size() == 0) {
      return true;
    }
  }
  return false;
}

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
  std::unique_ptr<ServerLink> MakeLink(
      const std::string& address,
      absl::Duration hello_timeout = absl::Seconds(10)) {
    ServerLinkOptions options;
    options.server_address = address;
    options.initial_backoff = absl::Milliseconds(10);
    options.max_backoff = absl::Milliseconds(200);
    options.hello_timeout = hello_timeout;
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
  // Acknowledged at the next heartbeat; after that b/1 is not listed.
  ASSERT_TRUE(
      hub_.WaitFor([](const auto& r) { return IdleHeartbeatOn(r, 1); }));
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

TEST_F(ServerLinkTest, ReportsAreKeptUntilAckedAndSentAgainAfterReconnect) {
  hub_.set_ack_reports(false);  // the server dies before it acknowledges
  auto server = FakeServer::Start(hub_);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  auto link = MakeLink(server->address());
  link->Start();
  ASSERT_TRUE(hub_.WaitFor([](const auto& r) { return HasHello(r, 1); }));
  link->Report(Checkpoint("a", 1));
  link->Report(Exited("a", 1));
  ASSERT_TRUE(hub_.WaitFor([](const auto& r) {
    return UpdatesOn(r, 1, "a", 1).size() == 2 && CountHeartbeats(r, 1) >= 3;
  }));
  EXPECT_EQ(link->queued(), 2u) << "sent but not acknowledged: kept";
  EXPECT_FALSE(IdleHeartbeatOn(hub_.received(), 1))
      << "an exit not acknowledged counts as running";

  server->Kill();
  server = FakeServer::Start(hub_, port);
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(hub_.WaitFor(
      [](const auto& r) { return UpdatesOn(r, 2, "a", 1).size() == 2; }));
  received_ = hub_.received();
  EXPECT_THAT(Refs(Hello(2)->message.hello().running()),
              ::testing::ElementsAre("a/1"));
  const std::vector<JobUpdate> first = UpdatesOn(received_, 1, "a", 1);
  const std::vector<JobUpdate> again = UpdatesOn(received_, 2, "a", 1);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(again[i].SerializeAsString(), first[i].SerializeAsString())
        << "sent again as it was, with its number";
    EXPECT_EQ(again[i].sequence(), static_cast<int64_t>(i + 1));
  }
  EXPECT_TRUE(again[1].has_exited());

  hub_.set_ack_reports(true);
  ASSERT_TRUE(
      hub_.WaitFor([](const auto& r) { return IdleHeartbeatOn(r, 2); }));
  EXPECT_EQ(link->queued(), 0u);
  EXPECT_EQ(UpdatesOn(hub_.received(), 2, "a", 1).size(), 2u)
      << "acknowledged reports are not sent again";
}

TEST_F(ServerLinkTest, AServerThatDoesNotAckGetsEachReportOnce) {
  hub_.set_acks(false);  // an older server
  auto server = FakeServer::Start(hub_);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  auto link = MakeLink(server->address());
  link->Start();
  ASSERT_TRUE(hub_.WaitFor([](const auto& r) { return HasHello(r, 1); }));
  link->Report(Checkpoint("a", 1));
  link->Report(Exited("a", 1));
  ASSERT_TRUE(hub_.WaitFor(
      [](const auto& r) { return UpdatesOn(r, 1, "a", 1).size() == 2; }));
  EXPECT_EQ(link->queued(), 0u);
  server->Kill();
  server = FakeServer::Start(hub_, port);
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(
      hub_.WaitFor([](const auto& r) { return CountHeartbeats(r, 2) >= 2; }));
  received_ = hub_.received();
  EXPECT_TRUE(UpdatesOn(received_, 2, "a", 1).empty());
  EXPECT_THAT(Refs(Hello(2)->message.hello().running()), ::testing::IsEmpty());
  EXPECT_EQ(delegate_.lease_expired(), 0) << "no lease watch without acks";
}

TEST_F(ServerLinkTest, ASilentServerExpiresTheLeaseAndTheLinkReconnects) {
  hub_.set_lease_ms(500);  // 10 heartbeats of 50 ms
  auto server = FakeServer::Start(hub_);
  ASSERT_NE(server, nullptr);
  auto link = MakeLink(server->address());
  link->Start();
  // Answered heartbeats for two leases: nothing expires.
  ASSERT_TRUE(
      hub_.WaitFor([](const auto& r) { return CountHeartbeats(r, 1) >= 20; }));
  EXPECT_EQ(delegate_.lease_expired(), 0);

  // Heard but unanswered, as behind a connection that stopped forwarding.
  hub_.set_silent(true);
  const absl::Time silent_at = absl::Now();
  ASSERT_TRUE(delegate_.WaitLeaseExpired(absl::Seconds(20)));
  // The last answered heartbeat went out at most one interval before the
  // silence; the deadline is its send time + lease - one interval.
  EXPECT_GE(absl::Now() - silent_at, absl::Milliseconds(350));
  EXPECT_EQ(delegate_.lease_expired(), 1);
  // The stream was given up and a new one opened.
  ASSERT_TRUE(hub_.WaitFor([](const auto& r) { return HasHello(r, 2); }));
  hub_.set_silent(false);
  ASSERT_TRUE(
      hub_.WaitFor([](const auto& r) { return CountHeartbeats(r, 2) >= 1; }));
}

TEST_F(ServerLinkTest, AStreamWhoseHelloIsNotAnsweredIsOpenedAgain) {
  hub_.set_answer_hello(false);
  auto server = FakeServer::Start(hub_);
  ASSERT_NE(server, nullptr);
  auto link = MakeLink(server->address(), absl::Milliseconds(200));
  link->Start();
  ASSERT_TRUE(hub_.WaitFor([](const auto& r) { return HasHello(r, 2); }));
  EXPECT_FALSE(link->connected());
  EXPECT_EQ(CountHeartbeats(hub_.received(), 1), 0)
      << "nothing but the hello before the answer";
  hub_.set_answer_hello(true);
  ASSERT_TRUE(hub_.WaitFor([](const auto& r) {
    for (const Received& m : r) {
      if (m.message.has_heartbeat()) return true;
    }
    return false;
  }));
  EXPECT_EQ(delegate_.lease_expired(), 0) << "no lease before the first answer";
}

// The server ends the stream with its verdict before the hello is even
// written: every try that reached it must report that verdict, never a
// CANCELLED of its own making (which hid the refusal from the operator). On
// a loaded machine a try may also fail to connect at all (UNAVAILABLE from
// the transport); that is not a refusal hidden.
TEST_F(ServerLinkTest, ARefusalIsReportedAsTheServerSaidIt) {
  hub_.set_refuse(true);
  auto server = FakeServer::Start(hub_);
  ASSERT_NE(server, nullptr);
  auto link = MakeLink(server->address());
  link->Start();
  const std::vector<absl::Status> failures = delegate_.WaitFailures(20);
  ASSERT_EQ(failures.size(), 20u);
  int refusals = 0;
  for (const absl::Status& s : failures) {
    if (absl::IsUnavailable(s)) continue;
    EXPECT_TRUE(absl::IsUnauthenticated(s)) << s;
    EXPECT_THAT(std::string(s.message()),
                ::testing::HasSubstr("bad join token"));
    ++refusals;
  }
  EXPECT_GE(refusals, 10) << "most tries reach the server";
  EXPECT_FALSE(link->connected());
}

}  // namespace
}  // namespace trainyard::worker
