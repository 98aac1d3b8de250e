// yard_load_bench: a load generator for yard-server. N client threads call
// the JobService for a fixed time and report throughput and latency
// percentiles per RPC; then many WatchJob streams are held open (async
// client, one completion queue): idle (the server's CPU, threads and
// memory with them open), while submissions go on, and while some of the
// watched jobs are cancelled (how long each cancellation takes to reach
// its watcher). Last, many fake workers connect (async client, one
// completion queue) and heartbeat once a second as yard-worker does: how
// long until the server has acknowledged every hello (each is a durable
// commit), the server's CPU, threads and memory with them connected, how
// long a heartbeat takes to be acknowledged, and submissions meanwhile.
// The workers have no CPU slots or GPUs, so no job is placed on them.
//
//   yard_load_bench [--server HOST:PORT] [--clients 32] [--duration-s 5]
//                   [--watches 1000] [--workers 0] [--channels 4]
//                   [--data-root DIR] [--server-bin PATH] [--token TOKEN]
//                   [--worker-token TOKEN]
//
// Without --server it starts its own yard-server (beside this program, or
// --server-bin) on 127.0.0.1:0 with a fresh state dir under /tmp, stops it
// with SIGTERM at the end and removes that state dir; its admin token, when
// it writes one, authorizes the calls (with --server: --token or env
// YARD_TOKEN). SubmitJob is durable:
// the server acknowledges only once the job is committed with fsync.
// Output: one line per phase and RPC, "phase rpc: N ok, E errors, X/s, p50
// Y ms, p99 Z ms", and the CPU each side spent per RPC.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
using trainyard::bench::CpuSeconds;
using trainyard::bench::SizeOf;

int64_t NowNs() { return absl::GetCurrentTimeNanos(); }

struct Flags {
  std::string server;
  int clients = 32;
  double duration_s = 5;
  int watches = 1000;
  int workers = 0;
  int channels = 4;
  std::string data_root = ".";
  std::string server_bin;
  std::string token;
  std::string worker_token;
};

// Latencies (microseconds) and error count of one RPC kind in one phase.
struct Samples {
  std::vector<double> us;
  int64_t errors = 0;
  std::string first_error;
  void Merge(const Samples& o) {
    us.insert(us.end(), o.us.begin(), o.us.end());
    errors += o.errors;
    if (first_error.empty()) first_error = o.first_error;
  }
};

void Report(const std::string& phase, const std::string& rpc, Samples s,
            double seconds) {
  std::sort(s.us.begin(), s.us.end());
  auto pct = [&](double p) {
    return trainyard::bench::Percentile(s.us, p) / 1000.0;
  };
  std::printf(
      "%-8s %-10s %8zu ok, %5lld errors, %9.0f/s, p50 %7.2f ms, p99 %7.2f ms\n",
      phase.c_str(), rpc.c_str(), s.us.size(), static_cast<long long>(s.errors),
      s.us.size() / seconds, pct(0.50), pct(0.99));
  if (!s.first_error.empty()) {
    std::printf("         first error: %s\n", s.first_error.c_str());
  }
  std::fflush(stdout);
}

// Prints the CPU each side spent per successful RPC over a phase.
struct CpuMeter {
  pid_t server;
  double server0 = CpuSeconds(server), client0 = CpuSeconds(0);
  void Report(const std::string& phase, size_t rpcs) const {
    if (rpcs == 0) return;
    const double client = (CpuSeconds(0) - client0) / rpcs * 1e6;
    if (server > 0) {
      std::printf("%-8s cpu        server %.0f us/RPC, client %.0f us/RPC\n",
                  phase.c_str(), (CpuSeconds(server) - server0) / rpcs * 1e6,
                  client);
    } else {
      std::printf("%-8s cpu        client %.0f us/RPC\n", phase.c_str(),
                  client);
    }
  }
};

