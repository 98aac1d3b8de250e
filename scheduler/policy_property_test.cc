// Randomized, seeded properties every placement policy must keep.
#include <algorithm>
#include <cctype>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/gpu_models.h"
#include "scheduler/packing_pass.h"
#include "scheduler/placement_policy.h"
#include "scheduler/preemption.h"
#include "scheduler/scheduler_test_util.h"

namespace trainyard::scheduler {
namespace {

using namespace ::trainyard::scheduler::testing;  // NOLINT

// Whether `job` would fit some worker, or for a job that may spread its
// ranks, at most max_nodes workers, once the plan's placements are made and
// every lower-priority preemptible job stopped (all its parts).
bool RoomByPreempting(const ClusterSnapshot& s, const Plan& plan,
                      const PendingJob& job, bool exclusive) {
  std::vector<WorkerCapacity> free = s.workers();
  auto at = [&](const std::string& id) {
    return static_cast<size_t>(s.FindWorker(id) - s.workers().data());
  };
  auto take = [&](const PendingJob& placed, bool exclusive,
                  const std::string& worker, int32_t ranks,
                  const std::vector<int32_t>& gpus) {
    WorkerCapacity& w = free[at(worker)];
    std::vector<size_t> positions;
    for (int32_t g : gpus) {
      for (size_t i = 0; i < w.devices.size(); ++i) {
        if (w.devices[i].index == g) positions.push_back(i);
      }
    }
    Take(w, PartOf(placed, ranks), DemandOf(placed, exclusive), positions);
  };
  for (const Placement& p : plan.placements) {
    const PendingJob& placed = *s.FindJob(p.job_id);
    take(placed, p.exclusive, p.worker_id,
         p.more_nodes.empty() ? RanksOf(placed) : p.more_nodes[0].first_rank,
         p.gpu_indices);
    for (const PlacementPart& part : p.more_nodes) {
      take(placed, p.exclusive, part.worker_id, part.ranks, part.gpu_indices);
    }
  }
  bool any_lower = false;
  for (const RunningJob& r : s.running()) {
    if (!r.preemptible || r.priority >= job.priority) continue;
    GiveBack(free[at(r.worker_id)], r);
    for (const RunningPart& part : r.more_parts) {
      GiveBack(free[at(part.worker_id)], r);
    }
    any_lower = true;
  }
  if (!any_lower) return false;
  const GpuDemand demand = DemandOf(job, exclusive);
  std::vector<int32_t> room;
  for (const WorkerCapacity& w : free) {
    if (FitsNow(w, job, demand)) return true;
    room.push_back(RanksFitting(w, job, demand, RanksOf(job), false));
  }
  return MaySpread(job) && !SpreadOver(job, room).empty();
}

class PolicyPropertyTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<PlacementPolicy> policy_ = *MakePlacementPolicy(GetParam());
};

// The GPUs `gpu_indices` of worker `worker_id` are all of models `job`
// allows, by name (CheckPlan goes by GpuCapacity::model_slot).
bool OfItsModels(const ClusterSnapshot& s, const PendingJob& job,
                 const std::string& worker_id,
                 const std::vector<int32_t>& gpu_indices) {
  const WorkerCapacity& w = *s.FindWorker(worker_id);
  for (int32_t index : gpu_indices) {
    for (const GpuCapacity& g : w.devices) {
      if (g.index == index && !AllowsGpu(job.gpu_models, w.GpuName(g))) {
        return false;
      }
    }
  }
  return true;
}

// CheckPlan replays the plan on the free capacity and fails on any GPU
// memory, compute, CPU, host memory or slot over-commit, and on a gang that
// got fewer GPUs than it asked (a placement names the workers of all its
// ranks, so a gang is placed whole or not at all). Jobs naming GPU models
// get only GPUs of those models.
TEST_P(PolicyPropertyTest, NeverOverCommitsAndAccountsForEveryJob) {
  int placed_with_models = 0;
  for (uint32_t seed = 1; seed <= 400; ++seed) {
    ClusterSnapshot s = RandomSnapshot(seed);
    Plan plan = policy_->Place(s);
    ASSERT_TRUE(CheckPlan(s, plan).ok())
        << "seed " << seed << ": " << CheckPlan(s, plan);
    ASSERT_EQ(plan.placements.size() + plan.waits.size(), s.pending().size())
        << "seed " << seed;
    for (const Placement& p : plan.placements) {
      size_t gpus = p.gpu_indices.size();
      for (const PlacementPart& part : p.more_nodes) {
        gpus += part.gpu_indices.size();
      }
      const PendingJob& job = *s.FindJob(p.job_id);
      ASSERT_EQ(static_cast<int32_t>(gpus), job.gpus);
      if (job.max_nodes == 1) {
        ASSERT_TRUE(p.more_nodes.empty());
      }
      EXPECT_TRUE(OfItsModels(s, job, p.worker_id, p.gpu_indices))
          << "seed " << seed << " job " << job.id;
      for (const PlacementPart& part : p.more_nodes) {
        EXPECT_TRUE(OfItsModels(s, job, part.worker_id, part.gpu_indices))
            << "seed " << seed << " job " << job.id;
      }
      placed_with_models += !job.gpu_models.empty();
    }
  }
  EXPECT_GT(placed_with_models, 40);  // the generator names models
}

TEST_P(PolicyPropertyTest, SameSeedSamePlan) {
  for (uint32_t seed = 1; seed <= 100; ++seed) {
    EXPECT_EQ(PlanString(policy_->Place(RandomSnapshot(seed))),
              PlanString(policy_->Place(RandomSnapshot(seed))))
        << "seed " << seed;
  }
}

// A job that waits as infeasible fits no worker even when idle; one that
// waits to retry later would fit some idle worker.
TEST_P(PolicyPropertyTest, InfeasibleMeansNoIdleWorkerFits) {
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    ClusterSnapshot s = RandomSnapshot(seed);
    std::vector<WorkerCapacity> idle = s.workers();
    for (WorkerCapacity& w : idle) {
      w.free_cpu_slots = w.cpu_slots;
      w.free_cpu_milli = w.cpu_milli;
      w.free_memory_bytes = w.memory_bytes;
      for (GpuCapacity& g : w.devices) {
        g.free_compute_milli = kWholeGpuMilli;
        g.free_memory_bytes = g.memory_bytes;
      }
    }
    for (const JobWait& wait : policy_->Place(s).waits) {
      ClusterSnapshot alone = MakeSnapshot(idle, {*s.FindJob(wait.job_id)});
      const bool placed_alone = !policy_->Place(alone).placements.empty();
      EXPECT_EQ(wait.kind == WaitKind::kInfeasible, !placed_alone)
          << "seed " << seed << " job " << wait.job_id << ": " << wait.reason;
    }
  }
}

