// Jobs naming GPU models (PendingJob::gpu_models) on clusters of mixed GPUs:
// the matching rule, and every policy placing, spreading, preempting and
// explaining waits only on GPUs of those models.
#include "scheduler/gpu_models.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler_test_util.h"

namespace trainyard::scheduler {
namespace {

using ::testing::HasSubstr;
using testing::MakeSnapshot;
using testing::Node;
using testing::PlanString;
using testing::Share;

constexpr char kH100[] = "NVIDIA H100 80GB HBM3";
constexpr char kA100[] = "NVIDIA A100-SXM4-80GB";

WorkerCapacity Named(WorkerCapacity w, const std::vector<std::string>& names) {
  for (size_t i = 0; i < w.devices.size(); ++i) {
    w.devices[i].name_id = w.GpuNameId(names[i]);
  }
  return w;
}
WorkerCapacity AllNamed(std::string id, int gpus, const char* name) {
  return Named(Node(std::move(id), std::vector<int32_t>(gpus, 1000)),
               std::vector<std::string>(gpus, name));
}
PendingJob Wanting(PendingJob j, std::vector<std::string> models) {
  j.gpu_models = std::move(models);
  return j;
}

const char* const kPolicies[] = {
    "first-fit",         "best-fit",          "fgd",
    "first-fit+preempt", "best-fit+backfill", "fgd+drf+backfill+preempt"};

Plan PlanFor(const std::string& policy, const ClusterSnapshot& s) {
  auto p = MakePlacementPolicy(policy);
  EXPECT_TRUE(p.ok()) << p.status();
  Plan plan = (*p)->Place(s);
  EXPECT_TRUE(CheckPlan(s, plan).ok()) << policy << ": " << PlanString(plan);
  return plan;
}

TEST(GpuModelsTest, SubstringOfTheNameIgnoringAsciiCase) {
  EXPECT_TRUE(GpuModelMatches("H100", kH100));
  EXPECT_TRUE(GpuModelMatches("h100", kH100));
  EXPECT_TRUE(GpuModelMatches("nvidia h100 80gb hbm3", kH100));
  EXPECT_TRUE(GpuModelMatches("A100", kA100));
  EXPECT_FALSE(GpuModelMatches("A100", kH100));
  EXPECT_FALSE(GpuModelMatches("H100 PCIe", kH100));
  EXPECT_FALSE(GpuModelMatches("", kH100));
  EXPECT_FALSE(GpuModelMatches("H100", ""));
  EXPECT_TRUE(AllowsGpu({}, ""));
  EXPECT_TRUE(AllowsGpu({"A100", "H100"}, kH100));
  EXPECT_FALSE(AllowsGpu({"A100", "L40S"}, kH100));
  EXPECT_EQ(DescribeGpuModels({"H100"}), "\"H100\"");
  EXPECT_EQ(DescribeGpuModels({"H100", "A100", "L40S"}),
            "\"H100\", \"A100\" or \"L40S\"");
}

// The A100 worker comes first and is alike in every other way, so a policy
// ignoring the models would put the job there.
TEST(GpuModelsTest, EveryPolicyPlacesOnlyOnMatchingGpus) {
  for (const char* policy : kPolicies) {
    ClusterSnapshot s =
        MakeSnapshot({AllNamed("a", 4, kA100), AllNamed("h", 4, kH100)},
                     {Wanting(Share("j", 1, 2, 1000), {"h100"}),
                      Wanting(Share("k", 2, 1, 500), {"H100", "B200"}),
                      Share("any", 3, 1, 1000)});
    Plan plan = PlanFor(policy, s);
    ASSERT_EQ(plan.placements.size(), 3u) << policy << ": " << PlanString(plan);
    for (const Placement& p : plan.placements) {
      if (p.job_id != "any") {
        EXPECT_EQ(p.worker_id, "h") << policy;
      }
    }
  }
}

// Jobs of one shape but other models in one pass: a policy keeping work by
// shape (FGD's candidate orders) must keep it by models too.
TEST(GpuModelsTest, SameShapeOtherModelsInOnePass) {
  for (const char* policy : kPolicies) {
    std::vector<WorkerCapacity> workers;
    for (int i = 0; i < 3; ++i) {
      workers.push_back(AllNamed(absl::StrCat("a", i), 2, kA100));
      workers.push_back(AllNamed(absl::StrCat("h", i), 2, kH100));
    }
    std::vector<PendingJob> jobs;
    for (int i = 0; i < 6; ++i) {
      jobs.push_back(Wanting(Share(absl::StrCat("j", i), i, 1, 500),
                             {i % 2 == 0 ? "H100" : "A100"}));
    }
    ClusterSnapshot s = MakeSnapshot(workers, jobs);
    Plan plan = PlanFor(policy, s);
    ASSERT_EQ(plan.placements.size(), 6u) << policy << ": " << PlanString(plan);
    for (const Placement& p : plan.placements) {
      const int i = p.job_id.back() - '0';
      EXPECT_EQ(p.worker_id[0], i % 2 == 0 ? 'h' : 'a')
          << policy << ": " << PlanString(plan);
    }
  }
}

TEST(GpuModelsTest, OnAMixedWorkerTakesOnlyTheMatchingDevices) {
  for (const char* policy : kPolicies) {
    ClusterSnapshot s =
        MakeSnapshot({Named(Node("w", {1000, 1000, 1000, 1000}),
                            {kA100, kH100, kA100, kH100})},
                     {Wanting(Share("j", 1, 2, 1000), {"H100"})});
    Plan plan = PlanFor(policy, s);
    ASSERT_EQ(plan.placements.size(), 1u) << policy;
    EXPECT_EQ(plan.placements[0].gpu_indices, (std::vector<int32_t>{1, 3}))
        << policy;
  }
}

TEST(GpuModelsTest, ModelNoWorkerHasIsInfeasibleNamingIt) {
  for (const char* policy : kPolicies) {
    ClusterSnapshot s =
        MakeSnapshot({AllNamed("a", 8, kA100), AllNamed("h", 8, kH100)},
                     {Wanting(Share("j", 1, 1, 1000), {"B200", "GB200"})});
    Plan plan = PlanFor(policy, s);
    ASSERT_EQ(plan.waits.size(), 1u) << policy;
    EXPECT_EQ(plan.waits[0].kind, WaitKind::kInfeasible);
    EXPECT_EQ(plan.waits[0].reason,
              "infeasible: no connected worker has a GPU of model \"B200\" or "
              "\"GB200\" (GPUs here: \"NVIDIA A100-SXM4-80GB\", \"NVIDIA H100 "
              "80GB HBM3\")")
        << policy;
  }
}

// 4 H100s in the cluster but at most 3 on one worker: a one-node job asking
// 4 can never start, and the reason counts only the H100s.
TEST(GpuModelsTest, TooFewMatchingGpusOnOneNodeIsInfeasible) {
  ClusterSnapshot s =
      MakeSnapshot({Named(Node("w", {1000, 1000, 1000, 1000, 1000}),
                          {kA100, kH100, kH100, kH100, kA100}),
                    AllNamed("h", 1, kH100)},
                   {Wanting(Share("j", 1, 4, 1000), {"H100"})});
  Plan plan = PlanFor("first-fit", s);
  ASSERT_EQ(plan.waits.size(), 1u);
  EXPECT_EQ(plan.waits[0].kind, WaitKind::kInfeasible);
  EXPECT_THAT(plan.waits[0].reason,
              HasSubstr("4 whole GPUs of model \"H100\""));
  EXPECT_THAT(plan.waits[0].reason,
              HasSubstr("the largest worker has 3 GPUs of them"));
}

// Spread over nodes, every rank's GPU is an H100: 3 on w and 1 on h, none
// of w's A100s.
TEST(GpuModelsTest, SpreadJobTakesOnlyMatchingGpusOnEveryNode) {
  for (const char* policy : kPolicies) {
    PendingJob j = Wanting(Share("j", 1, 4, 1000), {"H100"});
    j.max_nodes = 0;
    ClusterSnapshot s =
        MakeSnapshot({Named(Node("w", {1000, 1000, 1000, 1000, 1000}),
                            {kA100, kH100, kH100, kH100, kA100}),
                      AllNamed("a", 8, kA100), AllNamed("h", 1, kH100)},
                     {j});
    Plan plan = PlanFor(policy, s);
    ASSERT_EQ(plan.placements.size(), 1u) << policy << PlanString(plan);
    const Placement& p = plan.placements[0];
    EXPECT_EQ(p.worker_id, "w") << policy;
    EXPECT_EQ(p.gpu_indices, (std::vector<int32_t>{1, 2, 3})) << policy;
    ASSERT_EQ(p.more_nodes.size(), 1u) << policy;
    EXPECT_EQ(p.more_nodes[0].worker_id, "h") << policy;
  }
}

// Both workers are full of low-priority jobs; the A100 one's job lost less
// work, so a preemption ignoring the models would stop it.
TEST(GpuModelsTest, PreemptsOnlyJobsOnMatchingGpus) {
  for (const char* policy : {"first-fit+preempt", "best-fit+preempt",
                             "fgd+preempt", "fgd+drf+backfill+preempt"}) {
    WorkerCapacity a = AllNamed("a", 2, kA100);
    WorkerCapacity h = AllNamed("h", 2, kH100);
    std::vector<RunningJob> running;
    ASSERT_TRUE(
        testing::StartRunning(a, Share("ra", 0, 2, 1000), 1.0, running));
    ASSERT_TRUE(
        testing::StartRunning(h, Share("rh", 0, 2, 1000), 100.0, running));
    auto s = ClusterSnapshot::Create(
        {a, h}, {Wanting(Share("j", 1, 2, 1000, 1, /*priority=*/10), {"H100"})},
        {}, running);
    ASSERT_TRUE(s.ok()) << s.status();
    Plan plan = PlanFor(policy, *s);
    ASSERT_EQ(plan.preemptions.size(), 1u) << policy << PlanString(plan);
    EXPECT_EQ(plan.preemptions[0].job_id, "rh") << policy;
  }
}

// A job may not use GPUs of unknown name once it names models.
TEST(GpuModelsTest, UnnamedGpusMatchNoModel) {
  ClusterSnapshot s = MakeSnapshot(
      {Node("w", {1000, 1000})},
      {Wanting(Share("j", 1, 1, 1000), {"H100"}), Share("any", 2, 1, 1000)});
  Plan plan = PlanFor("best-fit", s);
  EXPECT_EQ(PlanString(plan),
            "any@w[0,] j:1:infeasible: no connected worker has a GPU of model "
            "\"H100\" (GPUs here: unnamed); ");
}

// Create() derives every job's mask: one left by the caller (a job taken
// from an earlier snapshot, its models since cleared) counts for nothing.
TEST(GpuModelsTest, CreateSetsTheMaskOfAJobNamingNoModels) {
  PendingJob stale = Share("stale", 1, 1, 1000);
  stale.gpu_model_mask = 0;
  ClusterSnapshot s =
      MakeSnapshot({AllNamed("h", 2, kH100)},
                   {stale, Wanting(Share("h100", 2, 1, 1000), {"H100"})});
  EXPECT_EQ(PlanString(PlanFor("first-fit", s)), "stale@h[0,] h100@h[1,] ");
}

// GPUs share a model slot when every job's models treat their names alike,
// so 70 names are matched exactly when jobs name only a few lists.
TEST(GpuModelsTest, ManyNamesFewKindsMatchExactly) {
  std::vector<WorkerCapacity> workers;
  for (int i = 0; i < 70; ++i) {
    workers.push_back(AllNamed(absl::StrCat("w", i), 1,
                               absl::StrCat("GPU-", 100 + i).c_str()));
  }
  ClusterSnapshot s = MakeSnapshot(
      workers, {Wanting(Share("early", 1, 1, 1000), {"GPU-105"}),
                Wanting(Share("late", 2, 1, 1000), {"GPU-168"}),
                Wanting(Share("all-late", 3, 1, 1000), {"GPU-16"})});
  EXPECT_EQ(PlanString(PlanFor("first-fit", s)),
            "early@w5[0,] late@w68[0,] all-late@w60[0,] ");
}

// Worker i's GPU is named after the bits of i ("GPU-b0-n1-..."), so jobs
// asking "b0" ... "b6" see 70 kinds of GPU: more than the 64 model slots.
std::string BitName(int i) {
  std::string name = "GPU";
  for (int k = 0; k < 7; ++k)
    absl::StrAppend(&name, (i >> k) & 1 ? "-b" : "-n", k);
  return name;
}

// Past 64 kinds, the kinds from the 64th on (here workers 63-69) share the
// last slot: a job may use it only if its models allow all of them. Never
// too lax; a job allowing only some of them waits, told why.
TEST(GpuModelsTest, KindsPastTheSixtyFourthShareTheLastSlot) {
  std::vector<WorkerCapacity> workers;
  for (int i = 0; i < 70; ++i) {
    workers.push_back(AllNamed(absl::StrCat("w", i), 1, BitName(i).c_str()));
  }
  std::vector<PendingJob> jobs;
  for (int k = 0; k < 7; ++k) {
    jobs.push_back(Wanting(Share(absl::StrCat("b", k), k, 1, 1000),
                           {absl::StrCat("b", k)}));
  }
  // Workers 63-69 exactly: every kind sharing the last slot.
  jobs.push_back(
      Wanting(Share("late", 7, 1, 1000), {BitName(63).substr(4), "b6"}));
  jobs.push_back(Wanting(Share("exact", 8, 1, 1000), {BitName(69)}));
  for (const char* policy : kPolicies) {
    ClusterSnapshot s = MakeSnapshot(workers, jobs);
    Plan plan = PlanFor(policy, s);
    for (const Placement& p : plan.placements) {
      const WorkerCapacity& w = *s.FindWorker(p.worker_id);
      EXPECT_TRUE(
          AllowsGpu(s.FindJob(p.job_id)->gpu_models, w.GpuName(w.devices[0])))
          << policy << ": " << PlanString(plan);
    }
    ASSERT_EQ(plan.waits.size(), 2u) << policy << ": " << PlanString(plan);
    for (const JobWait& w : plan.waits) {
      EXPECT_EQ(w.kind, WaitKind::kInfeasible) << policy;
      EXPECT_THAT(w.reason, HasSubstr("are here, but among more than 64 kinds"))
          << policy;
    }
    EXPECT_EQ(plan.waits[0].job_id, "b6") << policy;  // only workers 64-69
    EXPECT_EQ(plan.waits[1].job_id, "exact") << policy;
  }
}

}  // namespace
}  // namespace trainyard::scheduler