class Load {
 public:
  explicit Load(const Flags& f) : flags_(f) {
    for (int i = 0; i < f.channels; ++i) {
      grpc::ChannelArguments args;
      args.SetInt("grpc.channel_id", i);  // distinct connections
      stubs_.push_back(v1::JobService::NewStub(grpc::CreateCustomChannel(
          f.server, grpc::InsecureChannelCredentials(), args)));
    }
  }

  v1::JobService::Stub& stub(int i) { return *stubs_[i % stubs_.size()]; }
  const std::string& token() const { return flags_.token; }

  // One thread per client; kind[i] says what client i calls.
  enum Kind { kSubmit, kGet, kList };
  std::vector<Samples> Run(const std::vector<Kind>& kinds, double seconds) {
    std::vector<Samples> per_kind(3);
    absl::Mutex mu;
    const absl::Time end = absl::Now() + absl::Seconds(seconds);
    std::vector<std::thread> threads;
    for (size_t c = 0; c < kinds.size(); ++c) {
      threads.emplace_back([&, c] {
        Samples mine;
        while (absl::Now() < end) {
          const absl::Time t0 = absl::Now();
          grpc::Status s = Call(kinds[c], static_cast<int>(c));
          const double us = absl::ToDoubleMicroseconds(absl::Now() - t0);
          if (s.ok()) {
            mine.us.push_back(us);
          } else {
            if (mine.first_error.empty()) {
              mine.first_error =
                  absl::StrCat(s.error_code(), ": ", s.error_message());
            }
            ++mine.errors;
          }
        }
        absl::MutexLock l(&mu);
        per_kind[kinds[c]].Merge(mine);
      });
    }
    for (std::thread& t : threads) t.join();
    return per_kind;
  }

  std::vector<std::string> SomeIds(size_t n) {
    absl::MutexLock l(&ids_mu_);
    std::vector<std::string> out;
    for (size_t i = 0; i < n && !ids_.empty(); ++i) {
      out.push_back(ids_[i % ids_.size()]);
    }
    return out;
  }

 private:
  grpc::Status Call(Kind kind, int client) {
    grpc::ClientContext ctx;
    AddBearerToken(ctx, flags_.token);
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
    if (kind == kSubmit) {
      v1::SubmitJobRequest req;
      *req.mutable_spec() = spec_;
      req.set_request_id(absl::StrCat("load-", getpid(), "-", client, "-",
                                      next_request_.fetch_add(1)));
      v1::SubmitJobResponse resp;
      grpc::Status s = stub(client).SubmitJob(&ctx, req, &resp);
      if (s.ok()) {
        absl::MutexLock l(&ids_mu_);
        if (ids_.size() < 100000) ids_.push_back(resp.job().id());
      }
      return s;
    }
    std::string id;
    {
      absl::MutexLock l(&ids_mu_);
      id = ids_.empty() ? "j-000001" : ids_[rng_++ % ids_.size()];
    }
    if (kind == kGet) {
      v1::GetJobRequest req;
      req.set_job_id(id);
      v1::Job job;
      return stub(client).GetJob(&ctx, req, &job);
    }
    v1::ListJobsRequest req;
    req.set_page_size(50);
    v1::ListJobsResponse resp;
    return stub(client).ListJobs(&ctx, req, &resp);
  }

  const Flags flags_;
  const v1::JobSpec spec_ = trainyard::bench::SmallMnistSpec("load");
  std::vector<std::unique_ptr<v1::JobService::Stub>> stubs_;
  std::atomic<int64_t> next_request_{0};
  absl::Mutex ids_mu_;
  std::vector<std::string> ids_ ABSL_GUARDED_BY(ids_mu_);
  uint64_t rng_ ABSL_GUARDED_BY(ids_mu_) = 0;
};

// Cancels the calls of `all` (each with a ClientContext ctx), gives
// `poller`, which reads `cq`, time to drain their failed operations (a
// cancelled call needs no Finish), then shuts the queue down and joins it.
template <typename Call>
void CancelAll(std::vector<std::unique_ptr<Call>>& all,
               grpc::CompletionQueue& cq, std::thread& poller) {
  for (auto& c : all) c->ctx.TryCancel();
  absl::SleepFor(absl::Milliseconds(500));
  cq.Shutdown();
  poller.join();
}

