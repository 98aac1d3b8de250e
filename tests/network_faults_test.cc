// Network faults between a worker and the server, made by a TcpProxy on the
// worker's connection: the connection dropped (Cut) or silently stalled
// (Blackhole) past the worker's lease. The server declares the worker lost
// and resumes its job on another worker; the cut-off worker, hearing
// nothing from the server, stops its attempt on its own before the server
// re-queues it, so the job never runs in two places, even if the worker
// never came back. When the network heals, the worker reconnects and the
// server fences its stale attempt by number; the job finishes once.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/proto_time.h"
#include "gtest/gtest.h"
#include "tests/harness.h"
#include "tests/tcp_proxy.h"

namespace trainyard::itest {
namespace {
namespace v1 = trainyard::v1;

constexpr int kHeartbeatMs = 300;
constexpr int kLeaseMs = 1500;

// When `pid` (not our child) ended, as seen at once through a pidfd; nullopt
// if it still runs after `timeout`.
std::optional<absl::Time> WaitForProcessEnd(pid_t pid, absl::Duration timeout) {
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) {
    if (errno == ESRCH) return absl::Now();  // gone already
    ADD_FAILURE() << "pidfd_open(" << pid << "): " << strerror(errno);
    return std::nullopt;
  }
  pollfd p{fd, POLLIN, 0};
  int ready;
  do {
    ready = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
  } while (ready < 0 && errno == EINTR);
  close(fd);
  if (ready != 1) return std::nullopt;
  return absl::Now();
}

class NetworkFaultsTest : public ClusterTest {
 protected:
  void TearDown() override {
    if (cut_ != nullptr) cut_->process().Stop(Scaled(absl::Seconds(10)));
    cut_.reset();
    proxy_.reset();
    ClusterTest::TearDown();
  }

  // The server, a worker "cut" that reaches it through the proxy only, and
  // a worker "spare" that reaches it directly.
  absl::Status StartCluster() {
    RETURN_IF_ERROR(StartServer(
        {.heartbeat_interval_ms = kHeartbeatMs, .worker_lease_ms = kLeaseMs}));
    ASSIGN_OR_RETURN(proxy_, TcpProxy::Start(server().address()));
    ASSIGN_OR_RETURN(
        cut_, WorkerProcess::Start(dir(), proxy_->address(), {.name = "cut"}));
    return WaitForReadyWorkers(cluster(), {"cut"}, StartTimeout());
  }

  // Runs a job on "cut", breaks its connection with `fault` past the lease,
  // and checks what the file comment promises.
  void CutOffPastTheLease(void (TcpProxy::*fault)());

