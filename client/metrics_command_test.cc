// Tests of `yard metrics` against an in-process fake JobService on a
// loopback port chosen at run time: the table (a step's report and
// evaluation on one row, the columns a model has), CSV, JSON, several jobs,
// thinned curves, and the errors.
#include <grpcpp/grpcpp.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/commands.h"
#include "client/in_process_server_test_support.h"
#include "common/proto_time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::client {
namespace {

namespace v1 = ::trainyard::v1;
using ::testing::HasSubstr;

constexpr absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

class FakeJobs final : public v1::JobService::Service {
 public:
  grpc::Status GetJobMetrics(grpc::ServerContext*,
                             const v1::GetJobMetricsRequest* req,
                             v1::JobMetrics* resp) override {
    absl::MutexLock lock(&mu);
    asked.push_back(req->job_id());
    if (!refusal.ok()) return refusal;
    auto it = curves.find(req->job_id());
    if (it == curves.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "job " + req->job_id() + " not found");
    }
    *resp = it->second;
    return grpc::Status::OK;
  }

  absl::Mutex mu;
  std::map<std::string, v1::JobMetrics> curves ABSL_GUARDED_BY(mu);
  std::vector<std::string> asked ABSL_GUARDED_BY(mu);
  grpc::Status refusal ABSL_GUARDED_BY(mu) = grpc::Status::OK;
};

v1::MetricPoint Progress(int64_t step, double loss, double tokens_per_s,
                         absl::Duration at) {
  v1::MetricPoint p;
  *p.mutable_time() = ToProtoTime(kStart + at);
  v1::TrainProgress* t = p.mutable_progress();
  t->set_step(step);
  t->set_total_steps(300);
  t->set_loss(loss);
  t->set_lr(0.0006);
  t->set_grad_norm(1.8234);
  t->set_samples_per_second(tokens_per_s > 0 ? tokens_per_s / 64 : 3230.4);
  t->set_tokens_per_second(tokens_per_s);
  t->set_memory_bytes(1 << 20);
  return p;
}

v1::MetricPoint Eval(int64_t step, double loss, double accuracy,
                     absl::Duration at) {
  v1::MetricPoint p;
  *p.mutable_time() = ToProtoTime(kStart + at);
  p.mutable_eval()->set_step(step);
  p.mutable_eval()->set_loss(loss);
  p.mutable_eval()->set_accuracy(accuracy);
  p.mutable_eval()->set_examples(2000);
  return p;
}

// A GPT curve: progress at 100, 200 and 300, evaluations at 200 and 300.
v1::JobMetrics Gpt() {
  v1::JobMetrics m;
  m.set_job_id("j-000001");
  m.set_progress_stride(1);
  m.set_eval_stride(1);
  *m.add_points() = Progress(100, 4.12704, 497113.2, absl::ZeroDuration());
  *m.add_points() = Progress(200, 3.5, 501000, absl::Seconds(65));
  *m.add_points() = Eval(200, 3.61, 0, absl::Seconds(66));
  *m.add_points() = Progress(300, 3.25, 502000, absl::Seconds(7300));
  *m.add_points() = Eval(300, 3.3, 0, absl::Seconds(7301));
  return m;
}

class MetricsCommandTest : public InProcessServerTest {
 protected:
  void SetUp() override { Serve({&jobs_}); }
  int Run(std::vector<std::string> argv) {
    out_.str("");
    err_.str("");
    argv.insert(argv.begin(), "metrics");
    absl::StatusOr<CliArgs> args = ParseArgs(argv, nullptr);
    EXPECT_TRUE(args.ok()) << args.status();
    if (!args.ok()) return -1;
    return RunCommand(*args, *client_, out_, err_);
  }
  void Put(const v1::JobMetrics& m) {
    absl::MutexLock lock(&jobs_.mu);
    jobs_.curves[m.job_id()] = m;
  }

  FakeJobs jobs_;
  std::ostringstream out_, err_;
};

TEST_F(MetricsCommandTest, TableJoinsAStepsReportAndEvaluation) {
  Put(Gpt());
  EXPECT_EQ(Run({"j-000001"}), kExitOk);
  EXPECT_EQ(err_.str(), "");
  EXPECT_EQ(out_.str(),
            "STEP  LOSS    LR      GRAD-NORM  TOKENS/S  EVAL-LOSS  ELAPSED\n"
            "100   4.1270  0.0006  1.82       497113    -          0s\n"
            "200   3.5000  0.0006  1.82       501000    3.6100     1m05s\n"
            "300   3.2500  0.0006  1.82       502000    3.3000     2h01m\n");
}

TEST_F(MetricsCommandTest, AClassifierShowsSamplesAndAccuracy) {
  v1::JobMetrics m;
  m.set_job_id("j-000002");
  *m.add_points() = Eval(0, 2.31, 0.1015, absl::ZeroDuration());
  *m.add_points() = Progress(50, 0.41, 0, absl::Seconds(3));
  *m.add_points() = Eval(50, 0.3, 0.9125, absl::Seconds(4));
  Put(m);
  EXPECT_EQ(Run({"j-000002"}), kExitOk);
  EXPECT_EQ(out_.str(),
            "STEP  LOSS    LR      GRAD-NORM  SAMPLES/S  EVAL-LOSS  ACCURACY  "
            "ELAPSED\n"
            "0     -       -       -          -          2.3100     10.15%    "
            "0s\n"
            "50    0.4100  0.0006  1.82       3230       0.3000     91.25%    "
            "3s\n");
}