// Open WatchJob streams: each is open once its first event (the job's
// QUEUED state change) has arrived.
struct Watches {
  struct One {
    grpc::ClientContext ctx;
    v1::JobEvent event;
    std::unique_ptr<grpc::ClientAsyncReader<v1::JobEvent>> reader;
    bool first_event = false;
    std::string job_id;
    std::atomic<int64_t> cancel_sent_ns{0};  // CancelJob about to be sent
    std::atomic<int64_t> cancelled_ns{0};    // its CANCELLED event read
  };
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<One>> all;
  std::thread poller;
  std::atomic<int> open{0};
  std::atomic<int> failed{0};

  // Tags: index*2 (call started) and index*2+1 (read done).
  void Start(Load& load, const std::vector<std::string>& ids) {
    for (size_t i = 0; i < ids.size(); ++i) {
      auto w = std::make_unique<One>();
      AddBearerToken(w->ctx, load.token());
      w->job_id = ids[i];
      v1::WatchJobRequest req;
      req.set_job_id(ids[i]);
      w->reader = load.stub(static_cast<int>(i))
                      .PrepareAsyncWatchJob(&w->ctx, req, &cq);
      w->reader->StartCall(reinterpret_cast<void*>(i * 2));
      all.push_back(std::move(w));
    }
    poller = std::thread([this] {
      void* tag;
      bool ok;
      while (cq.Next(&tag, &ok)) {
        const uintptr_t t = reinterpret_cast<uintptr_t>(tag);
        One& w = *all[t / 2];
        if (!ok) {
          if (!w.first_event) failed.fetch_add(1);
          continue;  // the stream ended (cancelled at the end of the run)
        }
        if (t % 2 == 1 && !w.first_event) {
          w.first_event = true;
          open.fetch_add(1);
        } else if (t % 2 == 1 && w.event.has_state_change() &&
                   w.event.state_change().to() == v1::CANCELLED) {
          w.cancelled_ns = NowNs();
        }
        w.reader->Read(&w.event, reinterpret_cast<void*>((t / 2) * 2 + 1));
      }
    });
  }
  // Cancels the jobs of up to `n` streams (distinct jobs, one call at a
  // time) and returns, for each whose CANCELLED event arrived within 10 s,
  // the microseconds from sending CancelJob to reading that event; `lost`
  // counts the others.
  Samples CancelSome(Load& load, size_t n, int* lost) {
    std::vector<One*> picked;
    absl::flat_hash_set<std::string> seen;
    for (auto& w : all) {
      if (picked.size() == n) break;
      if (w->first_event && seen.insert(w->job_id).second) {
        picked.push_back(w.get());
      }
    }
    Samples s;
    for (One* w : picked) {
      grpc::ClientContext ctx;
      AddBearerToken(ctx, load.token());
      v1::CancelJobRequest req;
      req.set_job_id(w->job_id);
      v1::Job job;
      w->cancel_sent_ns = NowNs();
      grpc::Status st = load.stub(0).CancelJob(&ctx, req, &job);
      if (!st.ok()) {
        ++s.errors;
        if (s.first_error.empty()) s.first_error = st.error_message();
      }
    }
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    *lost = 0;
    for (One* w : picked) {
      while (w->cancelled_ns == 0 && absl::Now() < give_up) {
        absl::SleepFor(absl::Milliseconds(1));
      }
      if (w->cancelled_ns == 0) {
        ++*lost;
        continue;
      }
      s.us.push_back((w->cancelled_ns - w->cancel_sent_ns) / 1000.0);
    }
    return s;
  }
  void Stop() { CancelAll(all, cq, poller); }
};

