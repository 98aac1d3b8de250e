// Concurrency groups through the server's logic: a first-fit scheduler
// loop, a real store, fake workers.
#include "server/concurrency_groups.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_test_fixture.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;

class ConcurrencyGroupsTest : public ServerLogicTest {
 protected:
  std::string SubmitIn(const std::string& group, int32_t max_running,
                       const std::string& tenant = "default") {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec();
    if (!group.empty()) {
      req.mutable_spec()->mutable_concurrency()->set_group(group);
      req.mutable_spec()->mutable_concurrency()->set_max_running(max_running);
    }
    auto r = lifecycle_->Submit(req, tenant);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job.id() : "";
  }
  v1::JobState StateOf(const std::string& id) { return Job(id).job.state(); }
};

TEST_F(ConcurrencyGroupsTest, AtMostMaxRunningOfAGroupHoldWorkersAtOnce) {
  FakeWorker& w = Connect("w1", /*slots=*/8);
  const std::string a = SubmitIn("sweep", 2);
  const std::string b = SubmitIn("sweep", 2);
  const std::string c = SubmitIn("sweep", 2);
  const std::string d = SubmitIn("sweep", 2);
  const std::string loose = SubmitIn("", 0);
  const std::string other = SubmitIn("other", 1);
  const std::string team_b = SubmitIn("sweep", 1, "team-b");  // its own group
  Pass();
  EXPECT_EQ(w.Assignments().size(), 5u);
  EXPECT_EQ(StateOf(a), v1::SCHEDULED);
  EXPECT_EQ(StateOf(b), v1::SCHEDULED);
  EXPECT_EQ(StateOf(c), v1::QUEUED) << "two placed in the same pass fill it";
  EXPECT_EQ(StateOf(d), v1::QUEUED);
  EXPECT_THAT(Job(c).job.state_reason(),
              HasSubstr("waiting for its concurrency group \"sweep\": 2 of "
                        "its jobs running, at most 2"));
  EXPECT_EQ(StateOf(loose), v1::SCHEDULED);
  EXPECT_EQ(StateOf(other), v1::SCHEDULED);
  EXPECT_EQ(StateOf(team_b), v1::SCHEDULED);

  // Still full on the next pass (held back before the policy runs).
  ASSERT_TRUE(w.Started(a, 1).ok());
  Pass();
  EXPECT_TRUE(w.Assignments().empty());
  EXPECT_EQ(StateOf(c), v1::QUEUED);

  // One ends: one more of the group starts, in queue order.
  ASSERT_TRUE(w.Exited(a, 1, 0).ok());
  Pass();
  ASSERT_EQ(w.Assignments().size(), 1u);
  EXPECT_EQ(StateOf(c), v1::SCHEDULED);
  EXPECT_EQ(StateOf(d), v1::QUEUED);

  // Cancelling one frees its place as well.
  ASSERT_TRUE(lifecycle_->Cancel(b, "").ok());
  Pass();
  EXPECT_EQ(StateOf(d), v1::SCHEDULED);
}

// A pass that drops placements past a group's limit leaves their room to
// no one; the loop runs the next pass at once, which gives it to the jobs
// behind (here within 5 s, with a tick of an hour and a lease of 10 s).
TEST_F(ConcurrencyGroupsTest, RoomDroppedByALimitGoesToTheNextJobsAtOnce) {
  FakeWorker& w = Connect("w1", /*slots=*/2);
  const std::string a1 = SubmitIn("g", 1);
  const std::string a2 = SubmitIn("g", 1);
  const std::string b = SubmitIn("", 0);
  SchedulerLoopOptions o;
  o.tick = absl::Hours(1);
  loop_ = std::make_unique<SchedulerLoop>(
      store_.get(), registry_.get(), lifecycle_.get(), &policy_, &clock_, o);
  loop_->Start();
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (StateOf(b) != v1::SCHEDULED && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  loop_->Stop();
  EXPECT_EQ(StateOf(a1), v1::SCHEDULED);
  EXPECT_EQ(StateOf(a2), v1::QUEUED);
  EXPECT_EQ(StateOf(b), v1::SCHEDULED) << "the free slot went to no one";
  EXPECT_EQ(w.Assignments().size(), 2u);
}

TEST_F(ConcurrencyGroupsTest, EachJobStartsUnderItsOwnLimit) {
  FakeWorker& w = Connect("w1", /*slots=*/8);
  const std::string one = SubmitIn("g", 1);
  const std::string wide = SubmitIn("g", 3);
  const std::string narrow = SubmitIn("g", 1);
  Pass();
  EXPECT_EQ(w.Assignments().size(), 2u);
  EXPECT_EQ(StateOf(one), v1::SCHEDULED);
  EXPECT_EQ(StateOf(wide), v1::SCHEDULED) << "1 running, it allows 3";
  EXPECT_EQ(StateOf(narrow), v1::QUEUED) << "2 running, it allows 1";
}

TEST(GroupLimitTest, CountsOnlyJobsOfTheSameTenantAndGroup) {
  auto job = [](std::string tenant, std::string group, int32_t max) {
    JobRecord r;
    r.job.set_tenant(std::move(tenant));
    r.job.mutable_spec()->mutable_concurrency()->set_group(std::move(group));
    r.job.mutable_spec()->mutable_concurrency()->set_max_running(max);
    return r;
  };
  GroupCounts running =
      RunningByGroup({job("a", "g", 2), job("a", "h", 2), job("b", "g", 2),
                      job("a", "", 0), job("a", "g", 2)});
  EXPECT_EQ((running[{"a", "g"}]), 2);
  EXPECT_EQ((running[{"b", "g"}]), 1);
  EXPECT_EQ(running.count({"a", ""}), 0u);
  StartLimit limit = GroupLimit(running);
  EXPECT_THAT(limit.wait_reason(job("a", "g", 2).job),
              HasSubstr("2 of its jobs running, at most 2"));
  EXPECT_EQ(limit.wait_reason(job("a", "g", 3).job), "");
  EXPECT_EQ(limit.wait_reason(job("b", "g", 2).job), "");
  limit.count(job("b", "g", 2).job);
  EXPECT_THAT(limit.wait_reason(job("b", "g", 2).job),
              HasSubstr("2 of its jobs running"));
  EXPECT_EQ(limit.wait_reason(job("b", "", 0).job), "") << "no group";
}

}  // namespace
}  // namespace trainyard::server
