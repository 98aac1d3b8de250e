#include "tests/harness.h"

#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/rpc_status.h"
#include "google/protobuf/util/json_util.h"

namespace trainyard::itest {
namespace v1 = trainyard::v1;
namespace fs = std::filesystem;

v1::JobSpec MnistSpec::ToProto() const {
  v1::JobSpec spec;
  spec.set_name(name);
  spec.mutable_model()->mutable_mlp()->add_hidden(hidden);
  v1::MnistData* mnist = spec.mutable_data()->mutable_mnist();
  mnist->set_images(images);
  mnist->set_labels(labels);
  mnist->set_holdout(holdout);
  spec.mutable_batch()->set_micro_batch(micro_batch);
  spec.set_steps(steps);
  spec.mutable_checkpoint()->set_every_steps(checkpoint_every);
  spec.mutable_eval()->set_every_steps(eval_every);
  spec.set_log_every_steps(log_every);
  spec.set_seed(1);
  if (gpus > 0) spec.mutable_resources()->set_gpus(gpus);
  if (gpu_compute_milli > 0) {
    spec.mutable_resources()->set_gpu_compute_milli(gpu_compute_milli);
  }
  if (bf16) spec.set_precision(v1::BF16);
  return spec;
}

std::string MnistSpec::ToJson() const {
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(ToProto(), &json);
  return json;
}

std::string MnistSpec::ToYaml() const {
  return absl::StrCat(
      "# written by the integration tests\n", "name: ", name, "\n",
      "model:\n  mlp:\n    hidden: [", hidden, "]\n",
      "data:\n  mnist:\n    images: ", images, "\n    labels: ", labels,
      "\n    holdout: ", holdout, "\n", "batch:\n  micro_batch: ", micro_batch,
      "\n", "steps: ", steps, "\n",
      "checkpoint:\n  every_steps: ", checkpoint_every, "\n",
      "eval:\n  every_steps: ", eval_every, "\n",
      "log_every_steps: ", log_every, "\n", "seed: 1\n",
      bf16 ? "precision: BF16\n" : "",
      gpus > 0 ? absl::StrCat("resources:\n  gpus: ", gpus, "\n") : "",
      gpu_compute_milli > 0
          ? absl::StrCat("  gpu_compute_milli: ", gpu_compute_milli, "\n")
          : "");
}

absl::Duration StartTimeout() { return Scaled(absl::Seconds(30)); }
absl::Duration JobTimeout() { return Scaled(absl::Seconds(90)); }
absl::Duration RpcTimeout() { return Scaled(absl::Seconds(10)); }

absl::Status ToAbsl(const grpc::Status& s) { return FromGrpcStatus(s); }

::testing::AssertionResult RpcFailedWith(
    const grpc::Status& s, grpc::StatusCode code,
    const std::vector<std::string>& mentions) {
  if (s.error_code() != code) {
    return ::testing::AssertionFailure()
           << "expected " << CodeName(code) << ", got "
           << CodeName(s.error_code()) << " \"" << s.error_message() << "\"";
  }
  for (const auto& m : mentions) {
    if (s.error_message().find(m) == std::string::npos) {
      return ::testing::AssertionFailure()
             << CodeName(code) << " message \"" << s.error_message()
             << "\" does not mention \"" << m << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult CliFailedWith(
    const CommandResult& r, int exit_code,
    const std::vector<std::string>& mentions) {
  if (r.timed_out || r.exit_code() != exit_code) {
    return ::testing::AssertionFailure()
           << "expected exit " << exit_code << "\n"
           << r.DebugString();
  }
  std::string err = r.err;
  if (!err.empty() && err.back() == '\n') err.pop_back();
  if (err.empty() || err.find('\n') != std::string::npos) {
    return ::testing::AssertionFailure()
           << "expected exactly one line on stderr\n"
           << r.DebugString();
  }
  for (const auto& m : mentions) {
    if (err.find(m) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "stderr does not mention \"" << m << "\"\n"
             << r.DebugString();
    }
  }
  return ::testing::AssertionSuccess();
}

void ClusterTest::SetUp() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  auto d =
      TestDir::Create(absl::StrCat(info->test_suite_name(), "-", info->name()));
  ASSERT_TRUE(d.ok()) << d.status();
  dir_ = std::move(*d);
}

void ClusterTest::TearDown() {
  bool failed = HasFailure();
  for (auto& w : workers_) w->process().Stop(Scaled(absl::Seconds(10)));
  if (server_ != nullptr) server_->process().Stop(Scaled(absl::Seconds(10)));
  if (failed) PrintLogTails();
  workers_.clear();
  server_.reset();
  stubs_.reset();
  dir_.reset();  // kept on failure
}

void ClusterTest::PrintLogTails() {
  std::error_code ec;
  std::vector<fs::path> logs;
  for (const auto& e : fs::directory_iterator(dir_->path() + "/logs", ec)) {
    logs.push_back(e.path());
  }
  std::sort(logs.begin(), logs.end());
  for (const auto& p : logs) {
    std::string text = ReadFileOrEmpty(p.string());
    if (text.empty()) continue;
    fprintf(stderr, "==== %s (last 40 lines)\n%s", p.c_str(),
            LastLines(text, 40).c_str());
  }
}

MnistSpec OutlivesALeaseSpec(const std::string& name) {
  MnistSpec spec;
  spec.name = name;
  spec.hidden = 128;
  // Several seconds even on a fast machine: on 2026-11-24 a CI host ran
  // 2000 steps in 1.7 s, and the job ended before the 2 s lease it must
  // outlive.
  spec.steps = 8000;
  spec.micro_batch = 64;
  spec.checkpoint_every = 100;
  spec.log_every = 20;
  return spec;
}

absl::Status ClusterTest::StartServer(ServerOptions options) {
  if (options.state_dir.empty()) options.state_dir = dir_->Subdir("state");
  ASSIGN_OR_RETURN(server_, ServerProcess::Start(*dir_, options));
  CurrentCredentials() = {server_->admin_token(), server_->worker_token_file()};
  stubs_ = std::make_unique<Stubs>(server_->address(), options.tls_ca);
  return absl::OkStatus();
}

absl::Status ClusterTest::KillAndRestartServer(
    const std::function<absl::Status()>& while_down) {
  ServerOptions options = server_->options();
  options.port = server_->port();
  ExitStatus killed = server_->process().Kill();
  if (!killed.Killed(SIGKILL)) {
    return absl::InternalError(
        absl::StrCat("yard-server should have died of SIGKILL, ended with ",
                     killed.ToString()));
  }
  // Keep the dead one's logs: a new ServerProcess logs to new files.
  server_.reset();
  if (while_down) RETURN_IF_ERROR(while_down());
  return StartServer(options);
}

absl::StatusOr<WorkerProcess*> ClusterTest::StartWorker(WorkerOptions options) {
  if (server_ == nullptr) {
    return absl::FailedPreconditionError("start the server first");
  }
  ASSIGN_OR_RETURN(auto worker,
                   WorkerProcess::Start(*dir_, server_->address(), options));
  workers_.push_back(std::move(worker));
  return workers_.back().get();
}

absl::StatusOr<WorkerProcess*> ClusterTest::StartReadyWorker(
    WorkerOptions options) {
  ASSIGN_OR_RETURN(WorkerProcess * worker, StartWorker(options));
  absl::Status ready =
      WaitForReadyWorkers(cluster(), {options.name}, StartTimeout());
  if (!ready.ok()) {
    return absl::Status(
        ready.code(),
        absl::StrCat(ready.message(), "\n", worker->process().OutputTail()));
  }
  return worker;
}

CommandResult ClusterTest::Yard(const std::vector<std::string>& args,
                                absl::Duration timeout) {
  return RunYard(*dir_, server_->address(), args, timeout);
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ClusterTest::StartYard(
    const std::vector<std::string>& args) {
  std::string prefix = dir_->LogPrefix("yard");
  ProcessOptions p;
  p.argv = {BinPath("yard"), "--server", server_->address(), "--token",
            server_->admin_token()};
  p.argv.insert(p.argv.end(), args.begin(), args.end());
  p.cwd = SourceDir();
  p.stdout_path = prefix + ".stdout";
  p.stderr_path = prefix + ".stderr";
  return ChildProcess::Start(std::move(p));
}

std::string ClusterTest::WriteSpec(const std::string& file_name,
                                   const std::string& text) {
  return dir_->WriteFile(file_name, text);
}

absl::StatusOr<v1::SubmitJobResponse> ClusterTest::Submit(
    const v1::JobSpec& spec, const std::string& request_id) {
  auto ctx = ContextWithTimeout();
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  req.set_request_id(request_id);
  v1::SubmitJobResponse resp;
  grpc::Status s = jobs().SubmitJob(ctx.get(), req, &resp);
  if (!s.ok()) return ToAbsl(s);
  return resp;
}

absl::StatusOr<std::string> ClusterTest::SubmitAndWaitForACheckpoint(
    const v1::JobSpec& spec) {
  ASSIGN_OR_RETURN(v1::SubmitJobResponse submitted, Submit(spec));
  const std::string& id = submitted.job().id();
  RETURN_IF_ERROR(WaitForEvent(jobs(), id, "CheckpointSaved", JobTimeout(),
                               IsCheckpointSaved)
                      .status());
  return id;
}

void ClusterTest::KillRankOneAndExpectTheGangDown(WorkerProcess& worker,
                                                  const std::string& id) {
  YARD_ASSERT_OK(WaitForEvent(jobs(), id, "CheckpointSaved", JobTimeout(),
                              IsCheckpointSaved)
                     .status());
  std::map<int, pid_t> ranks = worker.TrainerPidsByRank();
  ASSERT_EQ(ranks.size(), 2u);
  ASSERT_EQ(kill(ranks[1], SIGKILL), 0);

  YARD_ASSIGN_OR_FAIL(v1::Job job, WaitForTerminal(jobs(), id, JobTimeout()));
  EXPECT_EQ(job.state(), v1::FAILED) << job.DebugString();
  EXPECT_NE(job.state_reason().find("rank 1 killed by signal 9"),
            std::string::npos)
      << job.state_reason();
  YARD_ASSERT_OK(PollUntil("rank 0 to be gone too", StartTimeout(),
                           [&] { return !ProcessAlive(ranks[0]); }));
  EXPECT_TRUE(worker.process().Running());
}

}  // namespace trainyard::itest