// Fake workers, each one Connect stream: a hello (no CPU slots, no GPUs),
// then a heartbeat a second (Beat), reading whatever the server sends.
class Workers {
 public:
  // Each worker has its own connection, as a worker on its own node does.
  Workers(const std::string& server, const std::string& token, int n) {
    for (int i = 0; i < n; ++i) {
      auto w = std::make_unique<One>();
      AddBearerToken(w->ctx, token);
      grpc::ChannelArguments args;
      args.SetInt("grpc.channel_id", i);  // distinct connections
      w->stub = v1::WorkerService::NewStub(grpc::CreateCustomChannel(
          server, grpc::InsecureChannelCredentials(), args));
      all_.push_back(std::move(w));
    }
    poller_ = std::thread([this] { Poll(); });
    for (int i = 0; i < n; ++i) {
      One& w = *all_[i];
      w.stream = w.stub->PrepareAsyncConnect(&w.ctx, &cq_);
      w.stream->StartCall(Tag(i, kStarted));
    }
  }

  // Waits up to `timeout` for every hello to be acknowledged; the seconds
  // from the first connect to the last HelloAck.
  double WaitForHelloAcks(absl::Duration timeout) {
    const absl::Time give_up = t0_ + timeout;
    while (acked_.load() + failed_.load() < static_cast<int>(all_.size()) &&
           absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    return (last_ack_ns_.load() - absl::ToUnixNanos(t0_)) / 1e9;
  }
  int acked() const { return acked_.load(); }
  int failed() const { return failed_.load(); }

  // Heartbeats once a second for `seconds` (every acknowledged worker
  // without a write in flight); returns heartbeat-to-ack latencies.
  Samples Beat(double seconds) {
    {
      absl::MutexLock l(&mu_);
      latencies_ = Samples{};
    }
    const absl::Time end = absl::Now() + absl::Seconds(seconds);
    while (absl::Now() < end) {
      const absl::Time next = absl::Now() + absl::Seconds(1);
      for (size_t i = 0; i < all_.size(); ++i) {
        One& w = *all_[i];
        if (!w.acked.load() || w.writing.exchange(true)) continue;
        w.out.Clear();
        w.out.mutable_heartbeat()->set_sequence(++w.sequence);
        w.sent_ns = NowNs();
        w.stream->Write(w.out, Tag(i, kWritten));
      }
      absl::SleepFor(next - absl::Now());
    }
    absl::SleepFor(absl::Milliseconds(500));  // the last acks come in
    absl::MutexLock l(&mu_);
    return latencies_;
  }

  void Stop() { CancelAll(all_, cq_, poller_); }

 private:
  enum Op { kStarted, kWritten, kRead };
  struct One {
    std::unique_ptr<v1::WorkerService::Stub> stub;
    grpc::ClientContext ctx;
    std::unique_ptr<
        grpc::ClientAsyncReaderWriter<v1::WorkerMessage, v1::ServerMessage>>
        stream;
    v1::WorkerMessage out;            // the write in flight
    v1::ServerMessage in;             // the read in flight
    std::atomic<bool> writing{true};  // the hello first
    std::atomic<bool> acked{false};
    int64_t sequence = 0;
    std::atomic<int64_t> sent_ns{0};  // the heartbeat in flight
  };
  static void* Tag(size_t i, Op op) {
    return reinterpret_cast<void*>(i * 3 + op);
  }

  void Poll() {
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
      const uintptr_t t = reinterpret_cast<uintptr_t>(tag);
      const size_t i = t / 3;
      One& w = *all_[i];
      if (!ok) {
        if (!w.acked.load()) failed_.fetch_add(1);
        continue;
      }
      switch (static_cast<Op>(t % 3)) {
        case kStarted:
          w.out.mutable_hello()->set_worker_id(absl::StrCat("load-w", i));
          w.out.mutable_hello()->set_hostname("load");
          w.stream->Write(w.out, Tag(i, kWritten));
          w.stream->Read(&w.in, Tag(i, kRead));
          break;
        case kWritten:
          w.writing = false;
          break;
        case kRead:
          if (w.in.has_hello_ack() && !w.acked.exchange(true)) {
            last_ack_ns_ = NowNs();
            acked_.fetch_add(1);
          } else if (w.in.has_heartbeat_ack()) {
            const double us = (NowNs() - w.sent_ns.load()) / 1000.0;
            absl::MutexLock l(&mu_);
            latencies_.us.push_back(us);
          }
          w.stream->Read(&w.in, Tag(i, kRead));
          break;
      }
    }
  }

