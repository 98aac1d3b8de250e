// A real Prometheus (Debian's `prometheus`) scrapes a real yard-server and
// yard-worker on loopback every second while a job runs; the test asks
// Prometheus' HTTP API what it saw: job counts change, progress advances,
// the job's series go away when it ends. Each endpoint also passes
// `promtool check metrics`. That test skips, saying why, only when the
// prometheus binary is missing (scripts/install-deps.sh installs it); ctest
// then reports it skipped.
#include <string>

#include "tests/harness.h"
#include "tests/metrics_scrape.h"

namespace trainyard::itest {
namespace {

using trainyard::v1::JobState;

// A job that runs far longer than the test needs; the test cancels it.
MnistSpec LongJob() {
  MnistSpec spec;
  spec.name = "metrics";
  spec.steps = 5'000'000;
  spec.log_every = 5;
  return spec;
}

bool OneValue(const std::vector<PromSample>& r, double value) {
  return r.size() == 1 && r[0].value == value;
}

class PrometheusMetricsTest : public ClusterTest {
 protected:
  // Starts the server and one worker; their /metrics addresses.
  void StartDaemons() {
    YARD_ASSERT_OK(StartServer());
    YARD_ASSIGN_OR_FAIL(WorkerProcess * worker,
                        StartReadyWorker({.name = "w1"}));
    YARD_ASSIGN_OR_FAIL(server_metrics_,
                        AwaitAddressFile(server().options().state_dir +
                                             "/yard-server.metrics-addr",
                                         StartTimeout()));
    YARD_ASSIGN_OR_FAIL(
        worker_metrics_,
        AwaitAddressFile(worker->work_dir() + "/yard-worker.metrics-addr",
                         StartTimeout()));
  }

