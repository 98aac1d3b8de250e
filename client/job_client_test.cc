// Tests of JobClient and the `yard` commands against an in-process fake
// JobService/ClusterService on a loopback port chosen at run time.
#include "client/job_client.h"

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/commands.h"
#include "client/in_process_server_test_support.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::client {
namespace {

namespace v1 = ::trainyard::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::JobEvent Progress(int64_t seq, int64_t step) {
  v1::JobEvent e;
  e.set_job_id("j-1");
  e.set_sequence(seq);
  auto* p = e.mutable_trainer()->mutable_progress();
  p->set_step(step);
  p->set_total_steps(100);
  return e;
}

v1::JobEvent Terminal(int64_t seq, v1::JobState to) {
  v1::JobEvent e;
  e.set_job_id("j-1");
  e.set_sequence(seq);
  e.mutable_state_change()->set_from(v1::RUNNING);
  e.mutable_state_change()->set_to(to);
  return e;
}

// Serves one job "j-1" with scripted events and log; can break a stream
// once with UNAVAILABLE to exercise resuming.
class FakeJobs final : public v1::JobService::Service {
 public:
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override {
    if (req->spec().steps() <= 0) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "steps: must be in [1, 10000000], got 0");
    }
    absl::MutexLock lock(&mu_);
    last_request_id_ = req->request_id();
    *resp->mutable_job() = job_;
    return grpc::Status::OK;
  }
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* req,
                      v1::Job* job) override {
    if (req->job_id() != "j-1") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such job");
    }
    absl::MutexLock lock(&mu_);
    *job = job_;
    return grpc::Status::OK;
  }
  // 25 jobs, paged by a token holding the next index.
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override {
    int start = 0;
    if (!req->page_token().empty() &&
        !absl::SimpleAtoi(req->page_token(), &start)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "page_token");
    }
    int size = req->page_size() > 0 ? req->page_size() : 10;
    int end = std::min(start + size, 25);
    for (int i = start; i < end; ++i)
      resp->add_jobs()->set_id(absl::StrCat("j", i));
    if (end < 25) resp->set_next_page_token(absl::StrCat(end));
    absl::MutexLock lock(&mu_);
    page_sizes_.push_back(req->page_size());
    return grpc::Status::OK;
  }
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* req,
                         v1::Job*) override {
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat("job ", req->job_id(), " already ended\nsecond line"));
  }
  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::JobEvent>* writer) override {
    if (req->job_id() != "j-1") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such job");
    }
    bool break_now;
    {
      absl::MutexLock lock(&mu_);
      watch_after_.push_back(req->after_sequence());
      break_now = break_watch_once_;
      break_watch_once_ = false;
    }
    for (const v1::JobEvent& e : events_) {
      if (e.sequence() <= req->after_sequence()) continue;
      writer->Write(e);
      if (break_now && e.sequence() == 2) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting");
      }
    }
    return grpc::Status::OK;
  }
  grpc::Status GetJobLogs(grpc::ServerContext*,
                          const v1::GetJobLogsRequest* req,
                          grpc::ServerWriter<v1::LogChunk>* writer) override {
    const std::string log = "line one\nline two\n";
    bool break_now;
    {
      absl::MutexLock lock(&mu_);
      log_offsets_.push_back(req->offset());
      log_tails_.push_back(req->tail_lines());
      break_now = break_logs_once_;
      break_logs_once_ = false;
    }
    // The last line begins at byte 9.
    const int64_t first = req->tail_lines() == 1 ? 9 : req->offset();
    for (int64_t off = first; off < static_cast<int64_t>(log.size());
         off += 5) {
      v1::LogChunk chunk;
      chunk.set_offset(off);
      chunk.set_data(log.substr(static_cast<size_t>(off), 5));
      writer->Write(chunk);
      if (break_now) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "x");
    }
    return grpc::Status::OK;
  }

  // Checkpoint step 7 of "j-1": two files sent 4 bytes a chunk; breaks the
  // stream with UNAVAILABLE after `break_download_after_` chunks, once.
  grpc::Status DownloadCheckpoint(
      grpc::ServerContext*, const v1::DownloadCheckpointRequest* req,
      grpc::ServerWriter<v1::CheckpointChunk>* writer) override {
    int break_after;
    {
      absl::MutexLock lock(&mu_);
      download_requests_.push_back(*req);
      break_after = break_download_after_;
      break_download_after_ = -1;
    }
    const std::vector<std::pair<std::string, std::string>> files = {
        {"meta.json", "{\"step\": 7}"}, {"model.safetensors", "0123456789"}};
    size_t i = 0;
    while (!req->resume_file().empty() && files[i].first != req->resume_file())
      ++i;
    int sent = 0;
    for (; i < files.size(); ++i) {
      const auto& [name, data] = files[i];
      int64_t off = name == req->resume_file() ? req->resume_offset() : 0;
      for (; off < static_cast<int64_t>(data.size()); off += 4) {
        if (sent++ == break_after) {
          return grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting");
        }
        v1::CheckpointChunk c;
        c.set_step(7);
        c.set_file(name);
        c.set_file_size(static_cast<int64_t>(data.size()));
        c.set_offset(off);
        c.set_data(data.substr(static_cast<size_t>(off), 4));
        writer->Write(c);
      }
    }
    return grpc::Status::OK;
  }

  void SetJob(v1::Job job) {
    absl::MutexLock lock(&mu_);
    job_ = std::move(job);
  }

  std::vector<v1::JobEvent> events_;  // set before serving
  absl::Mutex mu_;
  v1::Job job_ ABSL_GUARDED_BY(mu_);
  bool break_watch_once_ ABSL_GUARDED_BY(mu_) = false;
  bool break_logs_once_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int64_t> watch_after_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> log_offsets_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> log_tails_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> page_sizes_ ABSL_GUARDED_BY(mu_);
  std::string last_request_id_ ABSL_GUARDED_BY(mu_);
  int break_download_after_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<v1::DownloadCheckpointRequest> download_requests_
      ABSL_GUARDED_BY(mu_);
};