  grpc::CompletionQueue cq_;
  std::vector<std::unique_ptr<One>> all_;
  const absl::Time t0_ = absl::Now();
  std::atomic<int> acked_{0};
  std::atomic<int> failed_{0};
  std::atomic<int64_t> last_ack_ns_{0};
  absl::Mutex mu_;
  Samples latencies_ ABSL_GUARDED_BY(mu_);
  std::thread poller_;  // last: starts after the members it uses
};

// Prints the CPU the server (one this program started: pid > 0) used
// since `cpu0` over `seconds`, its threads and resident memory, with
// `what` open ("1000 streams").
void PrintServerUse(pid_t server, const std::string& what, double cpu0,
                    double seconds) {
  if (server <= 0) return;
  const trainyard::bench::ProcessSize size = SizeOf(server);
  std::printf(
      "idle     %13s: server CPU %5.1f%% of a core, %5d threads, "
      "%.1f MiB resident\n",
      what.c_str(), (CpuSeconds(server) - cpu0) / seconds * 100, size.threads,
      size.rss_mib);
  std::fflush(stdout);
}

// The same over `seconds` of nothing.
void IdleReport(pid_t server, const std::string& what, double seconds) {
  const double cpu0 = CpuSeconds(server);
  absl::SleepFor(absl::Seconds(seconds));
  PrintServerUse(server, what, cpu0, seconds);
}

