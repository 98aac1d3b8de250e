// Tests of `yard submit SPEC --set FIELD=VALUE`: the command line is parsed,
// the spec file read and overridden, and the job submitted as yard_main.cc
// does, against an in-process fake JobService that records what it gets.
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/cli_args.h"
#include "client/commands.h"
#include "client/in_process_server_test_support.h"
#include "client/job_client.h"
#include "common/field_errors.h"
#include "common/rpc_status.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "spec/spec.h"

namespace trainyard::client {
namespace {

namespace v1 = ::trainyard::v1;
using ::google::protobuf::util::MessageDifferencer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kSpec[] = R"(name: mnist-mlp
model: {mlp: {hidden: [256, 128]}}
data:
  mnist:
    images: examples/data/mnist/t10k-images-idx3-ubyte.gz
    labels: examples/data/mnist/t10k-labels-idx1-ubyte.gz
optimizer: {lr: 1e-3}
batch: {micro_batch: 64}
steps: 1500
)";

// Accepts submissions as jobs j-1, j-2, ... (a repeated request id gets its
// first job back, or ALREADY_EXISTS with another spec; a dry run gets a
// job without an id), or fails them with `error`, or those whose lr exceeds
// `max_lr` or whose request id is longer than `max_request_id` as a
// validation error, or every real one after the first `fail_after`;
// records the requests.
class FakeJobs final : public v1::JobService::Service {
 public:
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override {
    absl::MutexLock lock(&mu);
    requests.push_back(*req);
    if (!error.ok()) return error;
    if (req->spec().optimizer().lr() > max_lr) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("optimizer.lr: must be at most ", max_lr,
                                       ", got ", req->spec().optimizer().lr()));
    }
    if (static_cast<int>(req->request_id().size()) > max_request_id) {
      return ToGrpcStatus(InvalidFieldError(
          "request_id", absl::StrCat("at most ", max_request_id, " bytes, got ",
                                     req->request_id().size())));
    }
    *resp->mutable_job()->mutable_spec() = req->spec();
    resp->mutable_job()->set_name(req->spec().name());
    // As the server: a used request id names its job, or is refused with
    // another spec, for a dry run too.
    if (auto it = by_request.find(req->request_id());
        !req->request_id().empty() && it != by_request.end()) {
      if (!MessageDifferencer::Equals(specs[it->second], req->spec())) {
        return ToGrpcStatus(FieldError(
            absl::StatusCode::kAlreadyExists, "request_id",
            absl::StrCat(req->request_id(), " was already used by job ",
                         it->second, " with a different spec")));
      }
      resp->mutable_job()->set_id(it->second);
      resp->set_already_existed(true);
      return grpc::Status::OK;
    }
    if (req->validate_only()) return grpc::Status::OK;
    if (fail_after >= 0 && created >= fail_after) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          "tenant default has 2 jobs queued, its limit is 2");
    }
    const std::string id = absl::StrCat("j-", ++created);
    if (!req->request_id().empty()) by_request[req->request_id()] = id;
    specs[id] = req->spec();
    resp->mutable_job()->set_id(id);
    return grpc::Status::OK;
  }

  absl::Mutex mu;
  grpc::Status error ABSL_GUARDED_BY(mu);
  double max_lr ABSL_GUARDED_BY(mu) = 1;
  int fail_after ABSL_GUARDED_BY(mu) = -1;
  int max_request_id ABSL_GUARDED_BY(mu) = 128;
  int created ABSL_GUARDED_BY(mu) = 0;
  std::map<std::string, std::string> by_request ABSL_GUARDED_BY(mu);
  std::map<std::string, v1::JobSpec> specs ABSL_GUARDED_BY(mu);  // by id
  std::vector<v1::SubmitJobRequest> requests ABSL_GUARDED_BY(mu);
};

class SubmitCommandTest : public InProcessServerTest {
 protected:
  void SetUp() override {
    Serve({&jobs_});
    spec_path_ = ::testing::TempDir() + "/submit_command_test.yaml";
    std::ofstream(spec_path_) << kSpec;
  }
  // `yard submit SPEC <flags>`, as yard_main.cc runs it: no RPC unless the
  // spec was read and overridden.
  int Submit(const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {"submit", spec_path_};
    argv.insert(argv.end(), flags.begin(), flags.end());
    absl::StatusOr<CliArgs> args = ParseArgs(argv, nullptr);
    EXPECT_TRUE(args.ok()) << args.status();
    if (!args.ok()) return kExitUsage;
    SubmitPlan plan;
    if (int code = ReadSubmitPlan(*args, &plan, err_); code != kExitOk) {
      return code;
    }
    return RunSubmit(*args, plan, *client_, out_, err_);
  }
  std::vector<v1::SubmitJobRequest> Requests() {
    absl::MutexLock lock(&jobs_.mu);
    return jobs_.requests;
  }
  v1::JobSpec FileSpec() {
    absl::StatusOr<v1::JobSpec> spec = spec::ParseJobSpec(kSpec);
    EXPECT_TRUE(spec.ok()) << spec.status();
    return spec.ok() ? *spec : v1::JobSpec();
  }

