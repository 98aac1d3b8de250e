#include "common/clock.h"

#include <thread>

#include "gtest/gtest.h"

namespace trainyard {
namespace {

TEST(FakeClockTest, AdvanceMovesNow) {
  FakeClock clock;
  absl::Time t0 = clock.Now();
  clock.Advance(absl::Seconds(5));
  EXPECT_EQ(clock.Now() - t0, absl::Seconds(5));
}

TEST(FakeClockTest, SleepUntilWakesWhenAdvancedPastDeadline) {
  FakeClock clock;
  absl::Time deadline = clock.Now() + absl::Seconds(10);
  std::thread sleeper([&] { clock.SleepUntil(deadline); });
  clock.Advance(absl::Seconds(4));
  clock.Advance(absl::Seconds(6));
  sleeper.join();  // Would hang if SleepUntil missed the advance.
  EXPECT_GE(clock.Now(), deadline);
}

}  // namespace
}  // namespace trainyard
