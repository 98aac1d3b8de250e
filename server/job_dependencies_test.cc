// Tests for job dependencies (spec.depends_on): the submit-time checks,
// CheckDependencies over states, and the scheduler pass holding a job back
// until what it depends on has SUCCEEDED, or cancelling it when that can no
// longer happen.
#include "server/job_dependencies.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_test_fixture.h"

namespace trainyard::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

JobRecord Dependent(const std::string& id, std::vector<std::string> deps,
                    bool met = false) {
  JobRecord r;
  r.job.set_id(id);
  r.job.set_state(v1::QUEUED);
  for (std::string& d : deps) r.job.mutable_spec()->add_depends_on(d);
  r.job.set_dependencies_met(met);
  return r;
}

TEST(CheckDependenciesTest, SortsJobsIntoWaitsFailuresAndMet) {
  const std::map<std::string, v1::JobState> states = {{"ok", v1::SUCCEEDED},
                                                      {"run", v1::RUNNING},
                                                      {"q", v1::QUEUED},
                                                      {"bad", v1::FAILED},
                                                      {"gone", v1::CANCELLED}};
  JobStateLookup lookup =
      [&](const std::string& id) -> absl::StatusOr<v1::JobState> {
    if (id == "broken") return absl::UnavailableError("store: disk I/O");
    auto it = states.find(id);
    if (it == states.end()) return absl::NotFoundError("no " + id);
    return it->second;
  };
  DependencyCheck c = CheckDependencies(
      {Dependent("free", {}), Dependent("a", {"ok", "run", "q"}),
       Dependent("b", {"ok"}), Dependent("c", {"run", "bad"}),
       Dependent("d", {"deleted", "run"}), Dependent("e", {"gone"}),
       Dependent("f", {"broken"}), Dependent("g", {"bad"}, /*met=*/true)},
      lookup);
  ASSERT_EQ(c.waits.size(), 2u);
  EXPECT_EQ(c.waits[0].job_id, "a");
  EXPECT_EQ(c.waits[0].reason,
            "waiting for run (RUNNING), q (QUEUED) to succeed");
  EXPECT_EQ(c.waits[1].job_id, "f");
  EXPECT_THAT(c.waits[1].reason, HasSubstr("broken (state unknown: store"));
  ASSERT_EQ(c.failures.size(), 3u);
  EXPECT_EQ(c.failures[0].job_id, "c");
  EXPECT_EQ(c.failures[0].reason,
            "dependency bad ended FAILED, so this job could never start");
  EXPECT_EQ(c.failures[1].reason,
            "dependency deleted was deleted before it succeeded");
  EXPECT_EQ(c.failures[2].reason,
            "dependency gone ended CANCELLED, so this job could never start");
  EXPECT_THAT(c.met, ElementsAre("b")) << "g is already marked";
}

class JobDependenciesTest : public ServerLogicTest {
 protected:
  absl::StatusOr<SubmitResult> SubmitAfter(
      std::vector<std::string> deps, const std::string& tenant = "default") {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec();
    for (std::string& d : deps) req.mutable_spec()->add_depends_on(d);
    return lifecycle_->Submit(req, tenant);
  }
  std::string After(std::vector<std::string> deps) {
    absl::StatusOr<SubmitResult> r = SubmitAfter(std::move(deps));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job.id() : "";
  }
};

TEST_F(JobDependenciesTest, AJobWaitsUntilWhatItDependsOnSucceeds) {
  FakeWorker& w = Connect("w1", /*slots=*/2);
  const std::string first = RunJobOn(w);
  const std::string second = After({first});
  Pass();
  EXPECT_TRUE(w.Assignments().empty()) << "a slot is free, but it must wait";
  EXPECT_EQ(Job(second).job.state(), v1::QUEUED);
  EXPECT_EQ(Job(second).job.state_reason(),
            "waiting for " + first + " (RUNNING) to succeed");
  // Nothing changed: the next pass writes nothing to the store.
  const uint64_t commits = notifier_.Generation();
  Pass();
  EXPECT_EQ(notifier_.Generation(), commits);

  ASSERT_TRUE(w.Exited(first, 1, 0).ok());
  Pass();
  ASSERT_EQ(w.Assignments().size(), 1u);
  EXPECT_EQ(Job(second).job.state(), v1::SCHEDULED);
  EXPECT_TRUE(Job(second).job.dependencies_met());
  // Once met, deleting what it depended on changes nothing.
  ASSERT_TRUE(lifecycle_->Delete(first, false).ok());
  ASSERT_TRUE(w.Started(second, 1).ok());
  Pass();
  EXPECT_EQ(Job(second).job.state(), v1::RUNNING);
}