bool ParseFlags(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name, std::string* out) {
      return trainyard::bench::FlagValue(argc, argv, &i, name, out);
    };
    std::string v;
    if (value("--server", &f.server)) continue;
    if (value("--data-root", &f.data_root)) continue;
    if (value("--server-bin", &f.server_bin)) continue;
    if (value("--token", &f.token)) continue;
    if (value("--worker-token", &f.worker_token)) continue;
    if (value("--clients", &v) && absl::SimpleAtoi(v, &f.clients)) continue;
    if (value("--watches", &v) && absl::SimpleAtoi(v, &f.watches)) continue;
    if (value("--workers", &v) && absl::SimpleAtoi(v, &f.workers)) continue;
    if (value("--channels", &v) && absl::SimpleAtoi(v, &f.channels)) continue;
    if (value("--duration-s", &v) && absl::SimpleAtod(v, &f.duration_s))
      continue;
    std::fprintf(stderr, "yard_load_bench: bad argument %s\n", a.c_str());
    return false;
  }
  return f.clients > 0 && f.channels > 0 && f.duration_s > 0 && f.workers >= 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, f)) return 2;
  pid_t server_pid = 0;
  std::unique_ptr<trainyard::bench::ServerProcess> server;
  if (f.server.empty()) {
    // Every stream is the admin's: no per-tenant stream limit.
    auto started = trainyard::bench::ServerProcess::Start(
        {f.server_bin, f.data_root, {"--max-streams-per-tenant=0"}});
    if (!started.ok()) {
      std::fprintf(stderr, "yard_load_bench: %s\n",
                   started.status().ToString().c_str());
      return 1;
    }
    server = *std::move(started);
    server_pid = server->pid();
    f.server = server->address();
    f.token = server->Token("admin.token");
    f.worker_token = server->Token("worker.token");
    std::printf("started yard-server pid %d at %s (state dir %s)\n", server_pid,
                f.server.c_str(), server->state_dir().c_str());
  } else if (f.token.empty() && getenv("YARD_TOKEN") != nullptr) {
    f.token = getenv("YARD_TOKEN");
  }
  Load load(f);
  std::printf("server %s, %d clients, %d channels, %.1f s per phase\n",
              f.server.c_str(), f.clients, f.channels, f.duration_s);

  std::vector<Load::Kind> all_submit(f.clients, Load::kSubmit);
  CpuMeter cpu{server_pid};
  std::vector<Samples> r = load.Run(all_submit, f.duration_s);
  Report("submit", "SubmitJob", r[Load::kSubmit], f.duration_s);
  cpu.Report("submit", r[Load::kSubmit].us.size());

  std::vector<Load::Kind> mixed;
  for (int c = 0; c < f.clients; ++c) {
    mixed.push_back(c % 4 < 2    ? Load::kSubmit
                    : c % 4 == 2 ? Load::kGet
                                 : Load::kList);
  }
  cpu = CpuMeter{server_pid};
  r = load.Run(mixed, f.duration_s);
  Report("mixed", "SubmitJob", r[Load::kSubmit], f.duration_s);
  Report("mixed", "GetJob", r[Load::kGet], f.duration_s);
  Report("mixed", "ListJobs", r[Load::kList], f.duration_s);
  cpu.Report("mixed", r[0].us.size() + r[1].us.size() + r[2].us.size());

  if (f.watches > 0) {
    // Idle with no stream open, against which to set the same with them.
    absl::SleepFor(absl::Seconds(f.duration_s));  // the last pass settles
    IdleReport(server_pid, "0 streams", f.duration_s);
    Watches w;
    const absl::Time t0 = absl::Now();
    w.Start(load, load.SomeIds(f.watches));
    while (w.open + w.failed < f.watches &&
           absl::Now() - t0 < absl::Seconds(60)) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    std::printf(
        "watch    WatchJob   %d of %d streams open (first event in), "
        "%d failed, %.2f s to open\n",
        w.open.load(), f.watches, w.failed.load(),
        absl::ToDoubleSeconds(absl::Now() - t0));
    // Idle: the streams open, no calls. What holding them costs.
    IdleReport(server_pid, absl::StrCat(w.open.load(), " streams"),
               f.duration_s);
    cpu = CpuMeter{server_pid};
    r = load.Run(all_submit, f.duration_s);
    Report("watching", "SubmitJob", r[Load::kSubmit], f.duration_s);
    cpu.Report("watching", r[Load::kSubmit].us.size());
    int lost = 0;
    Samples delivered = w.CancelSome(load, 200, &lost);
    std::printf("deliver  CancelJob -> its watcher: %zu events, %d lost\n",
                delivered.us.size(), lost);
    Report("deliver", "event", delivered, 1);
    w.Stop();
  }
  if (f.workers > 0) {
    absl::SleepFor(absl::Seconds(f.duration_s));  // the watches' end settles
    IdleReport(server_pid, "0 workers", f.duration_s);
    Workers w(f.server, f.worker_token, f.workers);
    const double to_ack = w.WaitForHelloAcks(absl::Seconds(120));
    std::printf(
        "workers  Connect    %d of %d said hello and were acknowledged, %d "
        "failed; %.2f s from the first connect to the last HelloAck\n",
        w.acked(), f.workers, w.failed(), to_ack);
    // Idle but for the heartbeats: what the connected workers cost.
    const double cpu0 = CpuSeconds(server_pid);
    const absl::Time beat0 = absl::Now();
    Samples beats = w.Beat(f.duration_s);
    PrintServerUse(server_pid, absl::StrCat(w.acked(), " workers"), cpu0,
                   absl::ToDoubleSeconds(absl::Now() - beat0));
    Report("workers", "heartbeat", beats, f.duration_s);
    // Submissions while the workers heartbeat.
    std::thread beating([&] { w.Beat(f.duration_s); });
    cpu = CpuMeter{server_pid};
    r = load.Run(all_submit, f.duration_s);
    beating.join();
    Report("workers", "SubmitJob", r[Load::kSubmit], f.duration_s);
    cpu.Report("workers", r[Load::kSubmit].us.size());
    w.Stop();
  }
  if (server != nullptr) {
    std::printf("yard-server exited with %d\n", server->Stop());
  }
  return 0;
}
