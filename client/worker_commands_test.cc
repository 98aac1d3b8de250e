// Tests of JobClient::DrainWorker/UndrainWorker and the `yard drain` and
// `yard undrain` commands against an in-process fake ClusterService on a
// loopback port chosen at run time. drain --wait paces its polls on a clock
// that moves forward at once, so the tests never sleep.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/commands.h"
#include "client/in_process_server_test_support.h"
#include "client/job_client.h"
#include "client/proto_text_test_support.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace trainyard::client {
namespace {

namespace v1 = ::trainyard::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;


// Worker w1 in `state` with `jobs` jobs j-0, j-1, ...
v1::Worker W1(v1::WorkerState state, int jobs) {
  v1::Worker w;
  w.set_id("w1");
  w.set_state(state);
  for (int i = 0; i < jobs; ++i) {
    w.add_jobs()->set_job_id(absl::StrCat("j-", i));
  }
  return w;
}

v1::Worker Drained(int jobs, bool keep_jobs) {
  v1::Worker w = W1(v1::WORKER_DRAINING, jobs);
  w.mutable_drain()->set_worker_id("w1");
  w.mutable_drain()->set_reason("disk swap");
  w.mutable_drain()->set_keep_jobs(keep_jobs);
  return w;
}

v1::ListWorkersResponse ListOf(std::vector<v1::Worker> workers) {
  v1::ListWorkersResponse list;
  list.add_workers()->set_id("w0");  // another worker, to be skipped
  for (v1::Worker& w : workers) *list.add_workers() = std::move(w);
  return list;
}

// Answers DrainWorker/UndrainWorker/ForgetWorker with scripted workers or
// errors and records what it was asked; ListWorkers answers the scripted lists
// in turn (the last one again once they run out).
class FakeCluster final : public v1::ClusterService::Service {
 public:
  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                           v1::ListWorkersResponse* resp) override {
    absl::MutexLock lock(&mu);
    ++list_calls;
    if (!list_error.ok()) return list_error;
    if (lists.empty()) return grpc::Status::OK;
    *resp = lists.front();
    if (lists.size() > 1) lists.pop_front();
    return grpc::Status::OK;
  }
  grpc::Status DrainWorker(grpc::ServerContext* context,
                           const v1::DrainWorkerRequest* req,
                           v1::Worker* resp) override {
    absl::MutexLock lock(&mu);
    drain_requests.push_back(*req);
    Record(*context);
    if (!error.ok()) return error;
    *resp = reply;
    return grpc::Status::OK;
  }
  grpc::Status UndrainWorker(grpc::ServerContext* context,
                             const v1::UndrainWorkerRequest* req,
                             v1::Worker* resp) override {
    absl::MutexLock lock(&mu);
    undrain_requests.push_back(*req);
    Record(*context);
    if (!error.ok()) return error;
    *resp = reply;
    return grpc::Status::OK;
  }

  grpc::Status ForgetWorker(grpc::ServerContext* context,
                            const v1::ForgetWorkerRequest* req,
                            v1::ForgetWorkerResponse*) override {
    absl::MutexLock lock(&mu);
    forget_requests.push_back(*req);
    Record(*context);
    return error;
  }

  absl::Mutex mu;
  v1::Worker reply ABSL_GUARDED_BY(mu);
  grpc::Status error ABSL_GUARDED_BY(mu);
  grpc::Status list_error ABSL_GUARDED_BY(mu);
  std::deque<v1::ListWorkersResponse> lists ABSL_GUARDED_BY(mu);
  int list_calls ABSL_GUARDED_BY(mu) = 0;
  std::vector<v1::DrainWorkerRequest> drain_requests ABSL_GUARDED_BY(mu);
  std::vector<v1::UndrainWorkerRequest> undrain_requests ABSL_GUARDED_BY(mu);
  std::vector<v1::ForgetWorkerRequest> forget_requests ABSL_GUARDED_BY(mu);
  std::string authorization ABSL_GUARDED_BY(mu);
  bool had_deadline ABSL_GUARDED_BY(mu) = false;

 private:
  void Record(const grpc::ServerContext& context)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto it = context.client_metadata().find("authorization");
    authorization = it == context.client_metadata().end()
                        ? ""
                        : std::string(it->second.data(), it->second.size());
    had_deadline =
        context.deadline() != std::chrono::system_clock::time_point::max();
  }
};

// A clock whose SleepUntil returns at once, moving the time to the deadline
// and noting how long was asked for. Used by one thread.
class SteppingClock : public Clock {
 public:
  absl::Time Now() const override { return now_; }
  void SleepUntil(absl::Time deadline) override {
    sleeps.push_back(deadline - now_);
    now_ = std::max(now_, deadline);
  }
  std::vector<absl::Duration> sleeps;