TEST_F(JobDependenciesTest, AJobIsCancelledWhenWhatItDependsOnFails) {
  FakeWorker& w = Connect("w1", /*slots=*/2);
  const std::string first = RunJobOn(w);
  const std::string queued = Submit(0, /*gpus=*/1);  // never placed
  const std::string second = After({first, queued});
  const std::string third = After({second});
  ASSERT_TRUE(w.Exited(first, 1, /*code=*/1).ok());
  Pass();
  const v1::Job cancelled = Job(second).job;
  EXPECT_EQ(cancelled.state(), v1::CANCELLED);
  EXPECT_EQ(cancelled.state_reason(), "dependency " + first +
                                          " ended FAILED, so this job could "
                                          "never start");
  EXPECT_EQ(Job(third).job.state(), v1::QUEUED) << "one pass at a time";
  Pass();
  EXPECT_EQ(Job(third).job.state(), v1::CANCELLED);
  EXPECT_THAT(Job(third).job.state_reason(), HasSubstr(second));
  EXPECT_TRUE(w.Assignments().empty());
}

TEST_F(JobDependenciesTest, AJobWhoseDependencyIsDeletedFirstIsCancelled) {
  const std::string first = Submit();
  const std::string second = After({first});
  ASSERT_TRUE(lifecycle_->Cancel(first, "").ok());
  // Deleted before the pass saw it end.
  ASSERT_TRUE(lifecycle_->Delete(first, false).ok());
  Pass();
  EXPECT_EQ(Job(second).job.state(), v1::CANCELLED);
  EXPECT_EQ(Job(second).job.state_reason(),
            "dependency " + first + " was deleted before it succeeded");
}

TEST_F(JobDependenciesTest, ARetriedSubmissionGetsItsJobEvenAfterAFailure) {
  FakeWorker& w = Connect("w1");
  const std::string first = RunJobOn(w);
  v1::SubmitJobRequest req;
  *req.mutable_spec() = Spec();
  req.mutable_spec()->add_depends_on(first);
  req.set_request_id("retry-me");
  absl::StatusOr<SubmitResult> submitted = lifecycle_->Submit(req);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  ASSERT_TRUE(w.Exited(first, 1, /*code=*/1).ok());
  // The reply was lost; the client tries again after the dependency failed.
  absl::StatusOr<SubmitResult> retried = lifecycle_->Submit(req);
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_TRUE(retried->already_existed);
  EXPECT_EQ(retried->job.id(), submitted->job.id());
  // A new request is refused.
  req.set_request_id("new");
  EXPECT_EQ(lifecycle_->Submit(req).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(JobDependenciesTest, SubmitRefusesDependenciesThatCannotSucceed) {
  absl::StatusOr<SubmitResult> r = SubmitAfter({"j-999999"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "depends_on[0]: job j-999999 not found");

  const std::string theirs = Submit();  // the "default" tenant's
  r = SubmitAfter({theirs}, "team-b");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "depends_on[0]: job " + theirs + " not found");

  ASSERT_TRUE(lifecycle_->Cancel(theirs, "").ok());
  r = SubmitAfter({theirs});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(),
            "depends_on[0]: job " + theirs +
                " ended CANCELLED, so this job could never start");

  r = SubmitAfter({"not an id"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("is not a job id"));
  auto page = store_->ListJobs({});
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->jobs.size(), 1u) << "no refused job was stored";
}

}  // namespace
}  // namespace trainyard::server
