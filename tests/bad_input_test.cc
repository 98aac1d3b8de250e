// Every bad input, over the wire and through the CLI: the right gRPC code
// with a message naming the field or id, one line on the CLI's stderr with
// its documented exit code, and a server that keeps serving with every
// stored job intact. No worker is attached: nothing here needs training.
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/field_errors.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/harness.h"

namespace trainyard::itest {
namespace {
namespace v1 = trainyard::v1;

constexpr char kUnknownId[] = "no-such-job-7f3a";

class BadInputTest : public ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    YARD_ASSERT_OK(StartServer());
    // Stored before any bad input; must come out of it untouched.
    YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse r,
                        Submit(MnistSpec{.name = "keeper"}.ToProto(), "k"));
    keeper_ = r.job();
  }

  // The server still answers and holds exactly the jobs it held before.
  void ExpectServerIntact(size_t expected_jobs) {
    YARD_ASSERT_OK(CheckHealth(*stubs().channel));
    YARD_ASSIGN_OR_FAIL(std::vector<v1::Job> all, ListAllJobs(jobs()));
    EXPECT_EQ(all.size(), expected_jobs) << "a bad input created a job";
    YARD_ASSIGN_OR_FAIL(v1::Job keeper, GetJob(jobs(), keeper_.id()));
    EXPECT_EQ(keeper.state(), v1::QUEUED);
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
        keeper.spec(), keeper_.spec()))
        << keeper.spec().DebugString() << "\nvs\n"
        << keeper_.spec().DebugString();
  }

  grpc::Status SubmitStatus(const v1::JobSpec& spec) {
    auto r = Submit(spec);
    if (r.ok()) return grpc::Status::OK;
    return grpc::Status(static_cast<grpc::StatusCode>(r.status().code()),
                        std::string(r.status().message()));
  }

  v1::Job keeper_;
};

struct BadSpec {
  std::string what;
  std::function<void(v1::JobSpec&)> mutate;
  std::vector<std::string> mentions;  // in the gRPC message and CLI stderr
  // The field the status details (google.rpc.BadRequest) name.
  std::string field;
};

std::vector<BadSpec> BadSpecs() {
  return {
      {"absurd steps",
       [](v1::JobSpec& s) { s.set_steps(1'000'000'000'000); },
       {"steps"},
       "spec.steps"},
      {"negative steps",
       [](v1::JobSpec& s) { s.set_steps(-5); },
       {"steps"},
       "spec.steps"},
      {"absurd hidden layer",
       [](v1::JobSpec& s) {
         s.mutable_model()->mutable_mlp()->set_hidden(0, 50'000'000);
       },
       {"model.mlp.hidden"},
       "spec.model.mlp.hidden[0]"},
      {"zero micro batch",
       [](v1::JobSpec& s) { s.mutable_batch()->set_micro_batch(0); },
       {"batch.micro_batch"},
       "spec.batch.micro_batch"},
      {"no model",
       [](v1::JobSpec& s) { s.clear_model(); },
       {"model"},
       "spec.model"},
      {"name too long",
       [](v1::JobSpec& s) { s.set_name(std::string(500, 'n')); },
       {"name"},
       "spec.name"},
      {"missing data file",
       [](v1::JobSpec& s) {
         s.mutable_data()->mutable_mnist()->set_images(
             "examples/data/mnist/no-such-file.gz");
       },
       {"data.mnist.images", "no-such-file.gz"},
       "spec.data.mnist.images"},
      {"path escaping the data root",
       [](v1::JobSpec& s) {
         s.mutable_data()->mutable_mnist()->set_images("../../etc/passwd");
       },
       {"data.mnist.images"},
       "spec.data.mnist.images"},
      {"absolute path",
       [](v1::JobSpec& s) {
         s.mutable_data()->mutable_mnist()->set_labels("/etc/passwd");
       },
       {"data.mnist.labels"},
       "spec.data.mnist.labels"},
      {"warm start from a job that does not exist",
       [](v1::JobSpec& s) { s.mutable_warm_start()->set_job("j-999999"); },
       {"warm_start.job", "j-999999"},
       "spec.warm_start.job"},
      {"warm start from a step and the best at once",
       [](v1::JobSpec& s) {
         s.mutable_warm_start()->set_job("j-000001");
         s.mutable_warm_start()->set_step(10);
         s.mutable_warm_start()->set_best(true);
       },
       {"warm_start.best", "not with warm_start.step"},
       "spec.warm_start.best"},
  };
}