 private:
  absl::Time now_ = absl::UnixEpoch() + absl::Hours(24);
};

class WorkerCommandsTest : public InProcessServerTest {
 protected:
  void SetUp() override {
    ClientOptions options;
    options.token = "ytk_admin";
    Serve({&cluster_}, options);
  }
  void Reply(v1::Worker w) {
    absl::MutexLock lock(&cluster_.mu);
    cluster_.reply = std::move(w);
  }
  void Fail(grpc::StatusCode code, const std::string& message) {
    absl::MutexLock lock(&cluster_.mu);
    cluster_.error = grpc::Status(code, message);
  }
  void Lists(std::vector<v1::ListWorkersResponse> lists) {
    absl::MutexLock lock(&cluster_.mu);
    cluster_.lists.assign(lists.begin(), lists.end());
  }
  static CliArgs Drain(bool keep_jobs = false, bool wait = false) {
    CliArgs args;
    args.command = Command::kDrain;
    args.worker_id = "w1";
    args.reason = "disk swap";
    args.keep_jobs = keep_jobs;
    args.wait = wait;
    return args;
  }
  static CliArgs Undrain(const std::string& worker_id = "w1") {
    CliArgs args;
    args.command = Command::kUndrain;
    args.worker_id = worker_id;
    return args;
  }
  static CliArgs Forget(const std::string& worker_id = "w1") {
    CliArgs args;
    args.command = Command::kForget;
    args.worker_id = worker_id;
    return args;
  }
  int Run(const CliArgs& args) {
    return RunWorkerCommand(args, *client_, clock_, out_, err_);
  }

  FakeCluster cluster_;
  SteppingClock clock_;
  std::ostringstream out_, err_;
};

TEST_F(WorkerCommandsTest, DrainWorkerCarriesTheRequestTokenAndDeadline) {
  Reply(Drained(1, true));
  absl::StatusOr<v1::Worker> w = client_->DrainWorker("w1", "disk swap", true);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->id(), "w1");
  EXPECT_EQ(w->drain().reason(), "disk swap");
  absl::MutexLock lock(&cluster_.mu);
  ASSERT_EQ(cluster_.drain_requests.size(), 1u);
  const v1::DrainWorkerRequest& r = cluster_.drain_requests[0];
  EXPECT_EQ(r.worker_id(), "w1");
  EXPECT_EQ(r.reason(), "disk swap");
  EXPECT_TRUE(r.keep_jobs());
  EXPECT_EQ(cluster_.authorization, "Bearer ytk_admin");
  EXPECT_TRUE(cluster_.had_deadline);
}

TEST_F(WorkerCommandsTest, UndrainWorkerCarriesTheWorkerId) {
  Reply(W1(v1::WORKER_READY, 0));
  absl::StatusOr<v1::Worker> w = client_->UndrainWorker("w1");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->state(), v1::WORKER_READY);
  absl::MutexLock lock(&cluster_.mu);
  ASSERT_EQ(cluster_.undrain_requests.size(), 1u);
  EXPECT_EQ(cluster_.undrain_requests[0].worker_id(), "w1");
  EXPECT_EQ(cluster_.authorization, "Bearer ytk_admin");
  EXPECT_TRUE(cluster_.had_deadline);
}