class FakeCluster final : public v1::ClusterService::Service {
  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                           v1::ListWorkersResponse* resp) override {
    auto* w = resp->add_workers();
    w->set_id("w1");
    w->set_cpu_slots(1);
    return grpc::Status::OK;
  }
  grpc::Status GetClusterStatus(grpc::ServerContext*,
                                const v1::GetClusterStatusRequest*,
                                v1::ClusterStatus* status) override {
    status->set_workers_ready(1);
    return grpc::Status::OK;
  }
};

class JobClientTest : public InProcessServerTest {
 protected:
  void SetUp() override {
    jobs_.events_ = {Progress(1, 10), Progress(2, 20), Progress(3, 30),
                     Terminal(4, v1::SUCCEEDED)};
    v1::Job job;
    job.set_id("j-1");
    job.set_state(v1::SUCCEEDED);
    job.mutable_result()->set_eval_accuracy(0.95);
    job.mutable_result()->set_eval_loss(0.15);
    job.mutable_result()->set_checkpoint_path("/ck/j-1");
    jobs_.SetJob(job);
    ClientOptions options;
    options.reconnect_timeout = absl::Seconds(5);
    Serve({&jobs_, &cluster_}, options);
  }
  FakeJobs jobs_;
  FakeCluster cluster_;
  std::ostringstream out_, err_;
};

TEST_F(JobClientTest, UnreachableServerIsUnavailableNamingTheAddress) {
  // A port that was just free: nothing listens there.
  server_->Shutdown();
  ClientOptions options;
  options.server = server_->address();
  auto client = JobClient::Connect(options);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(client.status().message(),
              HasSubstr("cannot reach yard-server at 127.0.0.1:"));
}

TEST_F(JobClientTest, UnaryCallsPassCodesThrough) {
  auto job = client_->Get("j-1");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->id(), "j-1");
  EXPECT_EQ(client_->Get("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->Cancel("j-1", "").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(JobClientTest, ListAllPagesAndHonoursTheLimit) {
  bool truncated = true;
  auto all = client_->ListAll({}, 0, &truncated);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 25u);
  EXPECT_FALSE(truncated);
  auto some = client_->ListAll({}, 12, &truncated);
  ASSERT_TRUE(some.ok());
  EXPECT_EQ(some->size(), 12u);
  EXPECT_EQ(some->back().id(), "j11");
  EXPECT_TRUE(truncated);
  auto exact = client_->ListAll({}, 25, &truncated);
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->size(), 25u);
  EXPECT_FALSE(truncated);
}