TEST_F(BadInputTest, BadSpecsOverTheWireAreInvalidArgumentNamingTheField) {
  for (const BadSpec& bad : BadSpecs()) {
    SCOPED_TRACE(bad.what);
    v1::JobSpec spec = MnistSpec{.name = "bad"}.ToProto();
    bad.mutate(spec);
    EXPECT_TRUE(RpcFailedWith(
        SubmitStatus(spec), grpc::StatusCode::INVALID_ARGUMENT, bad.mentions));
    // Programs read the field from the status details.
    std::vector<std::string> fields;
    for (const FieldViolation& v : FieldViolations(Submit(spec).status())) {
      fields.push_back(v.field);
    }
    EXPECT_THAT(fields, ::testing::Contains(bad.field));
  }
  // Bytes that are no SubmitJobRequest at all.
  std::string response;
  grpc::Status garbage =
      RawUnaryCall(*stubs().channel, "/trainyard.v1.JobService/SubmitJob",
                   std::string("\xff\xff\xff\xff\x0f\x12", 6), &response);
  EXPECT_FALSE(garbage.ok());
  ExpectServerIntact(1);
}

// On the wire a spec is binary protobuf: a field this server does not know
// and a known field sent with the wrong wire type both arrive as unknown
// fields. Dropping them silently would run something other than what was
// asked, so they are rejected like unknown fields in a YAML spec.
TEST_F(BadInputTest, UnknownOrMistypedSpecFieldsOverTheWireAreRejected) {
  v1::JobSpec unknown = MnistSpec{.name = "bad"}.ToProto();
  unknown.GetReflection()->MutableUnknownFields(&unknown)->AddVarint(999, 1);
  EXPECT_TRUE(RpcFailedWith(SubmitStatus(unknown),
                            grpc::StatusCode::INVALID_ARGUMENT, {"999"}));

  // seed (field 12, a uint64) sent as a string.
  v1::JobSpec mistyped = MnistSpec{.name = "bad"}.ToProto();
  mistyped.clear_seed();
  mistyped.GetReflection()->MutableUnknownFields(&mistyped)->AddLengthDelimited(
      12, "many");
  EXPECT_TRUE(RpcFailedWith(SubmitStatus(mistyped),
                            grpc::StatusCode::INVALID_ARGUMENT, {"12"}));
  ExpectServerIntact(1);
}

TEST_F(BadInputTest, BadSpecsThroughTheCliAreOneLineErrors) {
  for (const BadSpec& bad : BadSpecs()) {
    SCOPED_TRACE(bad.what);
    v1::JobSpec spec = MnistSpec{.name = "bad"}.ToProto();
    bad.mutate(spec);
    std::string json;
    (void)google::protobuf::util::MessageToJsonString(spec, &json);
    std::string path = WriteSpec("bad.json", json);
    EXPECT_TRUE(CliFailedWith(Yard({"submit", path}),
                              YardExit::kInvalidArgument, bad.mentions));
  }
  ExpectServerIntact(1);
}