TEST_F(WorkerCommandsTest, ClientPassesErrorsThrough) {
  Fail(grpc::StatusCode::NOT_FOUND, "no worker 'ghost' is known");
  absl::StatusOr<v1::Worker> w = client_->DrainWorker("ghost", "", false);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(w.status().message(), "no worker 'ghost' is known");
  Fail(grpc::StatusCode::FAILED_PRECONDITION, "w1 is not drained");
  EXPECT_EQ(client_->UndrainWorker("w1").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(WorkerCommandsTest, DrainSaysTheJobsAreBeingPreempted) {
  Reply(Drained(2, false));
  EXPECT_EQ(RunCommand(Drain(), *client_, out_, err_), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(),
            "worker w1 draining: 2 jobs are being preempted and will resume "
            "elsewhere\n");
  EXPECT_EQ(err_.str(), "");
  Reply(Drained(1, false));
  out_.str("");
  EXPECT_EQ(Run(Drain()), kExitOk);
  EXPECT_EQ(out_.str(),
            "worker w1 draining: 1 job is being preempted and will resume "
            "elsewhere\n");
}

TEST_F(WorkerCommandsTest, DrainKeepingJobsSaysTheyRunThereToTheEnd) {
  Reply(Drained(1, true));
  EXPECT_EQ(Run(Drain(/*keep_jobs=*/true)), kExitOk);
  EXPECT_EQ(out_.str(),
            "worker w1 draining: 1 job keeps running there until it ends\n");
  Reply(Drained(3, true));
  out_.str("");
  EXPECT_EQ(Run(Drain(/*keep_jobs=*/true)), kExitOk);
  EXPECT_EQ(out_.str(),
            "worker w1 draining: 3 jobs keep running there until they end\n");
}

TEST_F(WorkerCommandsTest, DrainOfAnIdleWorker) {
  Reply(Drained(0, false));
  EXPECT_EQ(Run(Drain()), kExitOk);
  EXPECT_EQ(out_.str(), "worker w1 draining: no jobs on it\n");
  EXPECT_TRUE(clock_.sleeps.empty());
}

TEST_F(WorkerCommandsTest, DrainAsJsonPrintsTheWorker) {
  Reply(Drained(1, true));
  CliArgs args = Drain(true);
  args.output = OutputFormat::kJson;
  EXPECT_EQ(Run(args), kExitOk);
  v1::Worker back;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(out_.str(), &back).ok())
      << out_.str();
  EXPECT_EQ(back.id(), "w1");
  EXPECT_EQ(back.state(), v1::WORKER_DRAINING);
  EXPECT_TRUE(back.drain().keep_jobs());
  EXPECT_THAT(out_.str(), HasSubstr("\"keep_jobs\": true"));
}

TEST_F(WorkerCommandsTest, DrainWaitPrintsEachChangeUntilNoJobIsLeft) {
  Reply(Drained(2, false));
  Lists({ListOf({Drained(2, false)}), ListOf({Drained(1, false)}),
         ListOf({Drained(1, false)}), ListOf({Drained(0, false)})});
  EXPECT_EQ(Run(Drain(false, /*wait=*/true)), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(),
            "worker w1 draining: 2 jobs are being preempted and will resume "
            "elsewhere\n"
            "worker w1: 1 job left\n"
            "worker w1 drained: no jobs left\n");
  EXPECT_EQ(err_.str(), "");
  // One poll each 250 ms: no busy loop.
  EXPECT_THAT(clock_.sleeps,
              ElementsAre(absl::Milliseconds(250), absl::Milliseconds(250),
                          absl::Milliseconds(250), absl::Milliseconds(250)));
  absl::MutexLock lock(&cluster_.mu);
  EXPECT_EQ(cluster_.list_calls, 4);
}

TEST_F(WorkerCommandsTest, DrainWaitOfAnIdleWorkerEndsAtOnce) {
  Reply(Drained(0, false));
  EXPECT_EQ(Run(Drain(false, /*wait=*/true)), kExitOk);
  EXPECT_EQ(out_.str(),
            "worker w1 draining: no jobs on it\n"
            "worker w1 drained: no jobs left\n");
  absl::MutexLock lock(&cluster_.mu);
  EXPECT_EQ(cluster_.list_calls, 0);
}

TEST_F(WorkerCommandsTest, DrainWaitAsJsonKeepsStdoutForTheWorker) {
  Reply(Drained(1, true));
  Lists({ListOf({Drained(0, true)})});
  CliArgs args = Drain(true, /*wait=*/true);
  args.output = OutputFormat::kJson;
  EXPECT_EQ(Run(args), kExitOk);
  v1::Worker back;
  EXPECT_TRUE(
      google::protobuf::util::JsonStringToMessage(out_.str(), &back).ok())
      << out_.str();
  EXPECT_EQ(err_.str(), "worker w1 drained: no jobs left\n");
}

TEST_F(WorkerCommandsTest, DrainWaitReportsAWorkerThatVanished) {
  Reply(Drained(2, false));
  Lists({ListOf({Drained(1, false)}), ListOf({})});
  EXPECT_EQ(Run(Drain(false, /*wait=*/true)), kExitNotFound);
  EXPECT_THAT(out_.str(), HasSubstr("worker w1: 1 job left\n"));
  EXPECT_EQ(err_.str(),
            "yard: error: worker w1 is no longer known to the server; it "
            "still had 1 job\n");
}

TEST_F(WorkerCommandsTest, DrainWaitReportsAWorkerUndrainedMeanwhile) {
  Reply(Drained(1, false));
  Lists({ListOf({W1(v1::WORKER_READY, 1)})});
  EXPECT_EQ(Run(Drain(false, /*wait=*/true)), kExitFailedPrecondition);
  EXPECT_EQ(err_.str(),
            "yard: error: worker w1 takes jobs again (undrained while "
            "waiting) with 1 job on it\n");
}

TEST_F(WorkerCommandsTest, DrainWaitGivesUpOnAnRpcError) {
  Reply(Drained(1, false));
  {
    absl::MutexLock lock(&cluster_.mu);
    cluster_.list_error =
        grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "not allowed");
  }
  EXPECT_EQ(Run(Drain(false, /*wait=*/true)), kExitDenied);
  EXPECT_EQ(err_.str(), "yard: error: not allowed\n");
  EXPECT_EQ(clock_.sleeps.size(), 1u);
}

