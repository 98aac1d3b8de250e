// Successive halving (spec.halving): the rungs and cutoffs as pure
// functions, then jobs of a group driven through the lifecycle with fake
// workers: who is stopped where, how a stopped job ends, what survives a
// restart of the server and a deletion.
#include "server/halving.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/job_lifecycle.h"
#include "server/server_test_fixture.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();

class HalvingTest : public ServerLogicTest {
 protected:
  static v1::JobSpec PlainSpec() { return Spec(); }

  static v1::JobSpec HalvingSpec(int64_t min_steps, int32_t factor,
                                 int64_t steps) {
    v1::JobSpec spec = Spec();
    spec.set_steps(steps);
    spec.mutable_data()->mutable_mnist()->set_holdout(100);
    spec.mutable_eval()->set_every_steps(10);
    spec.mutable_halving()->set_group("sweep-1");
    spec.mutable_halving()->set_min_steps(min_steps);
    spec.mutable_halving()->set_factor(factor);
    return spec;
  }
};

TEST_F(HalvingTest, TheRungIsTheHighestAtOrBelowTheStepBeforeTheLastStep) {
  const v1::JobSpec spec = HalvingSpec(100, 3, 1000);  // rungs 100, 300, 900
  EXPECT_EQ(RungFor(spec, 99), std::nullopt);
  EXPECT_EQ(RungFor(spec, 100), 100);
  EXPECT_EQ(RungFor(spec, 299), 100);
  EXPECT_EQ(RungFor(spec, 300), 300);
  EXPECT_EQ(RungFor(spec, 899), 300);
  EXPECT_EQ(RungFor(spec, 900), 900);
  EXPECT_EQ(RungFor(spec, 999), 900);
  // The final evaluation is the job's end, not a rung.
  EXPECT_EQ(RungFor(spec, 1000), std::nullopt);
  EXPECT_EQ(RungFor(spec, 5000), std::nullopt);
  // An unset factor is the default, 3.
  EXPECT_EQ(RungFor(HalvingSpec(10, 0, 100), 95), 90);
  EXPECT_EQ(RungFor(HalvingSpec(10, 2, 100), 95), 80);
  EXPECT_EQ(RungFor(PlainSpec(), 5), std::nullopt);  // no halving
}

TEST_F(HalvingTest, RungsOfStepsNearTheLimitDoNotOverflow) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  const v1::JobSpec spec = HalvingSpec(1, 16, max);
  const std::optional<int64_t> rung = RungFor(spec, max - 1);
  ASSERT_TRUE(rung.has_value());
  EXPECT_LE(*rung, max - 1);
  EXPECT_GT(*rung, (max - 1) / 16);
}

