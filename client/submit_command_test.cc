// Tests of `yard submit SPEC --set FIELD=VALUE`: the command line is parsed,
// the spec file read and overridden, and the job submitted as yard_main.cc
// does, against an in-process fake JobService that records what it gets.
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/cli_args.h"
#include "client/commands.h"
#include "client/in_process_server_test_support.h"
#include "client/job_client.h"
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

// Accepts every submission as job j-1 (or fails it with `error`) and
// records the requests.
class FakeJobs final : public v1::JobService::Service {
 public:
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override {
    absl::MutexLock lock(&mu);
    requests.push_back(*req);
    if (!error.ok()) return error;
    resp->mutable_job()->set_id("j-1");
    *resp->mutable_job()->mutable_spec() = req->spec();
    return grpc::Status::OK;
  }

  absl::Mutex mu;
  grpc::Status error ABSL_GUARDED_BY(mu);
  std::vector<v1::SubmitJobRequest> requests ABSL_GUARDED_BY(mu);
};

class SubmitCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<InProcessServer>(
        std::initializer_list<grpc::Service*>{&jobs_});
    client_ = server_->client();
    ASSERT_NE(client_, nullptr);
    spec_path_ = ::testing::TempDir() + "/submit_command_test.yaml";
    std::ofstream(spec_path_) << kSpec;
  }
  void TearDown() override { server_->Shutdown(); }

  // `yard submit SPEC <flags>`, as yard_main.cc runs it: no RPC unless the
  // spec was read and overridden.
  int Submit(const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {"submit", spec_path_};
    argv.insert(argv.end(), flags.begin(), flags.end());
    absl::StatusOr<CliArgs> args = ParseArgs(argv, nullptr);
    EXPECT_TRUE(args.ok()) << args.status();
    if (!args.ok()) return kExitUsage;
    v1::JobSpec spec;
    if (int code = ReadSubmitSpec(*args, &spec, err_); code != kExitOk) {
      return code;
    }
    return RunSubmit(*args, spec, *client_, out_, err_);
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
  std::unique_ptr<InProcessServer> server_;
  JobClient* client_ = nullptr;
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

}  // namespace
}  // namespace trainyard::client
