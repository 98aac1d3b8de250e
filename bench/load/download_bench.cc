// yard_download_bench: DownloadCheckpoint under load. It starts its own
// yard-server, places one job on a fake worker (one CPU slot) that writes
// a checkpoint (the engine's: meta.json and a model.safetensors of one
// tensor of --checkpoint-mib) into the job's checkpoint directory and
// leaves, then for each count N in
// --downloads runs two phases of N clients, each on its own connection,
// downloading that checkpoint whole again and again for --duration-s:
//
//   fast  each client reads as fast as it can (loopback): downloads done,
//         MiB/s of them all, seconds per download (p50/p99), the server's
//         CPU per GiB sent;
//   slow  each client reads a chunk (1 MiB), then waits --slow-ms, as a
//         client across a slow link does; its connection takes no more
//         than 64 KiB ahead of what it has read, so the server's writes
//         wait on the client.
//
// In both, --submitters more clients call SubmitJob meanwhile (its rate
// and p50/p99 against the same with no download running, measured first),
// and the server's threads and resident memory are read mid-phase. Last,
// `yard download` (beside this program) copies the checkpoint --cli-runs
// times, one after another, as a user does: into a new directory, every
// chunk checked, model.safetensors against meta.json's size and CRC-32,
// synced; its wall time each (the median and the range).
//
//   yard_download_bench [--downloads 1,16,64] [--checkpoint-mib 64]
//       [--duration-s 5] [--slow-ms 100] [--submitters 4] [--cli-runs 5]
//       [--data-root DIR] [--server-bin PATH]
//
// Every call must succeed: the bench prints the first error of a phase
// and exits 1 (2 for bad arguments; run it from the repository root or
// pass --data-root, for the MNIST files the job names).
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/load/server_process.h"
#include "common/grpc_credentials.h"
#include "engine/core/checkpoint.h"
#include "grpcpp/grpcpp.h"
#include "trainyard/v1/jobs.grpc.pb.h"
#include "trainyard/v1/worker.grpc.pb.h"

namespace {

namespace v1 = trainyard::v1;
using trainyard::AddBearerToken;
using trainyard::bench::CpuSeconds;
using trainyard::bench::Percentile;
using trainyard::bench::ServerProcess;
using trainyard::bench::SizeOf;

struct Flags {
  std::vector<int> downloads = {1, 16, 64};
  int checkpoint_mib = 64;
  double duration_s = 5;
  int slow_ms = 100;
  int submitters = 4;
  int cli_runs = 5;
  std::string data_root = ".";
  std::string server_bin;
};

bool ParseFlags(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    std::string v;
    auto value = [&](const char* name, std::string* out) {
      return trainyard::bench::FlagValue(argc, argv, &i, name, out);
    };
    if (value("--downloads", &v)) {
      f.downloads.clear();
      for (absl::string_view n : absl::StrSplit(v, ',')) {
        int d = 0;
        if (!absl::SimpleAtoi(n, &d) || d <= 0) {
          std::fprintf(stderr, "yard_download_bench: --downloads %s\n",
                       v.c_str());
          return false;
        }
        f.downloads.push_back(d);
      }
      continue;
    }
    if (value("--checkpoint-mib", &v) &&
        absl::SimpleAtoi(v, &f.checkpoint_mib) && f.checkpoint_mib > 0) {
      continue;
    }
    if (value("--duration-s", &v) && absl::SimpleAtod(v, &f.duration_s) &&
        f.duration_s > 0) {
      continue;
    }
    if (value("--slow-ms", &v) && absl::SimpleAtoi(v, &f.slow_ms) &&
        f.slow_ms >= 0) {
      continue;
    }
    if (value("--submitters", &v) && absl::SimpleAtoi(v, &f.submitters) &&
        f.submitters > 0) {
      continue;
    }
    if (value("--cli-runs", &v) && absl::SimpleAtoi(v, &f.cli_runs) &&
        f.cli_runs >= 0) {
      continue;
    }
    if (value("--data-root", &f.data_root)) continue;
    if (value("--server-bin", &f.server_bin)) continue;
    std::fprintf(stderr, "yard_download_bench: bad argument %s\n", a.c_str());
    return false;
  }
  return true;
}