// The figures numpy.percentile(others, 100 / factor) gives.
TEST_F(HalvingTest, TheCutoffIsNumpysLinearPercentile) {
  EXPECT_DOUBLE_EQ(HalvingCutoff({5.0}, 3), 5.0);
  EXPECT_DOUBLE_EQ(HalvingCutoff({2.0, 1.0}, 3), 1.0 + 1.0 / 3);
  EXPECT_DOUBLE_EQ(HalvingCutoff({4.0, 1.0, 3.0, 2.0}, 3), 2.0);
  EXPECT_DOUBLE_EQ(HalvingCutoff({1.0, 2.0, 3.0, 4.0, 5.0}, 2), 3.0);
  EXPECT_DOUBLE_EQ(HalvingCutoff({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, 4), 2.25);
  // A NaN counts as the worst; infinities do not make the cutoff a NaN.
  EXPECT_DOUBLE_EQ(HalvingCutoff({NAN, 1.0}, 2), kInf);
  EXPECT_DOUBLE_EQ(HalvingCutoff({NAN, 1.0, 2.0}, 2), 2.0);
  EXPECT_EQ(HalvingCutoff({kInf, kInf}, 3), kInf);
}

TEST_F(HalvingTest, OnlyALossAboveTheCutoffStops) {
  const v1::JobSpec spec = HalvingSpec(100, 3, 1000);
  v1::EvalResult eval;
  eval.set_step(110);
  eval.set_loss(0.5);
  EXPECT_FALSE(RankAtRung(spec, 100, eval, {}).has_value()) << "first there";
  EXPECT_FALSE(RankAtRung(spec, 100, eval, {0.5}).has_value()) << "a tie";
  EXPECT_FALSE(RankAtRung(spec, 100, eval, {0.6, 0.55}).has_value());
  EXPECT_TRUE(RankAtRung(spec, 100, eval, {0.6, 0.4}).has_value());
  std::optional<v1::HalvingStop> stop =
      RankAtRung(spec, 100, eval, {0.4, 0.45, 0.9});
  ASSERT_TRUE(stop.has_value());
  EXPECT_EQ(stop->rung(), 100);
  EXPECT_EQ(stop->eval_step(), 110);
  EXPECT_DOUBLE_EQ(stop->eval_loss(), 0.5);
  EXPECT_DOUBLE_EQ(stop->cutoff(), 0.4 + 0.05 * 2 / 3);
  EXPECT_EQ(stop->others(), 3);
  EXPECT_EQ(stop->factor(), 3);
  EXPECT_EQ(DescribeHalvingStop(*stop, "sweep-1"),
            "eval loss 0.5 at step 110 (rung 100) is not among the best 1/3 "
            "of the 4 jobs of halving group 'sweep-1' there (cutoff "
            "0.433333)");
  eval.set_loss(NAN);  // a diverged job goes
  EXPECT_TRUE(RankAtRung(spec, 100, eval, {0.4}).has_value());
}

class HalvingLifecycleTest : public HalvingTest {
 protected:
  std::string SubmitHalving(const std::string& group = "sweep-1") {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = HalvingSpec(20, 2, 100);  // rungs 20, 40, 80
    req.mutable_spec()->mutable_halving()->set_group(group);
    absl::StatusOr<SubmitResult> r = lifecycle_->Submit(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job.id() : "";
  }

  // Submits a job of `group_a` and one of `group_b` and runs them, a_ on
  // worker wa_ and b_ on wb_.
  void RunTwo(const std::string& group_a = "sweep-1",
              const std::string& group_b = "sweep-1") {
    a_ = SubmitHalving(group_a);
    b_ = SubmitHalving(group_b);
    wa_ = &Connect("wa");
    Start(*wa_, a_);
    wb_ = &Connect("wb");
    Start(*wb_, b_);
  }

  // Runs `id` (the next job the pass places) on worker `w`, attempt 1.
  void Start(FakeWorker& w, const std::string& id) {
    Pass();
    ASSERT_TRUE(w.Started(id, 1).ok());
    w.link->Take();
  }

  absl::Status Eval(FakeWorker& w, const std::string& id, int64_t step,
                    double loss, int attempt = 1) {
    return w.Update(id, attempt, [&](v1::JobUpdate& u) {
      u.mutable_trainer()->mutable_eval()->set_step(step);
      u.mutable_trainer()->mutable_eval()->set_loss(loss);
    });
  }

  // The Cancel messages sent to `w` since the last call.
  static int Cancels(FakeWorker& w, const std::string& id) {
    int n = 0;
    for (const v1::ServerMessage& m : w.link->Take()) {
      n += m.has_cancel() && m.cancel().job_id() == id ? 1 : 0;
    }
    return n;
  }

  std::string a_, b_;
  FakeWorker* wa_ = nullptr;
  FakeWorker* wb_ = nullptr;
};

TEST_F(HalvingLifecycleTest, AJobBehindTheGroupAtARungStopsAndSucceeds) {
  int stops = 0;
  lifecycle_->set_on_halving_stop([&] { ++stops; });
  RunTwo();
  const std::string a = a_, b = b_;
  FakeWorker &wa = *wa_, &wb = *wb_;

  // a is first at rung 20: it goes on, whatever its loss.
  ASSERT_TRUE(Eval(wa, a, 10, 3.0).ok());  // before the first rung
  ASSERT_TRUE(Eval(wa, a, 20, 2.0).ok());
  EXPECT_EQ(Cancels(wa, a), 0);
  EXPECT_FALSE(Job(a).job.has_halving_stop());
  // b reaches rung 20 worse than a: the best 1/2 of {a} is a's loss.
  ASSERT_TRUE(wb.Update(b, 1, [](v1::JobUpdate& u) {
                  u.mutable_trainer()->mutable_progress()->set_step(25);
                  u.mutable_trainer()->mutable_progress()->set_loss(2.9);
                }).ok());
  ASSERT_TRUE(Eval(wb, b, 20, 2.5).ok());
  EXPECT_EQ(Cancels(wb, b), 1);
  EXPECT_EQ(stops, 1);
  JobRecord stopping = Job(b);
  EXPECT_EQ(stopping.job.state(), v1::RUNNING);
  EXPECT_TRUE(stopping.cancel_requested());
  EXPECT_THAT(stopping.job.state_reason(),
              HasSubstr("stopping (halving): eval loss 2.5 at step 20 (rung "
                        "20) is not among the best 1/2 of the 2 jobs"));
  EXPECT_EQ(stopping.job.halving_stop().rung(), 20);
  EXPECT_DOUBLE_EQ(stopping.job.halving_stop().cutoff(), 2.0);
  // A later evaluation does not rank it again.
  ASSERT_TRUE(Eval(wb, b, 40, 0.1).ok());
  EXPECT_EQ(Cancels(wb, b), 0);

  // It stops as a cancelled job does (SIGTERM, a checkpoint, exit 3) and
  // ends SUCCEEDED, its result from what it reported.
  ASSERT_TRUE(
      wb.Update(b, 1, [](v1::JobUpdate& u) {
          u.mutable_trainer()->mutable_interrupted()->set_step(41);
          u.mutable_trainer()->mutable_interrupted()->set_checkpoint_path(
              "/c/41");
        }).ok());
  ASSERT_TRUE(wb.Exited(b, 1, 3, "", /*cancelled=*/true).ok());
  const v1::Job done = Job(b).job;
  EXPECT_EQ(done.state(), v1::SUCCEEDED);
  EXPECT_EQ(done.state_reason(),
            "finished: stopped early at rung 20 (spec.halving)");
  EXPECT_EQ(done.attempts(0).outcome(), v1::SUCCEEDED);
  EXPECT_EQ(done.result().step(), 41);
  EXPECT_EQ(done.result().checkpoint_path(), "/c/41");
  EXPECT_DOUBLE_EQ(done.result().train_loss(), 2.9);
  EXPECT_DOUBLE_EQ(done.result().eval_loss(), 0.1);
  EXPECT_THAT(done.result().stopped_early(),
              HasSubstr("eval loss 2.5 at step 20 (rung 20)"));

  // a is not touched, and at rung 40 it is first: b's evaluation there
  // came while it was stopping, and is no entry.
  ASSERT_TRUE(Eval(wa, a, 40, 1.0).ok());
  EXPECT_EQ(Cancels(wa, a), 0);
  EXPECT_EQ(Job(a).job.state(), v1::RUNNING);
}

TEST_F(HalvingLifecycleTest, GroupsAreApartAndAResumedRunIsNotRankedTwice) {
  RunTwo("one", "two");
  const std::string a = a_, b = b_;
  FakeWorker &wa = *wa_, &wb = *wb_;
  ASSERT_TRUE(Eval(wa, a, 20, 1.0).ok());
  ASSERT_TRUE(Eval(wb, b, 20, 9.0).ok());  // first in its own group
  EXPECT_EQ(Cancels(wb, b), 0);
  // b is interrupted and resumes from step 10: passing rung 20 again with a
  // worse loss does not rank it again.
  ASSERT_TRUE(wb.Exited(b, 1, 3).ok());
  ASSERT_EQ(Job(b).job.state(), v1::QUEUED);
  Pass();
  ASSERT_TRUE(wb.Started(b, 2).ok());
  wb.link->Take();
  ASSERT_TRUE(Eval(wb, b, 20, 50.0, 2).ok());
  EXPECT_EQ(Cancels(wb, b), 0);
  EXPECT_FALSE(Job(b).job.has_halving_stop());
}

TEST_F(HalvingLifecycleTest, AStoppedJobOnALostWorkerStillSucceeds) {
  RunTwo();
  const std::string a = a_, b = b_;
  FakeWorker &wa = *wa_, &wb = *wb_;
  ASSERT_TRUE(Eval(wa, a, 20, 1.0).ok());
  ASSERT_TRUE(Eval(wb, b, 20, 2.0).ok());
  EXPECT_EQ(Cancels(wb, b), 1);
  // Its worker goes silent before the stop lands; a server restart in
  // between keeps the pending stop.
  wb.session->Close();
  Boot();  // wa and wb are gone with the old server
  clock_.Advance(kLease + absl::Seconds(1));
  Pass();
  const v1::Job done = Job(b).job;
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.state_reason();
  EXPECT_THAT(done.state_reason(), HasSubstr("rung 20 (spec.halving) ("));
  EXPECT_DOUBLE_EQ(done.result().eval_loss(), 2.0);
  EXPECT_FALSE(done.result().stopped_early().empty());
}

TEST_F(HalvingLifecycleTest, DeletingAJobTakesItsEntriesAway) {
  const std::string a = SubmitHalving();
  FakeWorker& w = Connect("w", /*slots=*/2);
  Start(w, a);
  ASSERT_TRUE(Eval(w, a, 20, 1.0).ok());
  ASSERT_TRUE(lifecycle_->Cancel(a, "").ok());
  ASSERT_TRUE(w.Exited(a, 1, 3, "", true).ok());
  ASSERT_TRUE(lifecycle_->Delete(a, false).ok());
  // With a's entry gone, b is first at rung 20 and goes on.
  const std::string b = SubmitHalving();
  Start(w, b);
  ASSERT_TRUE(Eval(w, b, 20, 5.0).ok());
  EXPECT_EQ(Cancels(w, b), 0);
  EXPECT_FALSE(Job(b).job.has_halving_stop());
}

}  // namespace
}  // namespace trainyard::server