  FakeJobs jobs_;
  std::string spec_path_;
  std::ostringstream out_, err_;
};

TEST_F(SubmitCommandTest, OverridesReachTheServer) {
  EXPECT_EQ(
      Submit({"--set", "optimizer.lr=0.003", "--set=steps=2000", "--set",
              "name=lr-3e-3", "--set", "model.mlp.hidden=512,256", "--set",
              "precision=BF16", "--set", "resources.cpu_threads=4"}),
      kExitOk)
      << err_.str();
  EXPECT_EQ(out_.str(), "j-1\n");
  EXPECT_EQ(err_.str(), "");
  std::vector<v1::SubmitJobRequest> requests = Requests();
  ASSERT_EQ(requests.size(), 1u);
  const v1::JobSpec& sent = requests[0].spec();
  EXPECT_DOUBLE_EQ(sent.optimizer().lr(), 0.003);
  EXPECT_EQ(sent.steps(), 2000);
  EXPECT_EQ(sent.name(), "lr-3e-3");
  EXPECT_THAT(sent.model().mlp().hidden(), ElementsAre(512, 256));
  EXPECT_EQ(sent.precision(), v1::BF16);
  EXPECT_EQ(sent.resources().cpu_threads(), 4);
  // The rest is the file's.
  v1::JobSpec expected = FileSpec();
  expected.mutable_optimizer()->set_lr(0.003);
  expected.set_steps(2000);
  expected.set_name("lr-3e-3");
  expected.mutable_model()->mutable_mlp()->clear_hidden();
  expected.mutable_model()->mutable_mlp()->add_hidden(512);
  expected.mutable_model()->mutable_mlp()->add_hidden(256);
  expected.set_precision(v1::BF16);
  expected.mutable_resources()->set_cpu_threads(4);
  EXPECT_TRUE(MessageDifferencer::Equals(sent, expected)) << sent.DebugString();
}

TEST_F(SubmitCommandTest, OverridesApplyInOrder) {
  EXPECT_EQ(Submit({"--set", "steps=10", "--set", "steps=20", "--set",
                    "model.gpt.n_layer=2", "--set", "model.mlp.hidden=8"}),
            kExitOk)
      << err_.str();
  std::vector<v1::SubmitJobRequest> requests = Requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].spec().steps(), 20);
  EXPECT_THAT(requests[0].spec().model().mlp().hidden(), ElementsAre(8));
  EXPECT_FALSE(requests[0].spec().model().has_gpt());
}

TEST_F(SubmitCommandTest, WithoutOverridesTheFileIsSentAsItIs) {
  EXPECT_EQ(Submit({}), kExitOk) << err_.str();
  std::vector<v1::SubmitJobRequest> requests = Requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_TRUE(MessageDifferencer::Equals(requests[0].spec(), FileSpec()));
}

TEST_F(SubmitCommandTest, ABadOverrideFailsWithExitThreeBeforeAnyRpc) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"steps=ten", "--set steps=ten: not an integer"},
      {"optimizer.lrr=1",
       "--set optimizer.lrr=1: no field \"lrr\" in optimizer (fields: lr, "
       "beta1, beta2, eps, weight_decay, grad_clip, warmup_steps, "
       "min_lr_ratio)"},
      {"model=mlp",
       "--set model=mlp: model is a message; set one of its fields (mlp, "
       "gpt)"},
      {"steps", "--set steps: expected FIELD=VALUE"},
      {"=1", "--set =1: empty field name"},
      {"batch.micro_batch=4294967296",
       "--set batch.micro_batch=4294967296: out of range: must be in "
       "[-2147483648, 2147483647]"},
  };
  for (const auto& [assignment, message] : cases) {
    err_.str("");
    // A good override before the bad one does not send anything either.
    EXPECT_EQ(Submit({"--set", "steps=5", "--set", assignment}),
              kExitInvalidArgument)
        << assignment;
    EXPECT_EQ(err_.str(), "yard: error: " + message + "\n");
    EXPECT_EQ(out_.str(), "");
  }
  EXPECT_TRUE(Requests().empty());
}

