#include "engine/dist/socket_collective.h"

#include <atomic>
#include <filesystem>
#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/test_dir.h"
#include "engine/core/file_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

using ::testing::HasSubstr;

SocketCollectiveOptions Options(const std::string& dir, int rank, int world) {
  SocketCollectiveOptions o;
  o.rank = rank;
  o.world_size = world;
  o.rendezvous_file = dir + "/rendezvous";
  o.connect_timeout = absl::Seconds(20);
  o.io_timeout = absl::Seconds(20);
  return o;
}

// Runs body(rank) on one thread per rank and waits for all.
void OnEveryRank(int world, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(body, r);
  for (std::thread& t : threads) t.join();
}

TEST(SocketCollectiveTest, SumsInRankOrderAndEveryRankGetsTheSameBits) {
  TestDir tmp;
  const std::string dir = tmp.path();
  constexpr int kWorld = 3;
  // Values whose float sum depends on the order, so a wrong order shows.
  auto value = [](int rank, int i) {
    return rank == 0 ? 1e8f : (rank == 1 ? -1e8f : 1.0f + 0.5f * i);
  };
  std::vector<std::vector<float>> a(kWorld), b(kWorld);
  std::vector<absl::Status> status(kWorld);
  OnEveryRank(kWorld, [&](int r) {
    auto c = SocketCollective::Connect(Options(dir, r, kWorld));
    if (!c.ok()) {
      status[r] = c.status();
      return;
    }
    EXPECT_EQ((*c)->rank(), r);
    EXPECT_EQ((*c)->world_size(), kWorld);
    for (int call = 0; call < 3 && status[r].ok(); ++call) {
      a[r].assign(5, 0);
      b[r].assign(1000, 0);
      for (int i = 0; i < 5; ++i) a[r][i] = value(r, i);
      for (int i = 0; i < 1000; ++i) b[r][i] = static_cast<float>(r * i);
      const FloatSpan spans[] = {{a[r].data(), 5}, {b[r].data(), 1000}};
      status[r] = (*c)->AllReduceSum(spans);
    }
  });
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    EXPECT_EQ(a[r], a[0]);
    EXPECT_EQ(b[r], b[0]);
  }
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(a[0][i], (value(0, i) + value(1, i)) + value(2, i));
  }
  EXPECT_EQ(b[0][999], 3.0f * 999);
}

