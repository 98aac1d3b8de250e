// yard_scheduler_load_bench: does SubmitJob stay fast while the scheduler
// passes over a long queue? It starts its own yard-server, connects fake
// workers (one GPU each, no CPU slots) that no job can fit, so every queued
// job stays queued and every scheduling pass reads and places the whole
// queue, then measures SubmitJob at a fixed rate twice:
//
//   idle  the queue holds only what this phase submits (passes are short);
//   busy  after --queued more jobs were submitted, so passes over the
//         whole queue run back to back (the loop rests as long as a pass
//         took, so they take about half the time).
//
// Latency is measured from each request's scheduled send time (an open
// loop: a stalled server delays the requests behind the late one too, and
// that counts). The pass count and time come from the server's
// yard_scheduling_pass_duration_seconds.
//
// Every submission must succeed: a failed one has no latency, so the
// figures would describe fewer requests than the rate claims. The bench
// stops after the first phase with a failure, prints the first error and
// exits 1 (2 for bad arguments, or a data root without the MNIST files the
// jobs name: run it from the repository root or pass --data-root).
//
//   yard_scheduler_load_bench [--queued 50000] [--rate 200] [--duration-s 10]
//       [--clients 16] [--workers 100] [--fill-clients 32] [--channels 4]
//       [--data-root DIR] [--server-bin PATH]
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
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/load/server_process.h"
#include "common/grpc_credentials.h"
#include "grpcpp/grpcpp.h"
#include "trainyard/v1/jobs.grpc.pb.h"
#include "trainyard/v1/worker.grpc.pb.h"

namespace {

namespace v1 = trainyard::v1;
using trainyard::AddBearerToken;
using trainyard::bench::ServerProcess;

struct Flags {
  int queued = 50'000;
  double rate = 200;  // SubmitJob per second, all clients together
  double duration_s = 10;
  int clients = 16;
  int workers = 100;
  int fill_clients = 32;
  int channels = 4;
  std::string data_root = ".";
  std::string server_bin;
};

// A job no fake worker can hold: two GPUs, and each worker has one.
v1::JobSpec TwoGpuSpec() {
  v1::JobSpec spec = trainyard::bench::SmallMnistSpec("queued");
  spec.mutable_resources()->set_gpus(2);
  return spec;
}

// Workers that say hello with one 80 GiB GPU and no CPU slots, then send a
// heartbeat every second and read whatever the server sends, until Stop.
class FakeWorkers {
 public:
  FakeWorkers(const std::string& server, const std::string& token, int n)
      : stub_(v1::WorkerService::NewStub(
            grpc::CreateChannel(server, grpc::InsecureChannelCredentials()))) {
    for (int i = 0; i < n; ++i) {
      auto w = std::make_unique<One>();
      AddBearerToken(w->ctx, token);
      w->stream = stub_->Connect(&w->ctx);
      v1::WorkerMessage hello;
      hello.mutable_hello()->set_worker_id(absl::StrCat("bench-w", i));
      hello.mutable_hello()->set_hostname("bench");
      v1::Device* d = hello.mutable_hello()->add_devices();
      d->set_index(0);
      d->set_memory_bytes(int64_t{80} << 30);
      w->stream->Write(hello);
      One* raw = w.get();
      w->reader = std::thread([raw] {
        v1::ServerMessage m;
        while (raw->stream->Read(&m)) {
        }
      });
      all_.push_back(std::move(w));
    }
    heartbeats_ = std::thread([this] {
      int64_t sequence = 0;
      while (!stop_.load()) {
        ++sequence;
        for (auto& w : all_) {
          v1::WorkerMessage m;
          m.mutable_heartbeat()->set_sequence(sequence);
          w->stream->Write(m);
        }
        for (int i = 0; i < 10 && !stop_.load(); ++i) {
          absl::SleepFor(absl::Milliseconds(100));
        }
      }
    });
  }

  void Stop() {
    stop_ = true;
    heartbeats_.join();
    for (auto& w : all_) w->ctx.TryCancel();
    for (auto& w : all_) w->reader.join();
  }

 private:
  struct One {
    grpc::ClientContext ctx;
    std::unique_ptr<
        grpc::ClientReaderWriter<v1::WorkerMessage, v1::ServerMessage>>
        stream;
    std::thread reader;
  };
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  std::vector<std::unique_ptr<One>> all_;
  std::thread heartbeats_;
  std::atomic<bool> stop_{false};
};

class Submitter {
 public:
  Submitter(const Flags& f, const std::string& server, std::string token)
      : token_(std::move(token)) {
    for (int i = 0; i < f.channels; ++i) {
      grpc::ChannelArguments args;
      args.SetInt("grpc.channel_id", i);  // distinct connections
      stubs_.push_back(v1::JobService::NewStub(grpc::CreateCustomChannel(
          server, grpc::InsecureChannelCredentials(), args)));
    }
  }

