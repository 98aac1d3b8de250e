#include "scheduler/placement_policy.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::scheduler {
namespace {

using ::testing::HasSubstr;

TEST(MakePlacementPolicyTest, KnowsFirstFit) {
  auto policy = MakePlacementPolicy("first-fit");
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ((*policy)->name(), "first-fit");
}

TEST(MakePlacementPolicyTest, KnowsEveryBaseWithAndWithoutFeatures) {
  for (const std::string& base : PlacementPolicyNames()) {
    for (const std::string& name : {base, base + "+drf+backfill+preempt"}) {
      auto policy = MakePlacementPolicy(name);
      ASSERT_TRUE(policy.ok()) << name << ": " << policy.status();
      EXPECT_EQ((*policy)->name(), name);
    }
  }
  EXPECT_EQ(PlacementPolicyNames(),
            (std::vector<std::string>{"first-fit", "best-fit", "fgd"}));
}

TEST(MakePlacementPolicyTest, UnknownNameIsInvalidArgumentListingKnownOnes) {
  auto policy = MakePlacementPolicy("best-guess");
  ASSERT_FALSE(policy.ok());
  EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(policy.status().message(), HasSubstr("best-guess"));
  EXPECT_THAT(policy.status().message(), HasSubstr("first-fit"));
}

TEST(ClusterSnapshotTest, RejectsBrokenInvariants) {
  EXPECT_FALSE(ClusterSnapshot::Create({{"w", 1, 2, {}, {}}}, {}).ok());
  EXPECT_FALSE(ClusterSnapshot::Create({{"w", 1, 1, {0}, {1}}}, {}).ok());
  EXPECT_FALSE(ClusterSnapshot::Create({{"w", 1, 1, {0, 0}, {}}}, {}).ok());
  EXPECT_FALSE(
      ClusterSnapshot::Create({{"w", 1, 1, {}, {}}, {"w", 1, 1, {}, {}}}, {})
          .ok());
  EXPECT_FALSE(ClusterSnapshot::Create({}, {{"", 0, 0, 0, 1}}).ok());
  EXPECT_FALSE(ClusterSnapshot::Create({}, {{"j", 0, 0, -1, 1}}).ok());
  EXPECT_FALSE(ClusterSnapshot::Create({}, {{"j", 0, 0, 0, 0}}).ok());
  auto s = ClusterSnapshot::Create({{"w", 2, 1, {0, 1, 2}, {2, 0}}},
                                   {{"j", 0, 0, 1, 0}});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->workers()[0].free_gpus, (std::vector<int32_t>{0, 2}));
  EXPECT_NE(s->FindJob("j"), nullptr);
  EXPECT_EQ(s->FindWorker("nope"), nullptr);
}

TEST(CheckPlanTest, CatchesOverCommitAndUnknownIds) {
  auto s = ClusterSnapshot::Create(
      {{"w", 1, 1, {0, 1}, {1}}},
      {{"a", 0, 1, 0, 1}, {"b", 0, 2, 0, 1}, {"g", 0, 3, 1, 0}});
  ASSERT_TRUE(s.ok());
  Plan two_on_one_slot{{{"a", "w", {}}, {"b", "w", {}}}, {}};
  EXPECT_THAT(CheckPlan(*s, two_on_one_slot).message(),
              HasSubstr("over-committed"));
  Plan busy_gpu{{{"g", "w", {0}}}, {}};
  EXPECT_THAT(CheckPlan(*s, busy_gpu).message(), HasSubstr("not free"));
  Plan unknown_worker{{{"a", "x", {}}}, {}};
  EXPECT_FALSE(CheckPlan(*s, unknown_worker).ok());
  Plan unknown_job{{{"zz", "w", {}}}, {}};
  EXPECT_FALSE(CheckPlan(*s, unknown_job).ok());
  Plan twice{{{"a", "w", {}}, {"a", "w", {}}}, {}};
  EXPECT_FALSE(CheckPlan(*s, twice).ok());
  Plan ok{{{"a", "w", {}}, {"g", "w", {1}}},
          {{"b", WaitKind::kRetryLater, ""}}};
  EXPECT_TRUE(CheckPlan(*s, ok).ok());
}

}  // namespace
}  // namespace trainyard::scheduler