// Rank 0 listens on an IPv6 address as well: here the loopback.
TEST(SocketCollectiveTest, RanksMeetOverIpv6) {
  TestDir tmp;
  const std::string dir = tmp.path();
  std::vector<float> x(2);
  std::vector<absl::Status> status(2);
  OnEveryRank(2, [&](int r) {
    SocketCollectiveOptions o = Options(dir, r, 2);
    o.listen_host = "::1";
    auto c = SocketCollective::Connect(o);
    if (!c.ok()) {
      status[r] = c.status();
      return;
    }
    x[r] = static_cast<float>(r + 1);
    const FloatSpan span{&x[r], 1};
    status[r] = (*c)->AllReduceSum({&span, 1});
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    EXPECT_EQ(x[r], 3.0f);
  }
}

TEST(SocketCollectiveTest, OneRankNeedsNoRendezvous) {
  SocketCollectiveOptions o;
  auto c = SocketCollective::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  float x = 2;
  const FloatSpan span{&x, 1};
  EXPECT_TRUE((*c)->AllReduceSum({&span, 1}).ok());
  EXPECT_EQ(x, 2);
}

TEST(SocketCollectiveTest, RefusesBadRanksAndMissingRendezvous) {
  SocketCollectiveOptions o;
  o.world_size = 0;
  EXPECT_THAT(SocketCollective::Connect(o).status().message(),
              HasSubstr("world size must be at least 1"));
  o.world_size = 2;
  o.rank = 2;
  EXPECT_THAT(SocketCollective::Connect(o).status().message(),
              HasSubstr("rank 2 is outside the world of 2 ranks"));
  o.rank = 1;
  EXPECT_THAT(SocketCollective::Connect(o).status().message(),
              HasSubstr("needs a rendezvous file"));
  o.rendezvous_file = "/tmp/x";
  o.rank = 0;
  o.listen_host = "not-an-address";
  EXPECT_THAT(SocketCollective::Connect(o).status().message(),
              HasSubstr("is not an IPv4 or IPv6 address"));
}

TEST(SocketCollectiveTest, AMissingRankTimesOutWithTheCount) {
  TestDir tmp;
  const std::string dir = tmp.path();
  SocketCollectiveOptions o = Options(dir, 0, 3);
  o.connect_timeout = absl::Milliseconds(300);
  const absl::Status s = SocketCollective::Connect(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("only 1 of 3 ranks met"));

  SocketCollectiveOptions leaf = Options(dir, 1, 3);
  leaf.connect_timeout = absl::Milliseconds(300);
  EXPECT_THAT(SocketCollective::Connect(leaf).status().message(),
              HasSubstr("rank 1 could not join rank 0"));
}

// A stop request (SIGTERM) is honoured while the ranks meet, by rank 0
// waiting for the others and by a rank waiting for rank 0 alike.
TEST(SocketCollectiveTest, AStopRequestEndsTheWaitForTheOtherRanks) {
  TestDir tmp;
  const std::string dir = tmp.path();
  for (int rank : {0, 1}) {
    std::atomic<bool> stop{false};
    SocketCollectiveOptions o = Options(dir, rank, 2);
    o.connect_timeout = absl::Minutes(2);
    o.stop = &stop;
    std::thread stopper([&stop] {
      absl::SleepFor(absl::Milliseconds(200));
      stop.store(true);
    });
    const absl::Time start = absl::Now();
    const absl::Status s = SocketCollective::Connect(o).status();
    stopper.join();
    EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << rank << ": " << s;
    EXPECT_LT(absl::Now() - start, absl::Seconds(30)) << "rank " << rank;
  }
}

TEST(SocketCollectiveTest, ALeftoverRendezvousFileIsNotTrusted) {
  TestDir tmp;
  const std::string dir = tmp.path();
  // An earlier attempt's file: a port nobody listens on and an old nonce.
  ASSERT_TRUE(WriteFileDurably(dir + "/rendezvous",
                               "127.0.0.1 1 0123456789abcdef0123456789abcdef\n")
                  .ok());
  std::vector<absl::Status> status(2);
  OnEveryRank(2, [&](int r) {
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    status[r] = SocketCollective::Connect(Options(dir, r, 2)).status();
  });
  EXPECT_TRUE(status[0].ok()) << status[0];
  EXPECT_TRUE(status[1].ok()) << status[1];
}

TEST(SocketCollectiveTest, APeerThatDiesFailsTheOthersAtOnceNamingIt) {
  TestDir tmp;
  const std::string dir = tmp.path();
  std::vector<absl::Status> status(2);
  OnEveryRank(2, [&](int r) {
    auto c = SocketCollective::Connect(Options(dir, r, 2));
    if (!c.ok()) {
      status[r] = c.status();
      return;
    }
    if (r == 1) return;  // closes its socket without reducing
    float x = 1;
    const FloatSpan span{&x, 1};
    status[r] = (*c)->AllReduceSum({&span, 1});
    // Broken for good afterwards.
    EXPECT_EQ((*c)->AllReduceSum({&span, 1}).code(),
              absl::StatusCode::kFailedPrecondition);
  });
  EXPECT_EQ(status[0].code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status[0].message(), HasSubstr("rank 1 closed its connection"));
}

TEST(SocketCollectiveTest, RanksOutOfStepAreCaught) {
  TestDir tmp;
  const std::string dir = tmp.path();
  std::vector<absl::Status> status(2);
  OnEveryRank(2, [&](int r) {
    auto c = SocketCollective::Connect(Options(dir, r, 2));
    if (!c.ok()) {
      status[r] = c.status();
      return;
    }
    std::vector<float> x(r == 0 ? 4 : 5, 1.0f);
    const FloatSpan span{x.data(), static_cast<int64_t>(x.size())};
    status[r] = (*c)->AllReduceSum({&span, 1});
  });
  EXPECT_EQ(status[0].code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status[0].message(), HasSubstr("rank 1 is out of step"));
  // Rank 0 gave up and closed; rank 1 hears that rather than hanging.
  EXPECT_FALSE(status[1].ok());
}

}  // namespace
}  // namespace trainyard::engine