TEST_F(SubmitCommandTest, AnUnreadableFileIsStillExitThree) {
  spec_path_ = ::testing::TempDir() + "/no_such_spec.yaml";
  EXPECT_EQ(Submit({"--set", "steps=5"}), kExitInvalidArgument);
  EXPECT_THAT(err_.str(), HasSubstr("no_such_spec.yaml: cannot open"));
  EXPECT_TRUE(Requests().empty());
}

TEST_F(SubmitCommandTest, AServerRejectionSaysOverridesWereApplied) {
  {
    absl::MutexLock lock(&jobs_.mu);
    jobs_.error = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               "model.gpt.n_head: must be in [1, 128], got 0");
  }
  EXPECT_EQ(Submit({"--set", "model.gpt.n_layer=2"}), kExitInvalidArgument);
  EXPECT_EQ(err_.str(), "yard: error: " + spec_path_ +
                            " with its --set overrides: model.gpt.n_head: "
                            "must be in [1, 128], got 0\n");
  err_.str("");
  EXPECT_EQ(Submit({}), kExitInvalidArgument);
  EXPECT_EQ(err_.str(), "yard: error: " + spec_path_ +
                            ": model.gpt.n_head: must be in [1, 128], got 0\n");
}

TEST_F(SubmitCommandTest, DryRunHasTheServerCheckAndSubmitsNothing) {
  EXPECT_EQ(Submit({"--dry-run", "--set", "steps=7"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "the server accepts this job; nothing was submitted\n");
  std::vector<v1::SubmitJobRequest> requests = Requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_TRUE(requests[0].validate_only());
  EXPECT_EQ(requests[0].spec().steps(), 7);

  out_.str("");
  EXPECT_EQ(Submit({"--dry-run", "--set", "optimizer.lr=2"}),
            kExitInvalidArgument);
  EXPECT_EQ(err_.str(), "yard: error: " + spec_path_ +
                            " with its --set overrides: optimizer.lr: must "
                            "be at most 1, got 2\n");
  EXPECT_EQ(out_.str(), "");
}

// A sweep is checked whole by the server, then submitted job by job with
// numbered request ids; each job is named after its values.
TEST_F(SubmitCommandTest, ASweepSubmitsOneJobPerCombination) {
  EXPECT_EQ(Submit({"--sweep", "optimizer.lr=0.01,0.03", "--sweep",
                    "model.mlp.hidden=[64],[128,64]", "--set", "steps=50",
                    "--request-id", "grid"}),
            kExitOk)
      << err_.str();
  EXPECT_EQ(out_.str(),
            "j-1  mnist-mlp optimizer.lr=0.01 model.mlp.hidden=[64]\n"
            "j-2  mnist-mlp optimizer.lr=0.01 model.mlp.hidden=[128,64]\n"
            "j-3  mnist-mlp optimizer.lr=0.03 model.mlp.hidden=[64]\n"
            "j-4  mnist-mlp optimizer.lr=0.03 model.mlp.hidden=[128,64]\n");
  EXPECT_EQ(err_.str(), "");
  std::vector<v1::SubmitJobRequest> requests = Requests();
  ASSERT_EQ(requests.size(), 8u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(requests[i].validate_only()) << i;
    EXPECT_FALSE(requests[4 + i].validate_only()) << i;
    EXPECT_EQ(requests[4 + i].request_id(), absl::StrCat("grid-", i + 1));
    EXPECT_TRUE(
        MessageDifferencer::Equals(requests[i].spec(), requests[4 + i].spec()));
    EXPECT_EQ(requests[4 + i].spec().steps(), 50);  // --set applies to all
  }
  EXPECT_DOUBLE_EQ(requests[6].spec().optimizer().lr(), 0.03);
  EXPECT_THAT(requests[6].spec().model().mlp().hidden(), ElementsAre(64));
  EXPECT_THAT(requests[7].spec().model().mlp().hidden(), ElementsAre(128, 64));

  // The same command again finds the jobs it made.
  out_.str("");
  EXPECT_EQ(Submit({"--sweep", "optimizer.lr=0.01,0.03", "--sweep",
                    "model.mlp.hidden=[64],[128,64]", "--set", "steps=50",
                    "--request-id", "grid"}),
            kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("j-4  mnist-mlp optimizer.lr=0.03"));
  EXPECT_EQ(err_.str(),
            "yard: 4 of the 4 jobs were made by an earlier run with request "
            "id grid\n");
}

TEST_F(SubmitCommandTest, MaxRunningMakesTheSweepOneConcurrencyGroup) {
  EXPECT_EQ(Submit({"--sweep", "seed=1,2,3", "--max-running", "2",
                    "--request-id", "s9"}),
            kExitOk)
      << err_.str();
  std::vector<v1::SubmitJobRequest> requests = Requests();
  ASSERT_EQ(requests.size(), 6u);
  for (const v1::SubmitJobRequest& r : requests) {
    EXPECT_EQ(r.spec().concurrency().group(), "s9");  // checked and submitted
    EXPECT_EQ(r.spec().concurrency().max_running(), 2);
  }
  // Without --request-id the group is the one the sweep made up and told.
  err_.str("");
  EXPECT_EQ(Submit({"--sweep", "seed=7,8", "--max-running=1"}), kExitOk);
  requests = Requests();
  const std::string group = requests.back().spec().concurrency().group();
  EXPECT_THAT(group, ::testing::StartsWith("sweep-"));
  EXPECT_THAT(err_.str(), HasSubstr(absl::StrCat("request id is ", group)));
  EXPECT_EQ(requests[requests.size() - 3].spec().concurrency().group(), group)
      << "the dry-run check saw the same spec";
}

TEST_F(SubmitCommandTest, HalvingMakesTheSweepOneHalvingGroup) {
  EXPECT_EQ(Submit({"--sweep", "seed=1,2", "--halving", "20:4", "--request-id",
                    "h1"}),
            kExitOk)
      << err_.str();
  std::vector<v1::SubmitJobRequest> requests = Requests();
  ASSERT_EQ(requests.size(), 4u);
  for (const v1::SubmitJobRequest& r : requests) {
    EXPECT_EQ(r.spec().halving().group(), "h1");
    EXPECT_EQ(r.spec().halving().min_steps(), 20);
    EXPECT_EQ(r.spec().halving().factor(), 4);
    EXPECT_FALSE(r.spec().has_concurrency());
  }
  // Without a factor the server's default applies.
  EXPECT_EQ(Submit({"--sweep", "seed=3,4", "--halving=50"}), kExitOk);
  requests = Requests();
  EXPECT_EQ(requests.back().spec().halving().min_steps(), 50);
  EXPECT_EQ(requests.back().spec().halving().factor(), 0);
  EXPECT_THAT(requests.back().spec().halving().group(),
              ::testing::StartsWith("sweep-"));
}

TEST_F(SubmitCommandTest, ASweepValueTheServerRefusesSubmitsNothing) {
  {
    absl::MutexLock lock(&jobs_.mu);
    jobs_.max_lr = 0.05;
  }
  EXPECT_EQ(Submit({"--sweep", "optimizer.lr=0.01,0.1,0.03"}),
            kExitInvalidArgument);
  EXPECT_EQ(err_.str(),
            "yard: error: sweep job 2 of 3 (mnist-mlp optimizer.lr=0.1): " +
                spec_path_ + ": optimizer.lr: must be at most 0.05, got 0.1\n");
  EXPECT_EQ(out_.str(), "");
  for (const v1::SubmitJobRequest& r : Requests()) {
    EXPECT_TRUE(r.validate_only());
  }
}

TEST_F(SubmitCommandTest, ASweepCutShortSaysHowToSubmitTheRest) {
  {
    absl::MutexLock lock(&jobs_.mu);
    jobs_.fail_after = 2;
  }
  EXPECT_EQ(Submit({"--sweep", "seed=1,2,3", "--request-id", "s7"}),
            kExitExhausted);
  EXPECT_EQ(out_.str(),
            "j-1  mnist-mlp seed=1\n"
            "j-2  mnist-mlp seed=2\n");
  EXPECT_EQ(err_.str(),
            "yard: error: sweep job 3 of 3 (mnist-mlp seed=3): tenant default "
            "has 2 jobs queued, its limit is 2\n"
            "yard: 2 of the 3 jobs are submitted; run the same command with "
            "--request-id s7 to submit the rest\n");
  {
    absl::MutexLock lock(&jobs_.mu);
    jobs_.fail_after = -1;
  }
  out_.str("");
  err_.str("");
  EXPECT_EQ(Submit({"--sweep", "seed=1,2,3", "--request-id", "s7"}), kExitOk);
  EXPECT_EQ(out_.str(),
            "j-1  mnist-mlp seed=1\n"
            "j-2  mnist-mlp seed=2\n"
            "j-3  mnist-mlp seed=3\n");
  EXPECT_THAT(err_.str(), HasSubstr("2 of the 3 jobs were made by an earlier"));

  // Without --request-id the hint names the one the sweep made up.
  {
    absl::MutexLock lock(&jobs_.mu);
    jobs_.fail_after = 3;
  }
  err_.str("");
  EXPECT_EQ(Submit({"--sweep", "seed=5,6"}), kExitExhausted);
  // It was told first, and the hint names the same one.
  const std::string said = err_.str();
  const std::string prefix = "yard: the sweep's request id is ";
  ASSERT_EQ(said.rfind(prefix, 0), 0u) << said;
  const std::string made_up = said.substr(prefix.size(), 22);
  EXPECT_THAT(made_up, testing::MatchesRegex("sweep-[0-9a-f]{16}"));
  EXPECT_THAT(said, HasSubstr("run the same command with --request-id " +
                              made_up + " to submit the rest"));
  EXPECT_THAT(err_.str(),
              testing::ContainsRegex(
                  "0 of the 2 jobs are submitted; run the same command with "
                  "--request-id sweep-[0-9a-f]{16} to submit the rest"));
}

// Each job's request id (--request-id and its number) is checked with the
// job: one too long, or used before with another spec, stops the sweep
// before anything is submitted, naming --request-id, with no advice to run
// the same command again.
TEST_F(SubmitCommandTest, ASweepsRequestIdsAreCheckedFirst) {
  {
    absl::MutexLock lock(&jobs_.mu);
    jobs_.max_request_id = 10;
  }
  EXPECT_EQ(Submit({"--sweep", "seed=1,2", "--request-id", "abcdefghi"}),
            kExitInvalidArgument);
  EXPECT_EQ(err_.str(),
            "yard: error: sweep job 1 of 2 (mnist-mlp seed=1) (request id "
            "abcdefghi-1: the sweep's and the job's number): --request-id: "
            "request_id: at most 10 bytes, got 11\n");
  EXPECT_EQ(out_.str(), "");
  err_.str("");
  EXPECT_EQ(Submit({"--sweep", "seed=5,6", "--request-id", "sx"}), kExitOk);
  out_.str("");
  EXPECT_EQ(Submit({"--sweep", "seed=7,6", "--request-id", "sx"}),
            kExitInvalidArgument);
  EXPECT_EQ(err_.str(),
            "yard: error: sweep job 1 of 2 (mnist-mlp seed=7) (request id "
            "sx-1: the sweep's and the job's number): --request-id: "
            "request_id: sx-1 was already used by job j-1 with a different "
            "spec\n");
  EXPECT_EQ(out_.str(), "");
  for (const v1::SubmitJobRequest& r : Requests()) {
    if (r.spec().seed() == 7) {
      EXPECT_TRUE(r.validate_only());
    }
  }
  // A single submission says the same of its request id.
  err_.str("");
  EXPECT_EQ(Submit({"--request-id", "sx-2"}), kExitInvalidArgument);
  EXPECT_EQ(err_.str(),
            "yard: error: --request-id: request_id: sx-2 was already used by "
            "job j-2 with a different spec\n");
}

TEST_F(SubmitCommandTest, ASweepDryRunListsTheJobsAndSubmitsNone) {
  EXPECT_EQ(Submit({"--sweep", "seed=1,2", "--dry-run"}), kExitOk)
      << err_.str();
  EXPECT_EQ(out_.str(),
            "would submit: mnist-mlp seed=1\n"
            "would submit: mnist-mlp seed=2\n"
            "the server accepts all 2 jobs; nothing was submitted\n");
  std::vector<v1::SubmitJobRequest> requests = Requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_TRUE(requests[0].validate_only() && requests[1].validate_only());
}

TEST_F(SubmitCommandTest, ABadSweepValueFailsWithExitThreeBeforeAnyRpc) {
  EXPECT_EQ(Submit({"--sweep", "steps=10,many"}), kExitInvalidArgument);
  EXPECT_EQ(err_.str(), "yard: error: --sweep steps=many: not an integer\n");
  err_.str("");
  EXPECT_EQ(Submit({"--sweep", "seed=1,2", "--sweep", "seed=3"}),
            kExitInvalidArgument);
  EXPECT_THAT(err_.str(), HasSubstr("seed is swept twice"));
  EXPECT_TRUE(Requests().empty());
}

}  // namespace
}  // namespace trainyard::client