// Calls and their seconds, and the first error, of one kind of client.
struct Tally {
  absl::Mutex mu;
  std::vector<double> seconds;
  int64_t bytes = 0;  // whole calls' and cut ones'
  int cut = 0;
  int errors = 0;
  std::string first_error;

  void Add(const grpc::Status& s, double secs, int64_t n) {
    absl::MutexLock l(&mu);
    if (s.ok()) {
      seconds.push_back(secs);
      bytes += n;
      return;
    }
    if (errors++ == 0) {
      first_error = absl::StrCat(s.error_code(), ": ", s.error_message());
    }
  }
  // A download broken off at the phase's end, after `n` bytes.
  void AddCut(int64_t n) {
    absl::MutexLock l(&mu);
    bytes += n;
    ++cut;
  }
};

class Bench {
 public:
  Bench(const Flags& f, const ServerProcess& server)
      : flags_(f),
        server_(server),
        token_(server.Token("admin.token")),
        jobs_(v1::JobService::NewStub(grpc::CreateChannel(
            server.address(), grpc::InsecureChannelCredentials()))) {}

  // Submits the job, places it on a fake worker, writes its checkpoint.
  bool MakeCheckpoint() {
    auto worker = v1::WorkerService::NewStub(grpc::CreateChannel(
        server_.address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    AddBearerToken(ctx, server_.Token("worker.token"));
    auto stream = worker->Connect(&ctx);
    v1::WorkerMessage hello;
    hello.mutable_hello()->set_worker_id("download-bench");
    hello.mutable_hello()->set_hostname("bench");
    hello.mutable_hello()->set_cpu_slots(1);
    v1::ServerMessage m;
    if (!stream->Write(hello) || !stream->Read(&m) || !m.has_hello_ack()) {
      std::fprintf(stderr, "the fake worker's hello was not acknowledged\n");
      return false;
    }
    grpc::ClientContext sctx;
    AddBearerToken(sctx, token_);
    v1::SubmitJobRequest req;
    *req.mutable_spec() = trainyard::bench::SmallMnistSpec("download");
    v1::SubmitJobResponse resp;
    grpc::Status s = jobs_->SubmitJob(&sctx, req, &resp);
    if (!s.ok()) {
      std::fprintf(stderr, "SubmitJob: %s\n", s.error_message().c_str());
      return false;
    }
    job_id_ = resp.job().id();
    while (stream->Read(&m) && !m.has_assignment()) {
    }
    if (!m.has_assignment()) {
      std::fprintf(stderr, "the job was not placed on the fake worker\n");
      return false;
    }
    // A checkpoint as the engine writes one (`yard download` checks it):
    // one fp32 tensor of --checkpoint-mib.
    trainyard::engine::Checkpoint checkpoint;
    checkpoint.meta.step = 10;
    const int64_t floats = int64_t{flags_.checkpoint_mib} << 18;
    checkpoint.tensors.push_back({"w", {floats}, std::vector<float>(floats)});
    for (int64_t i = 0; i < floats; ++i) {
      checkpoint.tensors[0].data[i] = static_cast<float>(i % 1000) * 1e-3f;
    }
    absl::StatusOr<std::string> dir = trainyard::engine::WriteCheckpoint(
        m.assignment().checkpoint_dir(), checkpoint);
    if (!dir.ok()) {
      std::fprintf(stderr, "writing the checkpoint: %s\n",
                   dir.status().ToString().c_str());
      return false;
    }
    for (const char* file : {trainyard::engine::kCheckpointMetaFile,
                             trainyard::engine::kCheckpointTensorsFile}) {
      checkpoint_bytes_ += std::filesystem::file_size(*dir + "/" + file);
    }
    stream->WritesDone();
    while (stream->Read(&m)) {
    }
    stream->Finish();  // the worker leaves; the checkpoint stays
    return true;
  }

  // SubmitJob by --submitters clients for the phase, with no download.
  bool SubmitsAlone() {
    Tally submits;
    const absl::Time end = absl::Now() + absl::Seconds(flags_.duration_s);
    RunSubmitters(end, submits);
    return Report("alone", 0, nullptr, flags_.duration_s, submits, 0, {});
  }

  // `n` clients downloading for the phase (slow: waiting between chunks),
  // the submitters beside them.
  bool Downloads(int n, bool slow) {
    Tally downloads, submits;
    const absl::Time start = absl::Now();
    const absl::Time end = start + absl::Seconds(flags_.duration_s);
    const double cpu0 = CpuSeconds(server_.pid());
    std::vector<std::thread> clients;
    for (int i = 0; i < n; ++i) {
      clients.emplace_back([&, i] { Download(i, slow, end, downloads); });
    }
    std::thread sampler([&] {
      absl::SleepFor(absl::Seconds(flags_.duration_s / 2));
      mid_ = SizeOf(server_.pid());
    });
    RunSubmitters(end, submits);
    for (std::thread& t : clients) t.join();
    sampler.join();
    // The phase ends when the last download has: later than `end`.
    const double secs = absl::ToDoubleSeconds(absl::Now() - start);
    const double cpu = (CpuSeconds(server_.pid()) - cpu0) / secs;
    return Report(slow ? "slow" : "fast", n, &downloads, secs, submits, cpu,
                  mid_);
  }

  // `yard download` of the checkpoint, --cli-runs times.
  bool CliDownloads() {
    if (flags_.cli_runs == 0) return true;
    const std::string yard = trainyard::bench::BesideThisProgram("yard");
    const std::string dir = server_.state_dir() + "/cli-copy";
    std::vector<double> seconds;
    for (int k = 0; k < flags_.cli_runs; ++k) {
      std::filesystem::remove_all(dir);
      const absl::Time t0 = absl::Now();
      const pid_t pid = fork();
      if (pid == 0) {
        setenv("YARD_TOKEN", token_.c_str(), 1);
        const int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, STDOUT_FILENO);
        execl(yard.c_str(), yard.c_str(), "--server", server_.address().c_str(),
              "download", job_id_.c_str(), "--dir", dir.c_str(),
              static_cast<char*>(nullptr));
        _exit(127);
      }
      int status = 0;
      waitpid(pid, &status, 0);
      seconds.push_back(absl::ToDoubleSeconds(absl::Now() - t0));
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::printf("cli   yard download exited with status %d (%s)\n", status,
                    yard.c_str());
        return false;
      }
    }
    std::filesystem::remove_all(dir);
    const double mib = checkpoint_bytes_ / double(1 << 20);
    std::sort(seconds.begin(), seconds.end());
    const double p50 = Percentile(seconds, 0.5);
    std::printf(
        "cli   yard download x%d: %.3f s each (median; %.3f-%.3f), %.1f "
        "MiB/s\n",
        flags_.cli_runs, p50, seconds.front(), seconds.back(), mib / p50);
    return true;
  }