// Victims always have lower priority than the job they make room for, and
// the highest-priority waiting job is never kept waiting by lower-priority
// jobs it may preempt: if stopping them on some worker would make room for
// it, the plan stops some.
TEST_P(PolicyPropertyTest, HigherPriorityIsNotKeptWaitingByLower) {
  if (GetParam().find("preempt") == std::string::npos) GTEST_SKIP();
  int preempting_plans = 0, spread_victims = 0, spread_holds = 0;
  for (uint32_t seed = 1; seed <= 400; ++seed) {
    ClusterSnapshot s = RandomSnapshot(seed);
    Plan plan = policy_->Place(s);
    for (const Preemption& p : plan.preemptions) {
      const RunningJob* victim = nullptr;
      for (const RunningJob& r : s.running()) {
        if (r.id == p.job_id) victim = &r;
      }
      ASSERT_NE(victim, nullptr);
      EXPECT_LT(victim->priority, s.FindJob(p.for_job_id)->priority);
      spread_victims += !victim->more_parts.empty();
    }
    for (const JobWait& w : plan.waits) {
      spread_holds += w.reason.find("on workers ") != std::string::npos;
    }
    preempting_plans += !plan.preemptions.empty();
    auto first = std::find_if(
        plan.waits.begin(), plan.waits.end(),
        [](const JobWait& w) { return w.kind == WaitKind::kRetryLater; });
    if (first == plan.waits.end()) continue;
    const PendingJob& job = *s.FindJob(first->job_id);
    const bool preempts = std::any_of(
        plan.preemptions.begin(), plan.preemptions.end(),
        [&](const Preemption& p) { return p.for_job_id == job.id; });
    EXPECT_EQ(preempts, RoomByPreempting(s, plan, job,
                                         GetParam().starts_with("first-fit")))
        << "seed " << seed;
  }
  EXPECT_GT(preempting_plans, 10);
  // The random snapshots exercise spread victims and waiting jobs spread
  // over the room that stopping victims on several nodes frees.
  EXPECT_GT(spread_victims, 0);
  EXPECT_GT(spread_holds, 0);
}

std::vector<std::string> AllVariants() {
  std::vector<std::string> names;
  for (const std::string& base : PlacementPolicyNames()) {
    for (const char* features :
         {"", "+preempt", "+drf", "+backfill", "+drf+backfill+preempt"}) {
      names.push_back(base + features);
    }
  }
  return names;
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, PolicyPropertyTest,
                         ::testing::ValuesIn(AllVariants()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c)))
                               c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace trainyard::scheduler