  std::unique_ptr<TcpProxy> proxy_;
  std::unique_ptr<WorkerProcess> cut_;
};

void NetworkFaultsTest::CutOffPastTheLease(void (TcpProxy::*fault)()) {
  YARD_ASSERT_OK(StartCluster());
  // Long enough to still run when the lease runs out, and to leave a
  // checkpoint to resume from.
  const MnistSpec spec = OutlivesALeaseSpec("cut-off");
  YARD_ASSIGN_OR_FAIL(const std::string id,
                      SubmitAndWaitForACheckpoint(spec.ToProto()));
  YARD_ASSERT_OK(StartReadyWorker({.name = "spare"}).status());
  const std::vector<pid_t> stale = cut_->TrainerPids();
  ASSERT_EQ(stale.size(), 1u);

  (*proxy_.*fault)();
  const absl::Time fault_at = absl::Now();
  // Nobody can tell the worker: it stops the attempt by itself.
  const std::optional<absl::Time> stale_end =
      WaitForProcessEnd(stale[0], Scaled(absl::Milliseconds(3 * kLeaseMs)));
  ASSERT_TRUE(stale_end.has_value())
      << "the cut-off worker kept running its attempt past the lease";
  EXPECT_GE(*stale_end - fault_at, absl::Milliseconds(kLeaseMs / 2))
      << "stopped before its lease could have run out";
  EXPECT_TRUE(cut_->process().Running()) << "the worker itself lives on";

  YARD_ASSERT_OK(WaitForWorkerLost(cluster(), "cut", JobTimeout()));
  YARD_ASSIGN_OR_FAIL(v1::JobEvent resumed,
                      WaitForEvent(jobs(), id, "attempt 2 running",
                                   JobTimeout(), [](const v1::JobEvent& e) {
                                     return IsStateChangeTo(e, v1::RUNNING) &&
                                            e.state_change().attempt() == 2;
                                   }));
  EXPECT_EQ(resumed.state_change().worker_id(), "spare");
  YARD_ASSIGN_OR_FAIL(v1::Job handed_back, GetJob(jobs(), id));
  ASSERT_GE(handed_back.attempts_size(), 2) << handed_back.DebugString();
  // The attempt ended on the worker before the server gave the job back:
  // the two attempts never ran at the same time.
  const absl::Time requeued = FromProtoTime(handed_back.attempts(0).end_time());
  EXPECT_LT(*stale_end, requeued);
  EXPECT_LT(*stale_end, FromProtoTime(resumed.time()));
  std::printf(
      "network fault: the cut-off worker stopped its attempt %s after the "
      "fault, %s before the server re-queued the job\n",
      absl::FormatDuration(*stale_end - fault_at).c_str(),
      absl::FormatDuration(requeued - *stale_end).c_str());

  // Healed: the worker comes back and its stale attempt is fenced.
  proxy_->Heal();
  YARD_ASSERT_OK(WaitForReadyWorkers(cluster(), {"cut"}, StartTimeout()));
  const std::string fenced =
      absl::StrCat("stopping stale attempt 1 of job ", id, " on worker cut");
  YARD_ASSERT_OK(PollUntil(fenced, StartTimeout(), [&] {
    return ReadFileOrEmpty(server().process().options().stderr_path)
               .find(fenced) != std::string::npos;
  }));
  EXPECT_TRUE(cut_->TrainerPids().empty());

  YARD_ASSIGN_OR_FAIL(v1::Job job, WaitForTerminal(jobs(), id, JobTimeout()));
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.DebugString();
  ASSERT_EQ(job.attempts_size(), 2) << job.DebugString();
  EXPECT_EQ(job.attempts(0).worker_id(), "cut");
  EXPECT_EQ(job.attempts(0).outcome(), v1::QUEUED);
  // The server's verdict stands; the worker's late reports changed nothing.
  EXPECT_EQ(job.attempts(0).reason(), "worker cut lost");
  EXPECT_EQ(job.attempts(1).worker_id(), "spare");
  EXPECT_EQ(job.attempts(1).outcome(), v1::SUCCEEDED);
  EXPECT_GT(job.attempts(1).resumed_from_step(), 0);
  WatchResult all = Watch(jobs(), id, 0, JobTimeout());
  ASSERT_TRUE(all.status.ok()) << all.status.error_message();
  EXPECT_EQ(CountTrainerEvents(all.events, v1::TrainerEvent::kFinished), 1)
      << "ran to completion once\n"
      << DescribeEvents(all.events);
  EXPECT_EQ(CountTrainerEvents(all.events, v1::TrainerEvent::kStarted), 2)
      << DescribeEvents(all.events);
  EXPECT_TRUE(ConsecutiveToTerminal(all.events, 1, v1::SUCCEEDED));
}

TEST_F(NetworkFaultsTest, DroppedConnectionPastTheLease) {
  CutOffPastTheLease(&TcpProxy::Cut);
}

TEST_F(NetworkFaultsTest, BlackholedConnectionPastTheLease) {
  CutOffPastTheLease(&TcpProxy::Blackhole);
}

// The proxy itself: bytes both ways, a cut closes, a blackhole holds bytes
// until healed.
TEST(TcpProxyTest, ForwardsCutsAndHoldsBytes) {
  // An echo target on a loopback port.
  const int listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listen_fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
            0);
  ASSERT_EQ(listen(listen_fd, 8), 0);
  ASSERT_EQ(getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len),
            0);
  std::thread echo([listen_fd] {
    while (true) {
      const int c = accept(listen_fd, nullptr, nullptr);
      if (c < 0) return;
      char buf[256];
      ssize_t n;
      while ((n = read(c, buf, sizeof(buf))) > 0) {
        if (write(c, buf, static_cast<size_t>(n)) != n) break;
      }
      close(c);
    }
  });
  EXPECT_FALSE(TcpProxy::Start("10.0.0.1:80").ok()) << "loopback only";
  EXPECT_FALSE(TcpProxy::Start("127.0.0.1").ok());
  YARD_ASSIGN_OR_FAIL(
      std::unique_ptr<TcpProxy> proxy,
      TcpProxy::Start(absl::StrCat("127.0.0.1:", ntohs(addr.sin_port))));

  auto connect_proxy = [&] {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int port = 0;
    EXPECT_TRUE(absl::SimpleAtoi(
        proxy->address().substr(proxy->address().rfind(':') + 1), &port));
    to.sin_port = htons(static_cast<uint16_t>(port));
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
    return fd;
  };
  // Reads `n` bytes within `timeout`; what came.
  auto read_for = [](int fd, size_t n, absl::Duration timeout) {
    std::string got;
    const absl::Time deadline = absl::Now() + timeout;
    while (got.size() < n) {
      pollfd p{fd, POLLIN, 0};
      const int ms = static_cast<int>(std::max<int64_t>(
          0, absl::ToInt64Milliseconds(deadline - absl::Now())));
      if (poll(&p, 1, ms) != 1) break;
      char buf[256];
      const ssize_t r = read(fd, buf, sizeof(buf));
      if (r <= 0) break;
      got.append(buf, static_cast<size_t>(r));
    }
    return got;
  };

  int fd = connect_proxy();
  ASSERT_EQ(write(fd, "hello", 5), 5);
  EXPECT_EQ(read_for(fd, 5, absl::Seconds(10)), "hello");

  proxy->Blackhole();
  ASSERT_EQ(write(fd, "held", 4), 4);
  EXPECT_EQ(read_for(fd, 4, absl::Milliseconds(300)), "") << "held back";
  proxy->Heal();
  EXPECT_EQ(read_for(fd, 4, absl::Seconds(10)), "held");

  proxy->Cut();
  EXPECT_EQ(read_for(fd, 1, absl::Seconds(10)), "") << "closed";
  close(fd);
  fd = connect_proxy();  // refused: accepted and closed at once
  EXPECT_EQ(read_for(fd, 1, absl::Seconds(10)), "");
  close(fd);
  proxy->Heal();
  fd = connect_proxy();
  ASSERT_EQ(write(fd, "again", 5), 5);
  EXPECT_EQ(read_for(fd, 5, absl::Seconds(10)), "again");
  close(fd);
  EXPECT_EQ(proxy->accepted(), 3);
  proxy.reset();
  shutdown(listen_fd, SHUT_RDWR);
  close(listen_fd);
  echo.join();
}

}  // namespace
}  // namespace trainyard::itest
