#include "engine/core/lr_schedule.h"

#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

TEST(LrScheduleTest, LinearWarmupThenCosineToTheFloor) {
  const LrSchedule s{/*base_lr=*/1.0, /*warmup_steps=*/10,
                     /*total_steps=*/110, /*min_lr_ratio=*/0.1};
  EXPECT_DOUBLE_EQ(s.At(0), 0.1);
  EXPECT_DOUBLE_EQ(s.At(4), 0.5);
  EXPECT_DOUBLE_EQ(s.At(9), 1.0);
  EXPECT_DOUBLE_EQ(s.At(10), 1.0);                // cosine starts at the peak
  EXPECT_NEAR(s.At(60), 0.1 + 0.9 * 0.5, 1e-12);  // halfway
  EXPECT_NEAR(s.At(110), 0.1, 1e-12);
  EXPECT_NEAR(s.At(500), 0.1, 1e-12);  // clamped past the end
  for (int64_t t = 11; t <= 110; ++t) EXPECT_LE(s.At(t), s.At(t - 1));
}

TEST(LrScheduleTest, RatioOneIsConstantAndNoWarmupStartsAtPeak) {
  const LrSchedule flat{0.5, 0, 100, 1.0};
  for (int64_t t : {0, 1, 50, 99}) EXPECT_DOUBLE_EQ(flat.At(t), 0.5);
  const LrSchedule cosine{0.5, 0, 100, 0.0};
  EXPECT_DOUBLE_EQ(cosine.At(0), 0.5);
  EXPECT_NEAR(cosine.At(100), 0.0, 1e-12);
}

TEST(LrScheduleTest, WarmupLongerThanTheRun) {
  const LrSchedule s{1.0, 100, 10, 0.1};
  EXPECT_DOUBLE_EQ(s.At(9), 0.1);
}

}  // namespace
}  // namespace trainyard::engine
