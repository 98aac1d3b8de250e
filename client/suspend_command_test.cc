// Tests of `yard suspend` and `yard resume` (and `get`, for JSON output)
// against an in-process fake JobService on a loopback port chosen at run
// time: what is sent, the line printed for each state the server answers
// with, and the exit codes.
#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/commands.h"
#include "client/in_process_server_test_support.h"
#include "client/job_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::client {
namespace {

namespace v1 = ::trainyard::v1;
using ::testing::HasSubstr;

// Answers each job with the state scripted for it (or an error), and
// records the requests.
class FakeJobs final : public v1::JobService::Service {
 public:
  grpc::Status SuspendJob(grpc::ServerContext*,
                          const v1::SuspendJobRequest* req,
                          v1::Job* resp) override {
    absl::MutexLock lock(&mu);
    suspends.push_back(*req);
    return Answer(req->job_id(), resp);
  }
  grpc::Status ResumeJob(grpc::ServerContext*, const v1::ResumeJobRequest* req,
                         v1::Job* resp) override {
    absl::MutexLock lock(&mu);
    resumes.push_back(req->job_id());
    return Answer(req->job_id(), resp);
  }
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* req,
                      v1::Job* resp) override {
    absl::MutexLock lock(&mu);
    return Answer(req->job_id(), resp);
  }

  absl::Mutex mu;
  std::map<std::string, v1::Job> answers ABSL_GUARDED_BY(mu);
  std::map<std::string, grpc::Status> errors ABSL_GUARDED_BY(mu);
  std::vector<v1::SuspendJobRequest> suspends ABSL_GUARDED_BY(mu);
  std::vector<std::string> resumes ABSL_GUARDED_BY(mu);

 private:
  grpc::Status Answer(const std::string& id, v1::Job* resp)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (auto e = errors.find(id); e != errors.end()) return e->second;
    *resp = answers[id];
    resp->set_id(id);
    return grpc::Status::OK;
  }
};

class SuspendCommandTest : public InProcessServerTest {
 protected:
  void SetUp() override { Serve({&jobs_}); }
  void Answer(const std::string& id, v1::JobState state,
              int64_t queue_position = 0) {
    absl::MutexLock lock(&jobs_.mu);
    jobs_.answers[id].set_state(state);
    jobs_.answers[id].set_queue_position(queue_position);
  }
  void Fail(const std::string& id, grpc::StatusCode code,
            const std::string& message) {
    absl::MutexLock lock(&jobs_.mu);
    jobs_.errors[id] = grpc::Status(code, message);
  }
  int Run(Command command, std::vector<std::string> ids,
          const std::string& reason = "") {
    CliArgs args;
    args.command = command;
    args.job_id = ids[0];
    args.job_ids = std::move(ids);
    args.reason = reason;
    return RunCommand(args, *client_, out_, err_);
  }

  FakeJobs jobs_;
  std::ostringstream out_, err_;
};

TEST_F(SuspendCommandTest, SaysWhetherEachJobIsParkedOrStillStopping) {
  Answer("j-1", v1::SUSPENDED);
  Answer("j-2", v1::PREEMPTING);
  EXPECT_EQ(Run(Command::kSuspend, {"j-1", "j-2"}, "maintenance"), kExitOk);
  EXPECT_EQ(out_.str(),
            "job j-1 SUSPENDED\n"
            "job j-2: suspend requested (state PREEMPTING); it is SUSPENDED "
            "once it has checkpointed and stopped\n");
  EXPECT_EQ(err_.str(), "");
  absl::MutexLock lock(&jobs_.mu);
  ASSERT_EQ(jobs_.suspends.size(), 2u);
  EXPECT_EQ(jobs_.suspends[0].job_id(), "j-1");
  EXPECT_EQ(jobs_.suspends[1].reason(), "maintenance");
}

TEST_F(SuspendCommandTest, ResumeNamesTheQueuePosition) {
  Answer("j-1", v1::QUEUED, 3);
  Answer("j-2", v1::PREEMPTING);
  EXPECT_EQ(Run(Command::kResume, {"j-1", "j-2"}), kExitOk);
  EXPECT_EQ(out_.str(),
            "job j-1 QUEUED (#3 in the queue)\n"
            "job j-2: resumed (state PREEMPTING); it is QUEUED again once it "
            "has stopped\n");
}

TEST_F(SuspendCommandTest, SeveralIdsGoOnPastAFailureAndExitWithTheFirst) {
  Answer("j-1", v1::QUEUED);
  Fail("j-2", grpc::StatusCode::FAILED_PRECONDITION,
       "job j-2 is not suspended (RUNNING)");
  Fail("j-3", grpc::StatusCode::RESOURCE_EXHAUSTED,
       "tenant a has 2 jobs queued, its limit is 2");
  Answer("j-4", v1::QUEUED);
  EXPECT_EQ(Run(Command::kResume, {"j-1", "j-2", "j-3", "j-4"}),
            kExitFailedPrecondition);
  EXPECT_EQ(out_.str(), "job j-1 QUEUED\njob j-4 QUEUED\n");
  EXPECT_EQ(err_.str(),
            "yard: error: job j-2 is not suspended (RUNNING)\n"
            "yard: error: job j-3: tenant a has 2 jobs queued, its limit is "
            "2\n");
}

TEST_F(SuspendCommandTest, ErrorsKeepTheirExitCodes) {
  Fail("j-9", grpc::StatusCode::NOT_FOUND, "job j-9 not found");
  EXPECT_EQ(Run(Command::kSuspend, {"j-9"}), kExitNotFound);
  Fail("j-8", grpc::StatusCode::INVALID_ARGUMENT,
       "reason: at most 1024 bytes, got 2000");
  EXPECT_EQ(Run(Command::kSuspend, {"j-8"}), kExitInvalidArgument);
  Fail("j-7", grpc::StatusCode::RESOURCE_EXHAUSTED, "limit is 2");
  EXPECT_EQ(Run(Command::kResume, {"j-7"}), kExitExhausted);
  EXPECT_THAT(err_.str(), HasSubstr("yard: error: job j-9 not found\n"));
  EXPECT_EQ(out_.str(), "");
}

TEST_F(SuspendCommandTest, JsonPrintsTheJob) {
  Answer("j-1", v1::SUSPENDED);
  CliArgs args;
  args.command = Command::kSuspend;
  args.job_id = "j-1";
  args.output = OutputFormat::kJson;
  EXPECT_EQ(RunCommand(args, *client_, out_, err_), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("\"state\": \"SUSPENDED\""));
}

// A job with a time JSON cannot hold (past year 9999, as an older server
// could send for the delete time of a job ending on 9999-12-31): `-o json`
// prints nothing and exits non-zero, never cut-off JSON with exit 0.
TEST_F(SuspendCommandTest, JsonThatCannotBePrintedIsAnError) {
  {
    absl::MutexLock lock(&jobs_.mu);
    v1::Job& job = jobs_.answers["j-1"];
    job.set_state(v1::CANCELLED);
    job.mutable_delete_time()->set_seconds(253'717'747'200);
  }
  for (Command command : {Command::kGet, Command::kSuspend}) {
    CliArgs args;
    args.command = command;
    args.job_id = "j-1";
    args.output = OutputFormat::kJson;
    EXPECT_EQ(RunCommand(args, *client_, out_, err_), kExitServerError);
    EXPECT_EQ(out_.str(), "");
    EXPECT_THAT(err_.str(), HasSubstr("cannot print the server's Job as "
                                      "JSON"));
    err_.str("");
  }
}

}  // namespace
}  // namespace trainyard::client