 private:
  // One client's downloads until `end`, on a connection of its own.
  void Download(int client, bool slow, absl::Time end, Tally& tally) {
    grpc::ChannelArguments args;
    args.SetInt("trainyard.bench.client", client);  // its own connection
    if (slow) {
      args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
      args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 * 1024);
    }
    auto stub = v1::JobService::NewStub(grpc::CreateCustomChannel(
        server_.address(), grpc::InsecureChannelCredentials(), args));
    v1::DownloadCheckpointRequest req;
    req.set_job_id(job_id_);
    while (absl::Now() < end) {
      grpc::ClientContext ctx;
      AddBearerToken(ctx, token_);
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(600));
      const absl::Time t0 = absl::Now();
      auto reader = stub->DownloadCheckpoint(&ctx, req);
      v1::CheckpointChunk chunk;
      int64_t bytes = 0;
      bool cut = false;
      while (reader->Read(&chunk)) {
        bytes += static_cast<int64_t>(chunk.data().size());
        if (slow) absl::SleepFor(absl::Milliseconds(flags_.slow_ms));
        // A slow download still going at the end is broken off: only
        // whole ones count.
        if (slow && absl::Now() >= end) {
          ctx.TryCancel();
          cut = true;
        }
      }
      grpc::Status s = reader->Finish();
      if (cut) {
        tally.AddCut(bytes);
        break;
      }
      if (s.ok() && bytes != checkpoint_bytes_) {
        s = grpc::Status(grpc::StatusCode::DATA_LOSS,
                         absl::StrCat(bytes, " bytes of ", checkpoint_bytes_));
      }
      tally.Add(s, absl::ToDoubleSeconds(absl::Now() - t0), bytes);
    }
  }

  void RunSubmitters(absl::Time end, Tally& tally) {
    std::vector<std::thread> threads;
    for (int i = 0; i < flags_.submitters; ++i) {
      threads.emplace_back([&, i] {
        v1::SubmitJobRequest req;
        *req.mutable_spec() = trainyard::bench::SmallMnistSpec("beside");
        for (int k = 0; absl::Now() < end; ++k) {
          grpc::ClientContext ctx;
          AddBearerToken(ctx, token_);
          ctx.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(30));
          req.set_request_id(absl::StrCat("dl-", getpid(), "-", i, "-",
                                          next_request_.fetch_add(1)));
          v1::SubmitJobResponse resp;
          const absl::Time t0 = absl::Now();
          grpc::Status s = jobs_->SubmitJob(&ctx, req, &resp);
          tally.Add(s, absl::ToDoubleSeconds(absl::Now() - t0), 0);
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }

  // `secs`: how long the downloads went on; `server_cpu`: the server's
  // CPU seconds a second over them. SubmitJob's rate is over the phase's
  // --duration-s, when the submitters stop.
  bool Report(const char* phase, int n, Tally* downloads, double secs,
              Tally& submits, double server_cpu,
              trainyard::bench::ProcessSize size) {
    for (Tally* t : {downloads, &submits}) {
      if (t != nullptr) std::sort(t->seconds.begin(), t->seconds.end());
    }
    if (downloads != nullptr) {
      const double mib = downloads->bytes / double(1 << 20);
      std::printf(
          "%-5s %4d downloads: %5zu whole (%d cut at the end), %8.1f MiB/s, "
          "%7.3f / %7.3f s each (p50/p99); server: %5.1f%% of a core, %.2f "
          "CPU s per GiB, %d threads, %.1f MiB resident\n",
          phase, n, downloads->seconds.size(), downloads->cut, mib / secs,
          Percentile(downloads->seconds, 0.5),
          Percentile(downloads->seconds, 0.99), 100 * server_cpu,
          mib > 0 ? server_cpu * secs / (mib / 1024) : 0.0, size.threads,
          size.rss_mib);
    }
    std::printf(
        "%-5s %4d downloads: SubmitJob %6zu ok, %6.0f/s, p50 %7.2f "
        "ms, p99 %7.2f ms\n",
        phase, n, submits.seconds.size(),
        submits.seconds.size() / flags_.duration_s,
        Percentile(submits.seconds, 0.5) * 1e3,
        Percentile(submits.seconds, 0.99) * 1e3);
    for (Tally* t : {downloads, &submits}) {
      if (t != nullptr && t->errors > 0) {
        std::printf("%-5s %d errors, the first: %s\n", phase, t->errors,
                    t->first_error.c_str());
        return false;
      }
    }
    std::fflush(stdout);
    return true;
  }

  const Flags flags_;
  const ServerProcess& server_;
  const std::string token_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::string job_id_;
  int64_t checkpoint_bytes_ = 0;
  std::atomic<int64_t> next_request_{0};
  trainyard::bench::ProcessSize mid_;
};

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, f)) return 2;
  if (!std::filesystem::exists(f.data_root + "/examples/data/mnist")) {
    std::fprintf(stderr,
                 "yard_download_bench: no examples/data/mnist under %s: run "
                 "it from the repository root or pass --data-root\n",
                 f.data_root.c_str());
    return 2;
  }
  // Every stream is the admin's: no per-tenant stream limit.
  auto server = ServerProcess::Start(
      {f.server_bin, f.data_root, {"--max-streams-per-tenant=0"}});
  if (!server.ok()) {
    std::fprintf(stderr, "yard_download_bench: %s\n",
                 server.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "yard-server pid %d at %s, a checkpoint of %d MiB, %.1f s a "
      "phase, slow clients wait %d ms a chunk\n",
      (*server)->pid(), (*server)->address().c_str(), f.checkpoint_mib,
      f.duration_s, f.slow_ms);
  Bench bench(f, **server);
  bool ok = bench.MakeCheckpoint() && bench.SubmitsAlone();
  for (size_t i = 0; ok && i < f.downloads.size(); ++i) {
    ok = bench.Downloads(f.downloads[i], false) &&
         bench.Downloads(f.downloads[i], true);
  }
  ok = ok && bench.CliDownloads();
  std::printf("yard-server exited with %d\n", (*server)->Stop());
  return ok ? 0 : 1;
}
