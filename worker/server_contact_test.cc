#include "worker/server_contact.h"

#include "gtest/gtest.h"

namespace trainyard::worker {
namespace {

const absl::Time kT0 = absl::UnixEpoch() + absl::Hours(1);
const absl::Duration kLease = absl::Seconds(10);
const absl::Duration kBeat = absl::Seconds(1);

TEST(ServerContactTest, UnarmedUntilTheHelloIsAnswered) {
  ServerContact c;
  EXPECT_FALSE(c.armed());
  EXPECT_EQ(c.Deadline(), absl::InfiniteFuture());
  c.HeartbeatSent(1, kT0);
  c.HeartbeatAnswered(1);
  EXPECT_EQ(c.Deadline(), absl::InfiniteFuture());
}

TEST(ServerContactTest, CountsFromTheSendingOfTheLastAnsweredHeartbeat) {
  ServerContact c;
  c.HelloAnswered(kT0, kLease, kBeat);
  // The lease, less one heartbeat interval to stop the jobs in.
  EXPECT_EQ(c.Deadline(), kT0 + kLease - kBeat);
  c.HeartbeatSent(1, kT0 + absl::Seconds(1));
  c.HeartbeatSent(2, kT0 + absl::Seconds(2));
  c.HeartbeatSent(3, kT0 + absl::Seconds(3));
  EXPECT_EQ(c.Deadline(), kT0 + kLease - kBeat) << "sent is not heard";
  c.HeartbeatAnswered(2);  // the answer to 1 was lost with nothing else
  EXPECT_EQ(c.Deadline(), kT0 + absl::Seconds(2) + kLease - kBeat);
  c.HeartbeatAnswered(2);  // repeated: no change
  c.HeartbeatAnswered(1);  // out of order: no change
  EXPECT_EQ(c.Deadline(), kT0 + absl::Seconds(2) + kLease - kBeat);
  c.HeartbeatAnswered(3);
  EXPECT_EQ(c.Deadline(), kT0 + absl::Seconds(3) + kLease - kBeat);
}

TEST(ServerContactTest, AShortLeaseKeepsThreeQuartersOfIt) {
  ServerContact c;
  c.HelloAnswered(kT0, absl::Seconds(2), absl::Seconds(1));
  EXPECT_EQ(c.Deadline(), kT0 + absl::Milliseconds(1500));
}

TEST(ServerContactTest, ANewStreamForgetsUnansweredHeartbeats) {
  ServerContact c;
  c.HelloAnswered(kT0, kLease, kBeat);
  c.HeartbeatSent(1, kT0 + absl::Seconds(5));
  c.NewStream();
  c.HeartbeatAnswered(1);  // from nowhere: the old stream's 1 is gone
  EXPECT_EQ(c.Deadline(), kT0 + kLease - kBeat);
}

TEST(ServerContactTest, ExpireDisarmsUntilTheNextHello) {
  ServerContact c;
  c.HelloAnswered(kT0, kLease, kBeat);
  c.Expire();
  EXPECT_EQ(c.Deadline(), absl::InfiniteFuture());
  c.HelloAnswered(kT0 + absl::Seconds(30), kLease, kBeat);
  EXPECT_EQ(c.Deadline(), kT0 + absl::Seconds(30) + kLease - kBeat);
}

TEST(ServerContactTest, NoLeaseArmsNothing) {
  ServerContact c;
  c.HelloAnswered(kT0, absl::ZeroDuration(), kBeat);
  EXPECT_FALSE(c.armed());
  EXPECT_EQ(c.Deadline(), absl::InfiniteFuture());
}

}  // namespace
}  // namespace trainyard::worker