TEST_F(MetricsCommandTest, SaysWhenTheServerThinnedTheCurve) {
  v1::JobMetrics m = Gpt();
  m.set_progress_stride(64);
  m.set_eval_stride(2);
  Put(m);
  EXPECT_EQ(Run({"j-000001"}), kExitOk);
  EXPECT_THAT(out_.str(),
              HasSubstr("(progress reports thinned by the server over this "
                        "long run: those at steps that are multiples of 64 "
                        "are kept, and the newest)\n(evaluations thinned"));
}

TEST_F(MetricsCommandTest, CsvHasEveryFigureOfEveryJob) {
  Put(Gpt());
  v1::JobMetrics other;
  other.set_job_id("j-000003");
  *other.add_points() = Progress(10, 1.0, 0, absl::Seconds(1));
  Put(other);
  EXPECT_EQ(Run({"j-000001", "j-000003", "--csv"}), kExitOk);
  EXPECT_EQ(err_.str(), "");
  std::vector<std::string> lines;
  std::istringstream in(out_.str());
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 5u) << out_.str();
  EXPECT_EQ(lines[0],
            "job_id,step,time,elapsed_seconds,loss,lr,grad_norm,"
            "samples_per_second,tokens_per_second,memory_bytes,eval_loss,"
            "eval_accuracy");
  EXPECT_EQ(lines[1],
            "j-000001,100,2027-01-15T08:00:00.000Z,0,4.12704,0.0006,1.8234,"
            "7767.39375,497113.2,1048576,,");
  EXPECT_EQ(lines[2],
            "j-000001,200,2027-01-15T08:01:05.000Z,65,3.5,0.0006,1.8234,"
            "7828.125,501000,1048576,3.61,0");
  EXPECT_EQ(lines[4],
            "j-000003,10,2027-01-15T08:00:01.000Z,0,1,0.0006,1.8234,3230.4,"
            "0,1048576,,");
}

TEST_F(MetricsCommandTest, JsonIsTheCurveAsSent) {
  Put(Gpt());
  EXPECT_EQ(Run({"-o", "json", "j-000001"}), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("\"job_id\": \"j-000001\""));
  EXPECT_THAT(out_.str(), HasSubstr("\"tokens_per_second\": 497113.2"));
  EXPECT_THAT(out_.str(), HasSubstr("\"progress_stride\": \"1\""));
}

TEST_F(MetricsCommandTest, AJobWithoutPointsSaysSo) {
  v1::JobMetrics m;
  m.set_job_id("j-000004");
  Put(m);
  EXPECT_EQ(Run({"j-000004"}), kExitOk);
  EXPECT_EQ(out_.str(), "job j-000004 has reported no progress yet\n");
  EXPECT_EQ(Run({"j-000004", "--csv"}), kExitOk);
  EXPECT_THAT(out_.str(), testing::StartsWith("job_id,step,"));
}

TEST_F(MetricsCommandTest, AnUnknownJobPrintsNoCurveAndExitsNotFound) {
  Put(Gpt());
  EXPECT_EQ(Run({"j-000001", "j-424242", "--csv"}), kExitNotFound);
  EXPECT_EQ(out_.str(), "") << "nothing printed before every job was read";
  EXPECT_EQ(err_.str(), "yard: error: job j-424242 not found\n");
}

// A long or odd id is named as the server quotes one: escaped and cut
// short, so the error stays one short line.
TEST_F(MetricsCommandTest, ALongOrOddIdIsNamedCutShort) {
  const std::string id(3000, 'x');
  const std::string quoted = std::string(64, 'x') + "...\" is not a job id";
  {
    absl::MutexLock lock(&jobs_.mu);
    jobs_.refusal =
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "job_id: \"" + quoted);
  }
  EXPECT_EQ(Run({id}), kExitInvalidArgument);
  EXPECT_EQ(err_.str(), "yard: error: job_id: \"" + quoted + "\n");
  {
    absl::MutexLock lock(&jobs_.mu);
    jobs_.refusal = grpc::Status(grpc::StatusCode::INTERNAL, "store: boom");
  }
  EXPECT_EQ(Run({id}), kExitServerError);
  EXPECT_EQ(err_.str(),
            "yard: error: job " + std::string(64, 'x') + "...: store: boom\n");
  EXPECT_EQ(Run({"j-1\nx"}), kExitServerError);
  EXPECT_EQ(err_.str(), "yard: error: job j-1\\nx: store: boom\n");
}

TEST_F(MetricsCommandTest, BadArgumentsAreUsageErrors) {
  EXPECT_EQ(ParseArgs({"metrics"}, nullptr).status().message(),
            "'metrics': missing job ID");
  EXPECT_EQ(ParseArgs({"metrics", "j-1", "--csv", "-o", "json"}, nullptr)
                .status()
                .message(),
            "--csv and -o json exclude each other");
  EXPECT_EQ(
      ParseArgs({"metrics", "j-1", "--csv=yes"}, nullptr).status().message(),
      "--csv: takes no value");
  EXPECT_EQ(ParseArgs({"get", "j-1", "--csv"}, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trainyard::client