  // The first failed submission's status, "" while none failed.
  std::string FirstError() const {
    absl::MutexLock l(&mu_);
    return first_error_;
  }

  grpc::Status Submit(int client) {
    grpc::ClientContext ctx;
    AddBearerToken(ctx, token_);
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(60));
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec_;
    req.set_request_id(
        absl::StrCat("sched-", getpid(), "-", next_.fetch_add(1)));
    v1::SubmitJobResponse resp;
    grpc::Status s =
        stubs_[client % stubs_.size()]->SubmitJob(&ctx, req, &resp);
    if (!s.ok()) {
      absl::MutexLock l(&mu_);
      if (first_error_.empty()) {
        first_error_ =
            absl::StrCat("code ", s.error_code(), ": ", s.error_message());
      }
    }
    return s;
  }

  // `clients` threads submit as fast as they can until `total` are in.
  int64_t Fill(int clients, int64_t total) {
    std::atomic<int64_t> left{total}, errors{0};
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&, c] {
        while (left.fetch_sub(1) > 0) {
          if (!Submit(c).ok()) errors.fetch_add(1);
        }
      });
    }
    for (std::thread& t : threads) t.join();
    return errors.load();
  }

  // `clients` threads submit `rate` jobs a second in all for `seconds`;
  // returns each request's latency from its scheduled send time (ms), and
  // counts errors.
  std::vector<double> AtRate(int clients, double rate, double seconds,
                             int64_t* errors) {
    const absl::Duration every = absl::Seconds(clients / rate);
    const absl::Time start = absl::Now();
    const absl::Time end = start + absl::Seconds(seconds);
    absl::Mutex mu;
    std::vector<double> all;
    std::atomic<int64_t> failed{0};
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&, c] {
        std::vector<double> mine;
        // Spread the clients' schedules over one interval.
        for (absl::Time at = start + every * c / clients; at < end;
             at += every) {
          absl::SleepFor(at - absl::Now());
          if (Submit(c).ok()) {
            mine.push_back(absl::ToDoubleMilliseconds(absl::Now() - at));
          } else {
            failed.fetch_add(1);
          }
        }
        absl::MutexLock l(&mu);
        all.insert(all.end(), mine.begin(), mine.end());
      });
    }
    for (std::thread& t : threads) t.join();
    *errors = failed.load();
    return all;
  }

 private:
  const std::string token_;
  const v1::JobSpec spec_ = TwoGpuSpec();
  std::vector<std::unique_ptr<v1::JobService::Stub>> stubs_;
  std::atomic<int64_t> next_{0};
  mutable absl::Mutex mu_;
  std::string first_error_ ABSL_GUARDED_BY(mu_);
};

// Scheduling passes the server finished so far, and the seconds they took.
struct Passes {
  double count = 0, seconds = 0;

  static Passes Now(const ServerProcess& server) {
    Passes p;
    absl::StatusOr<std::string> text =
        trainyard::bench::FetchMetrics(server.MetricsAddress());
    if (!text.ok()) return p;
    const std::string name = "yard_scheduling_pass_duration_seconds";
    p.count = trainyard::bench::MetricValue(*text, name + "_count").value_or(0);
    p.seconds = trainyard::bench::MetricValue(*text, name + "_sum").value_or(0);
    return p;
  }
};

void Report(const char* phase, std::vector<double> ms, int64_t errors,
            double seconds, const Passes& before, const Passes& after) {
  std::sort(ms.begin(), ms.end());
  auto pct = [&](double p) { return trainyard::bench::Percentile(ms, p); };
  const double passes = after.count - before.count;
  const double busy = after.seconds - before.seconds;
  std::printf(
      "%-5s SubmitJob %6zu ok, %4lld errors, %6.0f/s, p50 %7.2f ms, p90 "
      "%7.2f ms, p99 %7.2f ms, max %7.2f ms\n"
      "%-5s passes    %6.0f, mean %7.1f ms, scheduler busy %4.0f%% of the "
      "phase\n",
      phase, ms.size(), static_cast<long long>(errors), ms.size() / seconds,
      pct(0.5), pct(0.9), pct(0.99), ms.empty() ? 0.0 : ms.back(), phase,
      passes, passes > 0 ? busy / passes * 1000 : 0.0, busy / seconds * 100);
  std::fflush(stdout);
}