TEST_F(WorkerCommandsTest, UndrainSaysTheWorkerTakesJobsAgain) {
  Reply(W1(v1::WORKER_READY, 0));
  EXPECT_EQ(RunCommand(Undrain(), *client_, out_, err_), kExitOk);
  EXPECT_EQ(out_.str(), "worker w1 ready: takes jobs again\n");
}

TEST_F(WorkerCommandsTest, UndrainOfAWorkerShuttingDownSaysItStillDrains) {
  Reply(W1(v1::WORKER_DRAINING, 1));
  EXPECT_EQ(Run(Undrain()), kExitOk);
  EXPECT_EQ(out_.str(),
            "worker w1 undrained; state DRAINING: the worker is shutting "
            "down\n");
  Reply(W1(v1::WORKER_LOST, 0));
  out_.str("");
  EXPECT_EQ(Run(Undrain()), kExitOk);
  EXPECT_EQ(out_.str(),
            "worker w1 undrained; state LOST: takes jobs once it is ready\n");
}

TEST_F(WorkerCommandsTest, UndrainAsJson) {
  Reply(W1(v1::WORKER_READY, 0));
  CliArgs args = Undrain();
  args.output = OutputFormat::kJson;
  EXPECT_EQ(Run(args), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("\"state\": \"WORKER_READY\""));
}

TEST_F(WorkerCommandsTest, ForgetSendsTheWorkerIdAndSaysItIsForgotten) {
  EXPECT_EQ(RunCommand(Forget("gpu-07"), *client_, out_, err_), kExitOk);
  EXPECT_EQ(out_.str(), "worker gpu-07 forgotten\n");
  EXPECT_EQ(err_.str(), "");
  absl::MutexLock lock(&cluster_.mu);
  ASSERT_EQ(cluster_.forget_requests.size(), 1u);
  EXPECT_EQ(cluster_.forget_requests[0].worker_id(), "gpu-07");
  EXPECT_EQ(cluster_.authorization, "Bearer ytk_admin");
  EXPECT_TRUE(cluster_.had_deadline);
}

TEST_F(WorkerCommandsTest, ForgetOfAWorkerNotLostSaysWhy) {
  Fail(grpc::StatusCode::FAILED_PRECONDITION,
       "worker 'w1' is not lost (connected): only a lost worker can be "
       "forgotten");
  EXPECT_EQ(Run(Forget()), kExitFailedPrecondition);
  EXPECT_EQ(err_.str(),
            "yard: error: worker 'w1' is not lost (connected): only a lost "
            "worker can be forgotten\n");
  EXPECT_EQ(out_.str(), "");
}

TEST_F(WorkerCommandsTest, ErrorsAreOneLineWithTheirExitCodes) {
  Fail(grpc::StatusCode::NOT_FOUND, "no worker 'ghost' is known");
  EXPECT_EQ(RunCommand(Undrain("ghost"), *client_, out_, err_), kExitNotFound);
  EXPECT_EQ(err_.str(), "yard: error: no worker 'ghost' is known\n");
  err_.str("");
  Fail(grpc::StatusCode::NOT_FOUND, "unknown worker");  // names no worker
  CliArgs drain = Drain();
  EXPECT_EQ(Run(drain), kExitNotFound);
  EXPECT_EQ(err_.str(), "yard: error: worker w1: unknown worker\n");
  err_.str("");
  Fail(grpc::StatusCode::PERMISSION_DENIED, "DrainWorker needs an admin token");
  EXPECT_EQ(Run(drain), kExitDenied);
  EXPECT_EQ(err_.str(), "yard: error: DrainWorker needs an admin token\n");
  err_.str("");
  Fail(grpc::StatusCode::FAILED_PRECONDITION,
       "worker w1 is not drained by an administrator");
  EXPECT_EQ(Run(Undrain()), kExitFailedPrecondition);
  EXPECT_EQ(err_.str(),
            "yard: error: worker w1 is not drained by an administrator\n");
  err_.str("");
  Fail(grpc::StatusCode::INVALID_ARGUMENT, "reason: longer than 256 bytes");
  EXPECT_EQ(Run(drain), kExitInvalidArgument);
  EXPECT_EQ(out_.str(), "");
}

}  // namespace
}  // namespace trainyard::client
