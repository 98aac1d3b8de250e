// Tests of JobClient::Delete and the `yard delete` command against an
// in-process fake JobService on a loopback port chosen at run time.
#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/commands.h"
#include "client/in_process_server_test_support.h"
#include "client/job_client.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace trainyard::client {
namespace {

namespace v1 = ::trainyard::v1;
using ::testing::HasSubstr;

// Answers DeleteJob with a scripted response or error and records what it
// was asked.
class FakeJobs final : public v1::JobService::Service {
 public:
  grpc::Status DeleteJob(grpc::ServerContext* context,
                         const v1::DeleteJobRequest* req,
                         v1::DeleteJobResponse* resp) override {
    absl::MutexLock lock(&mu);
    requests.push_back(*req);
    auto it = context->client_metadata().find("authorization");
    authorization = it == context->client_metadata().end()
                        ? ""
                        : std::string(it->second.data(), it->second.size());
    had_deadline =
        context->deadline() != std::chrono::system_clock::time_point::max();
    if (!error.ok()) return error;
    if (auto failing = errors_by_id.find(req->job_id());
        failing != errors_by_id.end()) {
      return failing->second;
    }
    *resp = reply;
    return grpc::Status::OK;
  }

  absl::Mutex mu;
  v1::DeleteJobResponse reply ABSL_GUARDED_BY(mu);
  grpc::Status error ABSL_GUARDED_BY(mu);
  std::map<std::string, grpc::Status> errors_by_id ABSL_GUARDED_BY(mu);
  std::vector<v1::DeleteJobRequest> requests ABSL_GUARDED_BY(mu);
  std::string authorization ABSL_GUARDED_BY(mu);
  bool had_deadline ABSL_GUARDED_BY(mu) = false;
};

v1::DeleteJobResponse Deleted(const std::string& dir, int64_t bytes) {
  v1::DeleteJobResponse r;
  r.set_job_id("j-000001");
  r.set_deleted_checkpoint_dir(dir);
  r.set_deleted_checkpoint_bytes(bytes);
  return r;
}

class DeleteCommandTest : public InProcessServerTest {
 protected:
  void SetUp() override {
    ClientOptions options;
    options.token = "ytk_tenant";
    Serve({&jobs_}, options);
  }
  void Reply(v1::DeleteJobResponse r) {
    absl::MutexLock lock(&jobs_.mu);
    jobs_.reply = std::move(r);
  }
  void Fail(grpc::StatusCode code, const std::string& message) {
    absl::MutexLock lock(&jobs_.mu);
    jobs_.error = grpc::Status(code, message);
  }
  static CliArgs Delete(bool keep_checkpoints = false,
                        const std::string& job_id = "j-000001") {
    CliArgs args;
    args.command = Command::kDelete;
    args.job_id = job_id;
    args.keep_checkpoints = keep_checkpoints;
    return args;
  }
  int Run(const CliArgs& args) {
    return RunCommand(args, *client_, out_, err_);
  }
  std::vector<v1::DeleteJobRequest> Requests() {
    absl::MutexLock lock(&jobs_.mu);
    return jobs_.requests;
  }

  FakeJobs jobs_;
  std::ostringstream out_, err_;
};

TEST_F(DeleteCommandTest, ClientSendsTheRequestWithTokenAndDeadline) {
  Reply(Deleted("/ckpt/j-000001", 4096));
  absl::StatusOr<v1::DeleteJobResponse> r =
      client_->Delete("j-000001", /*keep_checkpoints=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->job_id(), "j-000001");
  EXPECT_EQ(r->deleted_checkpoint_dir(), "/ckpt/j-000001");
  EXPECT_EQ(r->deleted_checkpoint_bytes(), 4096);
  absl::MutexLock lock(&jobs_.mu);
  ASSERT_EQ(jobs_.requests.size(), 1u);
  EXPECT_EQ(jobs_.requests[0].job_id(), "j-000001");
  EXPECT_TRUE(jobs_.requests[0].keep_checkpoints());
  EXPECT_EQ(jobs_.authorization, "Bearer ytk_tenant");
  EXPECT_TRUE(jobs_.had_deadline);
}

TEST_F(DeleteCommandTest, NamesTheCheckpointsItRemoved) {
  Reply(Deleted("/var/lib/trainyard/checkpoints/j-000001", 1'288'490'189));
  EXPECT_EQ(Run(Delete()), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(),
            "deleted job j-000001 and its checkpoints "
            "(/var/lib/trainyard/checkpoints/j-000001, 1.2 GiB)\n");
  EXPECT_EQ(err_.str(), "");
  std::vector<v1::DeleteJobRequest> requests = Requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].job_id(), "j-000001");
  EXPECT_FALSE(requests[0].keep_checkpoints());
}

TEST_F(DeleteCommandTest, KeepCheckpointsIsSentAndSaid) {
  Reply(Deleted("", 0));
  EXPECT_EQ(Run(Delete(/*keep_checkpoints=*/true)), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "deleted job j-000001 (checkpoints kept)\n");
  std::vector<v1::DeleteJobRequest> requests = Requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_TRUE(requests[0].keep_checkpoints());
}