TEST_F(JobClientTest, WatchResumesFromTheLastSequenceAfterUnavailable) {
  {
    absl::MutexLock lock(&jobs_.mu_);
    jobs_.break_watch_once_ = true;
  }
  std::vector<int64_t> seen;
  absl::Status s = client_->Watch("j-1", 0, [&](const v1::JobEvent& e) {
    seen.push_back(e.sequence());
    return true;
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_THAT(seen, ElementsAre(1, 2, 3, 4));
  absl::MutexLock lock(&jobs_.mu_);
  EXPECT_THAT(jobs_.watch_after_, ElementsAre(0, 2));
}

TEST_F(JobClientTest, WatchStopsWhenTheCallbackSaysSo) {
  std::vector<int64_t> seen;
  absl::Status s = client_->Watch("j-1", 1, [&](const v1::JobEvent& e) {
    seen.push_back(e.sequence());
    return false;
  });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_THAT(seen, ElementsAre(2));
}

TEST_F(JobClientTest, LogsResumeFromTheLastByte) {
  {
    absl::MutexLock lock(&jobs_.mu_);
    jobs_.break_logs_once_ = true;
  }
  std::string log;
  absl::Status s = client_->Logs(
      "j-1", 0, true, [&](const v1::LogChunk& c) { log += c.data(); });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(log, "line one\nline two\n");
  absl::MutexLock lock(&jobs_.mu_);
  EXPECT_THAT(jobs_.log_offsets_, ElementsAre(0, 5));
}

TEST_F(JobClientTest, LogsFromTheTailResumeFromTheLastByte) {
  {
    absl::MutexLock lock(&jobs_.mu_);
    jobs_.break_logs_once_ = true;
  }
  std::string log;
  absl::Status s = client_->Logs(
      "j-1", 0, true, [&](const v1::LogChunk& c) { log += c.data(); },
      /*tail_lines=*/1);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(log, "line two\n");
  absl::MutexLock lock(&jobs_.mu_);
  // Asked for the tail, then (having seen where it began) by offset.
  EXPECT_THAT(jobs_.log_tails_, ElementsAre(1, 0));
  EXPECT_THAT(jobs_.log_offsets_, ElementsAre(0, 14));
}

TEST_F(JobClientTest, ADownloadBrokenOffResumesAfterTheLastChunk) {
  for (int break_after : {2, 3, 5}) {
    SCOPED_TRACE(break_after);
    {
      absl::MutexLock lock(&jobs_.mu_);
      jobs_.break_download_after_ = break_after;
      jobs_.download_requests_.clear();
    }
    std::map<std::string, std::string> files;
    v1::DownloadCheckpointRequest request;
    request.set_job_id("j-1");
    request.set_best(true);
    absl::Status s =
        client_->DownloadCheckpoint(request, [&](const v1::CheckpointChunk& c) {
          std::string& file = files[c.file()];
          EXPECT_EQ(c.offset(), static_cast<int64_t>(file.size()))
              << "every byte once, in order";
          file += c.data();
          return absl::OkStatus();
        });
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(files["meta.json"], "{\"step\": 7}");
    EXPECT_EQ(files["model.safetensors"], "0123456789");
    absl::MutexLock lock(&jobs_.mu_);
    ASSERT_EQ(jobs_.download_requests_.size(), 2u);
    const v1::DownloadCheckpointRequest& again = jobs_.download_requests_[1];
    // The same checkpoint by its step (not "the best", which may change).
    EXPECT_EQ(again.step(), 7);
    EXPECT_FALSE(again.best());
    // meta.json is 11 bytes, 3 chunks: broken after 2 chunks the client has
    // 8 of its bytes, after 3 all 11, after 5 also 8 of the tensors'.
    const std::map<int, std::pair<std::string, int64_t>> where = {
        {2, {"meta.json", 8}},
        {3, {"meta.json", 11}},
        {5, {"model.safetensors", 8}}};
    EXPECT_EQ(again.resume_file(), where.at(break_after).first);
    EXPECT_EQ(again.resume_offset(), where.at(break_after).second);
  }
}

SubmitPlan PlanOf(const v1::JobSpec& spec) {
  SubmitPlan plan;
  plan.specs.push_back(spec);
  return plan;
}

TEST_F(JobClientTest, SubmitWaitPrintsIdEventsAndOutcome) {
  CliArgs args;
  args.command = Command::kSubmit;
  args.spec_path = "spec.yaml";
  args.wait = true;
  args.request_id = "r-9";
  v1::JobSpec spec;
  spec.set_steps(100);
  EXPECT_EQ(RunSubmit(args, PlanOf(spec), *client_, out_, err_), kExitOk)
      << err_.str();
  EXPECT_EQ(out_.str(),
            "j-1\n"
            "step 10/100 loss 0.0000 0 samples/s\n"
            "step 20/100 loss 0.0000 0 samples/s\n"
            "step 30/100 loss 0.0000 0 samples/s\n"
            "state RUNNING -> SUCCEEDED\n"
            "job j-1 SUCCEEDED: accuracy 95.00%, eval loss 0.1500, "
            "checkpoint /ck/j-1\n");
  absl::MutexLock lock(&jobs_.mu_);
  EXPECT_EQ(jobs_.last_request_id_, "r-9");
}

TEST_F(JobClientTest, WatchOfAFailedJobExitsOne) {
  v1::Job job;
  job.set_id("j-1");
  job.set_state(v1::FAILED);
  job.set_state_reason("yard-train exited with 1");
  jobs_.SetJob(job);
  CliArgs args;
  args.command = Command::kWatch;
  args.job_id = "j-1";
  EXPECT_EQ(RunCommand(args, *client_, out_, err_), kExitJobNotSucceeded);
  EXPECT_THAT(out_.str(),
              HasSubstr("job j-1 FAILED: yard-train exited with 1"));
}

TEST_F(JobClientTest, ServerRejectionOfASpecNamesTheFile) {
  CliArgs args;
  args.command = Command::kSubmit;
  args.spec_path = "bad.yaml";
  EXPECT_EQ(RunSubmit(args, PlanOf(v1::JobSpec()), *client_, out_, err_),
            kExitInvalidArgument);
  EXPECT_EQ(err_.str(),
            "yard: error: bad.yaml: steps: must be in [1, 10000000], got 0\n");
}

TEST_F(JobClientTest, ErrorsAreOneLineAndNameTheJob) {
  CliArgs args;
  args.command = Command::kGet;
  args.job_id = "j-404";
  EXPECT_EQ(RunCommand(args, *client_, out_, err_), kExitNotFound);
  EXPECT_EQ(err_.str(), "yard: error: job j-404: no such job\n");
  err_.str("");
  args.command = Command::kCancel;
  args.job_id = "j-1";
  EXPECT_EQ(RunCommand(args, *client_, out_, err_), kExitFailedPrecondition);
  EXPECT_EQ(err_.str(), "yard: error: job j-1 already ended second line\n");
}

TEST_F(JobClientTest, ListAndWorkersInBothFormats) {
  CliArgs args;
  args.command = Command::kList;
  args.limit = 0;
  EXPECT_EQ(RunCommand(args, *client_, out_, err_), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("\nj24 "));
  out_.str("");
  args.output = OutputFormat::kJson;
  args.limit = 3;
  EXPECT_EQ(RunCommand(args, *client_, out_, err_), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("\"id\": \"j2\""));
  EXPECT_THAT(err_.str(), HasSubstr("showing the first 3 jobs"));
  out_.str("");
  args.command = Command::kWorkers;
  args.output = OutputFormat::kTable;
  EXPECT_EQ(RunCommand(args, *client_, out_, err_), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("\nw1 "));
  EXPECT_THAT(out_.str(), HasSubstr("1 ready"));
}

}  // namespace
}  // namespace trainyard::client
