#include "engine/core/early_stopping.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

using ::testing::HasSubstr;

TEST(EarlyStoppingTest, StopsAfterPatienceEvaluationsWithoutImprovement) {
  EarlyStopping es(/*patience=*/2, /*min_delta=*/0);
  EXPECT_FALSE(es.Observe(10, 1.0).stop);  // the first sets the best
  EXPECT_FALSE(es.Observe(20, 0.8).stop);  // better
  EXPECT_FALSE(es.Observe(30, 0.8).stop);  // equal is not better: 1
  EXPECT_FALSE(es.Observe(40, 0.7).stop);  // better again: back to 0
  EXPECT_FALSE(es.Observe(50, 0.9).stop);  // 1
  EXPECT_TRUE(es.Observe(60, 0.75).stop);  // 2: stop
  EXPECT_TRUE(es.should_stop());
  EXPECT_EQ(es.state().best_step, 40);
  EXPECT_DOUBLE_EQ(es.state().best_loss, 0.7);
  EXPECT_EQ(es.Reason(),
            "eval loss did not improve on 0.7000 (step 40) for 2 evaluations");
}

TEST(EarlyStoppingTest, MinDeltaIsTheImprovementThatCounts) {
  EarlyStopping es(/*patience=*/1, /*min_delta=*/0.05);
  EXPECT_FALSE(es.Observe(1, 1.0).stop);
  EXPECT_FALSE(es.Observe(2, 0.9).stop);  // 0.1 better: counts
  EXPECT_TRUE(es.Observe(3, 0.86).stop);  // 0.04 better: does not
  EXPECT_EQ(es.state().best_step, 2);
  EXPECT_EQ(es.Reason(),
            "eval loss did not improve on 0.9000 (step 2) for 1 evaluation");
}

TEST(EarlyStoppingTest, ANonFiniteLossNeverImproves) {
  EarlyStopping es(/*patience=*/2, /*min_delta=*/0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(es.Observe(1, nan).stop);  // no best yet, and none taken
  EXPECT_EQ(es.state().best_step, -1);
  EXPECT_FALSE(es.Observe(2, 2.0).stop);
  EXPECT_FALSE(es.Observe(3, std::numeric_limits<double>::infinity()).stop);
  EXPECT_TRUE(es.Observe(4, nan).stop);
}

TEST(EarlyStoppingTest, SaysWhichEvaluationIsANewBest) {
  EarlyStopping es(/*patience=*/0, /*min_delta=*/0, /*track_best=*/true);
  EXPECT_TRUE(es.enabled());
  EXPECT_TRUE(es.Observe(10, 1.0).improved);
  EXPECT_FALSE(es.Observe(20, 1.0).improved);
  EXPECT_TRUE(es.Observe(30, 0.5).improved);
  for (int i = 4; i < 20; ++i) {
    const EarlyStopping::Verdict v = es.Observe(i * 10, 0.9);
    EXPECT_FALSE(v.improved || v.stop);  // no patience: never stops
  }
  EXPECT_EQ(es.state().best_step, 30);
  EXPECT_FALSE(es.should_stop());
}

TEST(EarlyStoppingTest, OffNeverStops) {
  EarlyStopping off(0, 0);
  EXPECT_FALSE(off.enabled());
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(off.Observe(i, 5.0).stop);
  EXPECT_FALSE(off.should_stop());
}

TEST(EarlyStoppingTest, RestoresAStateAndRefusesImpossibleOnes) {
  EarlyStopping es(/*patience=*/3, 0);
  ASSERT_TRUE(es.Restore({0.5, 20, 2}).ok());
  EXPECT_FALSE(es.should_stop());
  EXPECT_TRUE(es.Observe(50, 0.6).stop);  // the third without improvement
  EarlyStopping stopped(3, 0);
  ASSERT_TRUE(stopped.Restore({0.5, 20, 3}).ok());
  EXPECT_TRUE(stopped.should_stop());  // a run that had already stopped

  EarlyStopping bad(3, 0);
  EXPECT_THAT(bad.Restore({0.5, 20, -1}).message(),
              HasSubstr("cannot come from a run"));
  EXPECT_FALSE(bad.Restore({0, -1, 2}).ok());
  EXPECT_FALSE(
      bad.Restore({std::numeric_limits<double>::infinity(), 3, 0}).ok());
  EXPECT_EQ(bad.state().best_step, -1);  // left as it was
}

}  // namespace
}  // namespace trainyard::engine