TEST_F(DeleteCommandTest, AJobWithoutCheckpoints) {
  Reply(Deleted("", 0));
  EXPECT_EQ(Run(Delete()), kExitOk);
  EXPECT_EQ(out_.str(),
            "deleted job j-000001 (no checkpoint directory removed)\n");
}

TEST_F(DeleteCommandTest, AnAnswerWithoutIdNamesTheJobAskedFor) {
  Reply(v1::DeleteJobResponse());
  EXPECT_EQ(Run(Delete(false, "j-000007")), kExitOk);
  EXPECT_EQ(out_.str(),
            "deleted job j-000007 (no checkpoint directory removed)\n");
}

TEST_F(DeleteCommandTest, JsonPrintsTheResponse) {
  Reply(Deleted("/ckpt/j-000001", 2048));
  CliArgs args = Delete();
  args.output = OutputFormat::kJson;
  EXPECT_EQ(Run(args), kExitOk) << err_.str();
  v1::DeleteJobResponse back;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(out_.str(), &back).ok())
      << out_.str();
  EXPECT_EQ(back.job_id(), "j-000001");
  EXPECT_EQ(back.deleted_checkpoint_dir(), "/ckpt/j-000001");
  EXPECT_EQ(back.deleted_checkpoint_bytes(), 2048);
  EXPECT_THAT(out_.str(), HasSubstr("\"deleted_checkpoint_dir\""));
  EXPECT_EQ(err_.str(), "");
}

TEST_F(DeleteCommandTest, SeveralIdsGoOnPastAFailureAndExitWithTheFirst) {
  Reply(v1::DeleteJobResponse());  // no id: the line names the one asked for
  {
    absl::MutexLock lock(&jobs_.mu);
    jobs_.errors_by_id["j-2"] = grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION, "job j-2 is RUNNING");
    jobs_.errors_by_id["j-4"] =
        grpc::Status(grpc::StatusCode::NOT_FOUND, "job j-4 not found");
  }
  CliArgs args = Delete(/*keep_checkpoints=*/true, "j-1");
  args.job_ids = {"j-1", "j-2", "j-3", "j-4"};
  EXPECT_EQ(Run(args), kExitFailedPrecondition);
  EXPECT_EQ(out_.str(),
            "deleted job j-1 (checkpoints kept)\n"
            "deleted job j-3 (checkpoints kept)\n");
  EXPECT_EQ(err_.str(),
            "yard: error: job j-2 is RUNNING\n"
            "yard: error: job j-4 not found\n");
  std::vector<v1::DeleteJobRequest> requests = Requests();
  ASSERT_EQ(requests.size(), 4u);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(requests[i].job_id(), args.job_ids[i]);
    EXPECT_TRUE(requests[i].keep_checkpoints());
  }
}

TEST_F(DeleteCommandTest, AJobThatHasNotEndedIsAFailedPrecondition) {
  Fail(grpc::StatusCode::FAILED_PRECONDITION,
       "job j-000001 is RUNNING: cancel it first and wait for it to end");
  EXPECT_EQ(Run(Delete()), kExitFailedPrecondition);
  EXPECT_EQ(err_.str(),
            "yard: error: job j-000001 is RUNNING: cancel it first and wait "
            "for it to end\n");
  EXPECT_EQ(out_.str(), "");
}

TEST_F(DeleteCommandTest, AnUnknownJobIsNotFoundAndNamed) {
  Fail(grpc::StatusCode::NOT_FOUND, "job j-000009 not found");
  EXPECT_EQ(Run(Delete(false, "j-000009")), kExitNotFound);
  EXPECT_EQ(err_.str(), "yard: error: job j-000009 not found\n");
  err_.str("");
  Fail(grpc::StatusCode::NOT_FOUND, "no such job");  // names no job
  EXPECT_EQ(Run(Delete(false, "j-000009")), kExitNotFound);
  EXPECT_EQ(err_.str(), "yard: error: job j-000009: no such job\n");
  EXPECT_EQ(out_.str(), "");
}

TEST_F(DeleteCommandTest, OtherErrorsKeepTheirExitCodes) {
  Fail(grpc::StatusCode::INVALID_ARGUMENT, "job_id: must not be empty");
  EXPECT_EQ(Run(Delete()), kExitInvalidArgument);
  EXPECT_EQ(err_.str(),
            "yard: error: job j-000001: job_id: must not be empty\n");
  err_.str("");
  Fail(grpc::StatusCode::PERMISSION_DENIED, "not allowed\nsecond line");
  EXPECT_EQ(Run(Delete()), kExitDenied);
  EXPECT_EQ(err_.str(), "yard: error: job j-000001: not allowed second line\n");
}

}  // namespace
}  // namespace trainyard::client