TEST_F(BadInputTest, MalformedSpecFilesAreOneLineErrorsNamingTheProblem) {
  const std::string good = MnistSpec{.name = "file"}.ToYaml();
  struct Case {
    std::string what, file, text;
    std::vector<std::string> mentions;
  };
  const std::vector<Case> cases = {
      {"malformed YAML",
       "broken.yaml",
       "name: [unclosed\nsteps: 10\n",
       {"broken.yaml"}},
      {"malformed JSON",
       "broken.json",
       "{\"name\": \"x\", \"steps\": }\n",
       {"broken.json"}},
      {"unknown field", "unknown.yaml", good + "stepz: 100\n", {"stepz"}},
      {"unknown nested field",
       "nested.json",
       "{\"name\": \"x\", \"steps\": 10, \"batch\": {\"micro\": 3}}",
       {"micro"}},
      {"wrong type", "type.yaml", "name: x\nsteps: many\n", {"steps"}},
      {"wrong type in JSON",
       "type.json",
       "{\"name\": \"x\", \"steps\": {\"a\": 1}}",
       {"steps"}},
      {"empty file", "empty.yaml", "", {"empty.yaml"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::string path = WriteSpec(c.file, c.text);
    EXPECT_TRUE(CliFailedWith(Yard({"submit", path}),
                              YardExit::kInvalidArgument, c.mentions));
  }
  std::string missing = dir().path() + "/does-not-exist.yaml";
  CommandResult r = Yard({"submit", missing});
  EXPECT_NE(r.exit_code(), YardExit::kOk) << r.DebugString();
  EXPECT_TRUE(CliFailedWith(r, r.exit_code(), {"does-not-exist.yaml"}));
  ExpectServerIntact(1);
}

TEST_F(BadInputTest, UnknownJobIdIsNotFoundEverywhere) {
  v1::JobService::Stub& api = jobs();
  {
    auto ctx = ContextWithTimeout();
    v1::GetJobRequest req;
    req.set_job_id(kUnknownId);
    v1::Job job;
    EXPECT_TRUE(RpcFailedWith(api.GetJob(ctx.get(), req, &job),
                              grpc::StatusCode::NOT_FOUND, {kUnknownId}));
  }
  {
    auto ctx = ContextWithTimeout();
    v1::CancelJobRequest req;
    req.set_job_id(kUnknownId);
    v1::Job job;
    EXPECT_TRUE(RpcFailedWith(api.CancelJob(ctx.get(), req, &job),
                              grpc::StatusCode::NOT_FOUND, {kUnknownId}));
  }
  {
    auto ctx = ContextWithTimeout();
    v1::DeleteJobRequest req;
    req.set_job_id(kUnknownId);
    v1::DeleteJobResponse deleted;
    EXPECT_TRUE(RpcFailedWith(api.DeleteJob(ctx.get(), req, &deleted),
                              grpc::StatusCode::NOT_FOUND, {kUnknownId}));
  }
  {
    WatchResult w = Watch(api, kUnknownId, 0, RpcTimeout());
    EXPECT_TRUE(w.events.empty());
    EXPECT_TRUE(
        RpcFailedWith(w.status, grpc::StatusCode::NOT_FOUND, {kUnknownId}));
  }
  {
    auto ctx = ContextWithTimeout();
    v1::GetJobLogsRequest req;
    req.set_job_id(kUnknownId);
    auto reader = api.GetJobLogs(ctx.get(), req);
    v1::LogChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    EXPECT_TRUE(RpcFailedWith(reader->Finish(), grpc::StatusCode::NOT_FOUND,
                              {kUnknownId}));
  }
  for (const std::string verb : {"get", "cancel", "delete", "watch", "logs"}) {
    SCOPED_TRACE(verb);
    EXPECT_TRUE(CliFailedWith(Yard({verb, kUnknownId}), YardExit::kNotFound,
                              {kUnknownId}));
  }
  ExpectServerIntact(1);
}

TEST_F(BadInputTest, CancellingAFinishedJobIsFailedPrecondition) {
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse r,
                      Submit(MnistSpec{.name = "short-lived"}.ToProto()));
  const std::string id = r.job().id();
  {
    auto ctx = ContextWithTimeout();
    v1::CancelJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    grpc::Status s = jobs().CancelJob(ctx.get(), req, &job);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(job.state(), v1::CANCELLED) << "a queued job cancels at once";
  }
  auto ctx = ContextWithTimeout();
  v1::CancelJobRequest again;
  again.set_job_id(id);
  v1::Job job;
  EXPECT_TRUE(RpcFailedWith(jobs().CancelJob(ctx.get(), again, &job),
                            grpc::StatusCode::FAILED_PRECONDITION, {id}));
  EXPECT_TRUE(
      CliFailedWith(Yard({"cancel", id}), YardExit::kFailedPrecondition, {id}));
  YARD_ASSIGN_OR_FAIL(v1::Job after, GetJob(jobs(), id));
  EXPECT_EQ(after.state(), v1::CANCELLED);
  ExpectServerIntact(2);
}

// Deleting is for jobs that have ended: the queued keeper is refused and
// kept whole; an empty id names the field.
TEST_F(BadInputTest, DeletingAJobThatHasNotEndedIsFailedPrecondition) {
  v1::DeleteJobRequest req;
  req.set_job_id(keeper_.id());
  v1::DeleteJobResponse deleted;
  EXPECT_TRUE(RpcFailedWith(
      jobs().DeleteJob(ContextWithTimeout().get(), req, &deleted),
      grpc::StatusCode::FAILED_PRECONDITION, {keeper_.id(), "QUEUED"}));
  req.clear_job_id();
  EXPECT_TRUE(
      RpcFailedWith(jobs().DeleteJob(ContextWithTimeout().get(), req, &deleted),
                    grpc::StatusCode::INVALID_ARGUMENT, {"job_id"}));
  EXPECT_TRUE(CliFailedWith(Yard({"delete", keeper_.id()}),
                            YardExit::kFailedPrecondition,
                            {keeper_.id(), "QUEUED"}));
  ExpectServerIntact(1);
}

TEST_F(BadInputTest, BadRequestsOtherThanSpecs) {
  {
    auto ctx = ContextWithTimeout();
    v1::ListJobsRequest req;
    req.set_page_token("not-a-token-%%%");
    v1::ListJobsResponse resp;
    EXPECT_TRUE(RpcFailedWith(jobs().ListJobs(ctx.get(), req, &resp),
                              grpc::StatusCode::INVALID_ARGUMENT,
                              {"page_token"}));
  }
  {
    auto ctx = ContextWithTimeout();
    v1::ListJobsRequest req;
    req.set_page_size(-1);
    v1::ListJobsResponse resp;
    EXPECT_TRUE(RpcFailedWith(jobs().ListJobs(ctx.get(), req, &resp),
                              grpc::StatusCode::INVALID_ARGUMENT,
                              {"page_size"}));
  }
  {
    auto ctx = ContextWithTimeout();
    v1::GetJobRequest req;  // no job_id
    v1::Job job;
    grpc::Status s = jobs().GetJob(ctx.get(), req, &job);
    EXPECT_TRUE(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                s.error_code() == grpc::StatusCode::NOT_FOUND)
        << CodeName(s.error_code()) << " " << s.error_message();
  }
  {
    auto ctx = ContextWithTimeout();
    v1::GetUsageRequest req;  // a window that ends before it starts
    req.mutable_start_time()->set_seconds(2'000'000'000);
    req.mutable_end_time()->set_seconds(1'000'000'000);
    v1::UsageReport report;
    EXPECT_TRUE(RpcFailedWith(jobs().GetUsage(ctx.get(), req, &report),
                              grpc::StatusCode::INVALID_ARGUMENT,
                              {"start_time: ", "(end_time)"}));
    req.mutable_start_time()->set_seconds(-1);
    EXPECT_TRUE(
        RpcFailedWith(jobs().GetUsage(ContextWithTimeout().get(), req, &report),
                      grpc::StatusCode::INVALID_ARGUMENT, {"before 1970"}));
  }
  CommandResult usage = Yard({"frobnicate"});
  EXPECT_TRUE(CliFailedWith(usage, YardExit::kUsage, {"frobnicate"}));
  EXPECT_TRUE(CliFailedWith(Yard({"usage", "--since", "yesterday"}),
                            YardExit::kUsage,
                            {"--since: \"yesterday\" is not a time"}));
  ExpectServerIntact(1);
}

}  // namespace
}  // namespace trainyard::itest
