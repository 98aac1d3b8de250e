#include "engine/lease_watch.h"

#include <unistd.h>

#include <atomic>
#include <string>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

class LeaseWatchTest : public ::testing::Test {
 protected:
  LeaseWatchTest() {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    read_ = fds[0];
    write_ = fds[1];
  }
  ~LeaseWatchTest() override {
    watch_.reset();
    close(read_);
    if (write_ >= 0) close(write_);
  }
  void Tell(const std::string& text) {
    ASSERT_EQ(write(write_, text.data(), text.size()),
              static_cast<ssize_t>(text.size()));
  }
  void StartWatch() {
    auto w = LeaseWatch::Start(read_, [this](absl::Duration overdue) {
      overdue_ = overdue;
      expired_.Notify();
    });
    ASSERT_TRUE(w.ok()) << w.status();
    watch_ = *std::move(w);
  }

  int read_ = -1, write_ = -1;
  absl::Notification expired_;
  absl::Duration overdue_;
  std::unique_ptr<LeaseWatch> watch_;
};

TEST_F(LeaseWatchTest, ALeaseNotRenewedExpires) {
  StartWatch();
  const int64_t start = MonotonicMillis();
  Tell("150\n");
  ASSERT_TRUE(expired_.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_GE(MonotonicMillis() - start, 150);
  EXPECT_GE(overdue_, absl::ZeroDuration());
}

TEST_F(LeaseWatchTest, RenewalsKeepItAliveAndMinusOneMeansNoLease) {
  StartWatch();
  for (int i = 0; i < 6; ++i) {
    Tell("300\n");
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_FALSE(expired_.HasBeenNotified());
  Tell("-1\n");
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_FALSE(expired_.HasBeenNotified());
}

TEST_F(LeaseWatchTest, LinesMayArriveInPiecesAndBadOnesAreIgnored) {
  StartWatch();
  Tell("-1\nbogus\n-7\n2");
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(expired_.HasBeenNotified()) << "\"2\" is not a line yet";
  Tell("00\n");
  ASSERT_TRUE(expired_.WaitForNotificationWithTimeout(absl::Seconds(10)));
}

// The worker gone (its end closed): the time last told still holds.
TEST_F(LeaseWatchTest, EndOfFileKeepsTheTimeTold) {
  StartWatch();
  Tell("200\n");
  close(write_);
  write_ = -1;
  ASSERT_TRUE(expired_.WaitForNotificationWithTimeout(absl::Seconds(10)));
}

TEST_F(LeaseWatchTest, NothingToldNothingExpiresAndStopIsPrompt) {
  StartWatch();
  absl::SleepFor(absl::Milliseconds(100));
  const absl::Time before = absl::Now();
  watch_.reset();
  EXPECT_LT(absl::Now() - before, absl::Seconds(2));
  EXPECT_FALSE(expired_.HasBeenNotified());
  EXPECT_FALSE(LeaseWatch::Start(-1, [](absl::Duration) {}).ok());
}

}  // namespace
}  // namespace trainyard::engine