  std::string server_metrics_;
  std::string worker_metrics_;
};

TEST_F(PrometheusMetricsTest, PrometheusSeesJobCountsAndProgress) {
  if (!OnPath("prometheus") || !OnPath("promtool")) {
    GTEST_SKIP() << "prometheus/promtool are not installed: run "
                    "scripts/install-deps.sh (Debian package prometheus)";
  }
  StartDaemons();
  if (HasFatalFailure()) return;
  YARD_ASSIGN_OR_FAIL(
      auto prom,
      PrometheusProcess::Start(dir(), {{"yard-server", server_metrics_},
                                       {"yard-worker", worker_metrics_}}));
  const absl::Duration wait = Scaled(absl::Seconds(30));
  YARD_ASSIGN_OR_FAIL(auto up,
                      prom->QueryUntil(
                          "both targets up", "sum(up)",
                          [](auto& r) { return OneValue(r, 2); }, wait));
  YARD_ASSIGN_OR_FAIL(auto idle,
                      prom->QueryUntil(
                          "no job running yet", "yard_jobs{state=\"running\"}",
                          [](auto& r) { return OneValue(r, 0); }, wait));

  YARD_ASSIGN_OR_FAIL(auto submitted, Submit(LongJob().ToProto()));
  const std::string id = submitted.job().id();
  YARD_ASSIGN_OR_FAIL(
      auto running,
      prom->QueryUntil(
          "the job counted as running", "yard_jobs{state=\"running\"}",
          [](auto& r) { return OneValue(r, 1); }, wait));
  YARD_ASSIGN_OR_FAIL(
      auto counted, prom->QueryUntil(
                        "the submission counted", "yard_job_submissions_total",
                        [](auto& r) { return OneValue(r, 1); }, wait));
  const std::string step = "yard_job_step{job_id=\"" + id + "\"}";
  YARD_ASSIGN_OR_FAIL(
      auto first,
      prom->QueryUntil(
          "a first step", step,
          [](auto& r) { return r.size() == 1 && r[0].value > 0; }, wait));
  const double first_step = first[0].value;
  EXPECT_EQ(first[0].labels["instance"], worker_metrics_);
  YARD_ASSIGN_OR_FAIL(
      auto later,
      prom->QueryUntil(
          "the step to advance", step,
          [&](auto& r) { return r.size() == 1 && r[0].value > first_step; },
          wait));
  YARD_ASSIGN_OR_FAIL(auto loss,
                      prom->QueryUntil(
                          "a loss", "yard_job_loss{job_id=\"" + id + "\"}",
                          [](auto& r) { return r.size() == 1; }, wait));
  EXPECT_GT(loss[0].value, 0);
  YARD_ASSIGN_OR_FAIL(
      auto jobs_running,
      prom->QueryUntil(
          "the worker to count the job", "yard_worker_jobs_running",
          [](auto& r) { return OneValue(r, 1); }, wait));

  // Both endpoints, with a job's series present, pass promtool's lint.
  for (const std::string& address : {server_metrics_, worker_metrics_}) {
    YARD_ASSIGN_OR_FAIL(std::string text, HttpGet(address, "/metrics"));
    YARD_ASSERT_OK(PromtoolCheckMetrics(dir(), text));
  }

  trainyard::v1::CancelJobRequest cancel;
  cancel.set_job_id(id);
  trainyard::v1::Job cancelled;
  ASSERT_TRUE(
      jobs().CancelJob(ContextWithTimeout().get(), cancel, &cancelled).ok());
  YARD_ASSIGN_OR_FAIL(auto done, WaitForTerminal(jobs(), id, JobTimeout()));
  EXPECT_EQ(done.state(), trainyard::v1::CANCELLED);
  YARD_ASSIGN_OR_FAIL(auto after,
                      prom->QueryUntil(
                          "the counts to move to cancelled",
                          "yard_jobs{state=~\"running|cancelled\"}",
                          [](auto& r) {
                            double run = -1, can = -1;
                            for (auto& s : r) {
                              (s.labels.at("state") == "running" ? run : can) =
                                  s.value;
                            }
                            return run == 0 && can == 1;
                          },
                          wait));
  YARD_ASSIGN_OR_FAIL(auto gone, prom->QueryUntil(
                                     "the job's series to go stale", step,
                                     [](auto& r) { return r.empty(); }, wait));
  YARD_ASSIGN_OR_FAIL(
      auto finished,
      prom->QueryUntil(
          "the finish counted", "yard_jobs_finished_total{state=\"cancelled\"}",
          [](auto& r) { return OneValue(r, 1); }, wait));
}

TEST_F(PrometheusMetricsTest, RefusedSubmissionCountedByReason) {
  StartDaemons();
  if (HasFatalFailure()) return;
  MnistSpec bad = LongJob();
  bad.steps = 0;  // invalid: steps must be at least 1
  EXPECT_FALSE(Submit(bad.ToProto()).ok());
  // A dry run refused is not a submission refused.
  EXPECT_TRUE(CliFailedWith(
      Yard({"submit", WriteSpec("bad.yaml", bad.ToYaml()), "--dry-run"}),
      YardExit::kInvalidArgument, {"steps"}));
  YARD_ASSIGN_OR_FAIL(std::string text, HttpGet(server_metrics_, "/metrics"));
  const Exposition e = ParseExposition(text);
  EXPECT_EQ(
      SampleValue(e, "yard_job_rejections_total", "reason=\"invalid_spec\""), 1)
      << text;
  EXPECT_EQ(SampleValue(e, "yard_job_submissions_total"), 0) << text;
  EXPECT_EQ(SampleValue(e, "yard_workers", "state=\"ready\""), 1) << text;
  EXPECT_EQ(SampleValue(e, "yard_cpu_slots"), 1) << text;
}

TEST_F(PrometheusMetricsTest, MetricsEndpointsAreLoopbackOnly) {
  YARD_ASSERT_OK(StartServer());
  CommandResult r = RunCommand(
      {BinPath("yard-server"), "--state-dir", dir().Subdir("other"), "--listen",
       "127.0.0.1:0", "--metrics-listen", "0.0.0.0:9470"},
      dir().LogPrefix("yard-server-public"), Scaled(absl::Seconds(20)));
  EXPECT_EQ(r.exit_code(), 2) << r.DebugString();
  EXPECT_NE(r.err.find("--metrics-listen 0.0.0.0:9470: only loopback"),
            std::string::npos)
      << r.DebugString();
  CommandResult w = RunCommand(
      {BinPath("yard-worker"), "--server", server().address(), "--work-dir",
       dir().Subdir("w-public"), "--metrics-listen", "10.0.0.1:9471"},
      dir().LogPrefix("yard-worker-public"), Scaled(absl::Seconds(20)));
  EXPECT_EQ(w.exit_code(), 2) << w.DebugString();
  EXPECT_NE(w.err.find("only loopback"), std::string::npos) << w.DebugString();
}

}  // namespace
}  // namespace trainyard::itest