bool ParseFlags(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq);
    std::string v;
    if (eq != std::string::npos) {
      v = a.substr(eq + 1);
    } else if (i + 1 < argc) {
      v = argv[++i];
    }
    bool ok = true;
    if (name == "--queued") {
      ok = absl::SimpleAtoi(v, &f.queued) && f.queued >= 0;
    } else if (name == "--rate") {
      ok = absl::SimpleAtod(v, &f.rate) && f.rate > 0;
    } else if (name == "--duration-s") {
      ok = absl::SimpleAtod(v, &f.duration_s) && f.duration_s > 0;
    } else if (name == "--clients") {
      ok = absl::SimpleAtoi(v, &f.clients) && f.clients > 0;
    } else if (name == "--workers") {
      ok = absl::SimpleAtoi(v, &f.workers) && f.workers >= 0;
    } else if (name == "--fill-clients") {
      ok = absl::SimpleAtoi(v, &f.fill_clients) && f.fill_clients > 0;
    } else if (name == "--channels") {
      ok = absl::SimpleAtoi(v, &f.channels) && f.channels > 0;
    } else if (name == "--data-root") {
      f.data_root = v;
    } else if (name == "--server-bin") {
      f.server_bin = v;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "yard_scheduler_load_bench: bad argument %s\n",
                   a.c_str());
      return false;
    }
  }
  return true;
}

// The MNIST files every job names, relative to the server's data root: a
// missing one fails every submission.
bool DataRootHasMnist(const std::string& data_root) {
  const v1::JobSpec spec = TwoGpuSpec();
  const v1::MnistData& mnist = spec.data().mnist();
  for (const std::string& file : {mnist.images(), mnist.labels()}) {
    const std::filesystem::path path = std::filesystem::path(data_root) / file;
    if (!std::filesystem::is_regular_file(path)) {
      std::fprintf(stderr,
                   "yard_scheduler_load_bench: no %s: every job reads it; run "
                   "from the repository root or pass --data-root REPO\n",
                   path.string().c_str());
      return false;
    }
  }
  return true;
}

// When `errors` submissions of a phase failed, says so with the first
// error's text and returns false.
bool AllSubmitted(const char* phase, int64_t errors, int64_t tried,
                  const Submitter& submit) {
  if (errors == 0) return true;
  std::fprintf(stderr,
               "yard_scheduler_load_bench: %s: %lld of %lld submissions "
               "failed; first: %s\n",
               phase, static_cast<long long>(errors),
               static_cast<long long>(tried), submit.FirstError().c_str());
  return false;
}

// Waits until the server finished `n` more passes than `from` (60 s at most).
void AwaitPasses(const ServerProcess& server, const Passes& from, int n) {
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (Passes::Now(server).count < from.count + n && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
}

// The idle phase, the fill and the busy phase; false (having said why) at
// the first with a failed submission.
bool RunPhases(const Flags& f, const ServerProcess& s, Submitter& submit) {
  int64_t errors = 0;
  Passes before = Passes::Now(s);
  std::vector<double> ms =
      submit.AtRate(f.clients, f.rate, f.duration_s, &errors);
  Report("idle", ms, errors, f.duration_s, before, Passes::Now(s));
  if (!AllSubmitted("idle", errors, errors + static_cast<int64_t>(ms.size()),
                    submit))
    return false;

  const absl::Time fill_start = absl::Now();
  const int64_t fill_errors = submit.Fill(f.fill_clients, f.queued);
  const double fill_s = absl::ToDoubleSeconds(absl::Now() - fill_start);
  std::printf("fill  %d jobs queued in %.1f s (%.0f/s), %lld errors\n",
              f.queued, fill_s, f.queued / fill_s,
              static_cast<long long>(fill_errors));
  if (!AllSubmitted("fill", fill_errors, f.queued, submit)) return false;
  // Let the passes that began during the fill end, so the next ones see
  // the whole queue.
  AwaitPasses(s, Passes::Now(s), 2);

  before = Passes::Now(s);
  ms = submit.AtRate(f.clients, f.rate, f.duration_s, &errors);
  Report("busy", ms, errors, f.duration_s, before, Passes::Now(s));
  return AllSubmitted("busy", errors, errors + static_cast<int64_t>(ms.size()),
                      submit);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, f) || !DataRootHasMnist(f.data_root)) return 2;
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start({f.server_bin, f.data_root, {}});
  if (!server.ok()) {
    std::fprintf(stderr, "yard_scheduler_load_bench: %s\n",
                 server.status().ToString().c_str());
    return 1;
  }
  ServerProcess& s = **server;
  std::printf(
      "yard-server pid %d at %s; %d fake workers (1 GPU each, no CPU slots), "
      "every job asks 2 GPUs; SubmitJob at %.0f/s from %d clients for %.0f s "
      "per phase\n",
      s.pid(), s.address().c_str(), f.workers, f.rate, f.clients, f.duration_s);
  FakeWorkers workers(s.address(), s.Token("worker.token"), f.workers);
  Submitter submit(f, s.address(), s.Token("admin.token"));
  AwaitPasses(s, Passes::Now(s), 1);

  const bool ok = RunPhases(f, s, submit);

  workers.Stop();
  std::printf("yard-server exited with %d\n", s.Stop());
  return ok ? 0 : 1;
}
