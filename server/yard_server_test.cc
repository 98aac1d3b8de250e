// yard-server in-process over real gRPC on 127.0.0.1:0: clients call the
// services with the generated stubs, and a fake worker written here speaks
// the WorkerService protocol. Leases are long; lease expiry is covered with
// a FakeClock in worker_session_test.
#include "server/yard_server.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <sqlite3.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/grpc_credentials.h"
#include "common/test_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/checkpoint_access.h"
#include "server/job_store.h"
#include "server/worker_service.h"
#include "trainyard/v1/admin.grpc.pb.h"
#include "trainyard/v1/cluster.grpc.pb.h"
#include "trainyard/v1/jobs.grpc.pb.h"
#include "trainyard/v1/worker.grpc.pb.h"

namespace trainyard::server {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// The tokens of the server under test (read when it starts).
std::string& AdminToken() {
  static std::string* token = new std::string;
  return *token;
}
std::string& WorkerToken() {
  static std::string* token = new std::string;
  return *token;
}


std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string ToString(const grpc::ByteBuffer& bb) {
  if (!bb.Valid()) return "";  // no answer (the call failed)
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(bb.Dump(&slices).ok());
  std::string out;
  for (const auto& s : slices) out.append(s.begin(), s.end());
  return out;
}

// Waits for the completion-queue tag of the one operation in flight.
bool Await(grpc::CompletionQueue& cq) {
  void* tag = nullptr;
  bool ok = false;
  EXPECT_TRUE(cq.Next(&tag, &ok));
  return ok;
}

// Calls a unary method with raw protobuf bytes (for services whose
// generated code is not installed: health and reflection).
std::string RawUnary(grpc::Channel* channel, const std::string& method,
                     const std::string& request, grpc::Status* status) {
  grpc::GenericStub stub(channel->shared_from_this());
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  AddBearerToken(ctx, AdminToken());
  grpc::Slice slice(request);
  grpc::ByteBuffer req(&slice, 1), resp;
  auto call = stub.PrepareUnaryCall(&ctx, method, req, &cq);
  call->StartCall();
  call->Finish(&resp, status, nullptr);
  Await(cq);
  return ToString(resp);
}

// Sends one message on a bidi method and reads one answer.
std::string RawBidiOnce(grpc::Channel* channel, const std::string& method,
                        const std::string& request) {
  grpc::GenericStub stub(channel->shared_from_this());
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  AddBearerToken(ctx, AdminToken());
  auto call = stub.PrepareCall(&ctx, method, &cq);
  call->StartCall(nullptr);
  Await(cq);
  grpc::Slice slice(request);
  grpc::ByteBuffer req(&slice, 1), resp;
  call->Write(req, nullptr);
  Await(cq);
  call->Read(&resp, nullptr);
  const bool got = Await(cq);
  call->WritesDone(nullptr);
  Await(cq);
  grpc::Status status;
  call->Finish(&status, nullptr);
  Await(cq);
  return got ? ToString(resp) : "";
}

class YardServerTest : public ::testing::Test {
 protected:
  YardServerTest() {
    std::ofstream(dir_.File("images.gz")) << "x";
    std::ofstream(dir_.File("labels.gz")) << "x";
  }

  static std::string Normal(const std::string& path) {
    return fs::path(path).lexically_normal().string();
  }

  // The options StartServer starts the server with.
  YardServerOptions Options() const {
    YardServerOptions o;
    o.listen = "127.0.0.1:0";
    o.state_dir = state_dir_;
    o.checkpoint_root = checkpoint_root_;
    o.new_job_store = new_job_store_;
    o.data_root = dir_.path();
    o.worker_lease = worker_lease_;
    o.max_streams_per_tenant = max_streams_per_tenant_;
    return o;
  }

  void StartServer(std::function<absl::Status()> commit_fault = nullptr) {
    YardServerOptions o = Options();
    o.store_commit_fault = std::move(commit_fault);
    auto server = YardServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    AdminToken() = Trimmed(ReadAll(server_->admin_token_file()));
    WorkerToken() = Trimmed(ReadAll(server_->worker_token_file()));
    channel_ = grpc::CreateChannel(server_->address(),
                                   grpc::InsecureChannelCredentials());
    jobs_ = v1::JobService::NewStub(channel_);
    cluster_ = v1::ClusterService::NewStub(channel_);
    worker_stub_ = v1::WorkerService::NewStub(channel_);
  }

  // The first commit after `hold` is set waits inside the store (having
  // notified `in_commit`) until `release`.
  struct HeldCommit {
    std::atomic<bool> hold{false};
    absl::Notification in_commit, release;
  };
  // The server's commits call into held_ until the server is gone: a
  // fixture member, declared before server_, so it outlives the server (a
  // test's local did not: a commit during the teardown, e.g. of a request
  // still being handled, read it after the test body had returned).
  HeldCommit& StartServerHoldingCommits() {
    StartServer([this]() -> absl::Status {
      if (held_.hold.exchange(false)) {
        held_.in_commit.Notify();
        held_.release.WaitForNotification();
      }
      return absl::OkStatus();
    });
    return held_;
  }

  static v1::JobSpec Spec() {
    v1::JobSpec spec;
    spec.set_name("grpc-test");
    spec.mutable_model()->mutable_mlp()->add_hidden(8);
    spec.mutable_data()->mutable_mnist()->set_images("images.gz");
    spec.mutable_data()->mutable_mnist()->set_labels("labels.gz");
    spec.mutable_batch()->set_micro_batch(8);
    spec.set_steps(10);
    return spec;
  }

  std::string Submit() {
    grpc::ClientContext ctx;
    AddBearerToken(ctx, AdminToken());
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec();
    v1::SubmitJobResponse resp;
    grpc::Status s = jobs_->SubmitJob(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job().id();
  }

  v1::Job Get(const std::string& id, grpc::Status* status = nullptr) {
    grpc::ClientContext ctx;
    AddBearerToken(ctx, AdminToken());
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    grpc::Status s = jobs_->GetJob(&ctx, req, &job);
    if (status) *status = s;
    return job;
  }

  // A fake worker: one Connect stream.
  struct Worker {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage,
                                             v1::ServerMessage>> stream;
    bool Send(const v1::WorkerMessage& m) { return stream->Write(m); }
    v1::ServerMessage Next() {
      v1::ServerMessage m;
      EXPECT_TRUE(stream->Read(&m));
      return m;
    }
    // Closes its side, reads what is left and returns how the stream ended.
    grpc::Status Leave() {
      stream->WritesDone();
      v1::ServerMessage m;
      while (stream->Read(&m)) {
      }
      return stream->Finish();
    }
    bool Update(const std::string& job, int attempt,
                const std::function<void(v1::JobUpdate&)>& fill) {
      v1::WorkerMessage m;
      m.mutable_update()->set_job_id(job);
      m.mutable_update()->set_attempt(attempt);
      fill(*m.mutable_update());
      return Send(m);
    }
  };

  std::unique_ptr<Worker> ConnectWorker(
      std::vector<std::pair<std::string, int>> running = {},
      const std::string& worker_id = "w1") {
    auto w = std::make_unique<Worker>();
    AddBearerToken(w->ctx, WorkerToken());
    w->stream = worker_stub_->Connect(&w->ctx);
    v1::WorkerMessage hello;
    hello.mutable_hello()->set_worker_id(worker_id);
    hello.mutable_hello()->set_hostname("test-host");
    hello.mutable_hello()->set_cpu_slots(1);
    for (auto& [job, attempt] : running) {
      auto* r = hello.mutable_hello()->add_running();
      r->set_job_id(job);
      r->set_attempt(attempt);
    }
    EXPECT_TRUE(w->Send(hello));
    EXPECT_TRUE(w->Next().has_hello_ack());
    return w;
  }

  // Each listed worker's state, by id (ListWorkers).
  std::map<std::string, v1::WorkerState> WorkerStates() {
    grpc::ClientContext ctx;
    AddBearerToken(ctx, AdminToken());
    v1::ListWorkersResponse listed;
    EXPECT_TRUE(cluster_->ListWorkers(&ctx, {}, &listed).ok());
    std::map<std::string, v1::WorkerState> out;
    for (const v1::Worker& w : listed.workers()) out[w.id()] = w.state();
    return out;
  }

  // A job placed on `worker`, with a checkpoint of step 10: meta.json and
  // a model.safetensors of `tensors`.
  std::string JobWithCheckpoint(Worker& worker, const std::string& tensors) {
    const std::string id = Submit();
    v1::ServerMessage assigned = worker.Next();
    EXPECT_TRUE(assigned.has_assignment());
    const std::string dir =
        assigned.assignment().checkpoint_dir() + "/step-00000010";
    fs::create_directories(dir);
    std::ofstream(dir + "/meta.json") << "{\"step\": 10}";
    std::ofstream(dir + "/model.safetensors", std::ios::binary) << tensors;
    return id;
  }

  // A stub on a connection of its own whose streams take no more than 64
  // KiB ahead of what their reader has read: the server's write of a
  // checkpoint chunk (1 MiB) waits until the client reads it.
  std::unique_ptr<v1::JobService::Stub> SlowReadingJobs() const {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 * 1024);
    args.SetInt("trainyard.test.own_connection", 1);
    return v1::JobService::NewStub(grpc::CreateCustomChannel(
        server_->address(), grpc::InsecureChannelCredentials(), args));
  }

  // The bytes of job `id`'s newest checkpoint's model.safetensors, as a
  // whole download of it brings them; its status in `status`.
  std::string Download(const std::string& id, grpc::Status* status) {
    grpc::ClientContext ctx;
    AddBearerToken(ctx, AdminToken());
    v1::DownloadCheckpointRequest req;
    req.set_job_id(id);
    auto reader = jobs_->DownloadCheckpoint(&ctx, req);
    v1::CheckpointChunk chunk;
    std::string tensors;
    while (reader->Read(&chunk)) {
      if (chunk.file() == "model.safetensors") tensors += chunk.data();
    }
    *status = reader->Finish();
    return tensors;
  }

  // Watches `id` from `after` on a thread; Join() returns its events.
  struct Watch {
    std::thread thread;
    grpc::ClientContext ctx;
    std::vector<v1::JobEvent> events;
    grpc::Status status;
    void Join() { thread.join(); }
  };
  std::unique_ptr<Watch> StartWatch(const std::string& id, int64_t after) {
    auto w = std::make_unique<Watch>();
    AddBearerToken(w->ctx, AdminToken());
    w->thread = std::thread([this, id, after, w = w.get()] {
      v1::WatchJobRequest req;
      req.set_job_id(id);
      req.set_after_sequence(after);
      auto reader = jobs_->WatchJob(&w->ctx, req);
      v1::JobEvent e;
      while (reader->Read(&e)) w->events.push_back(e);
      w->status = reader->Finish();
    });
    return w;
  }

  TestDir dir_;
  // Normalized, as the server names them in messages and paths.
  std::string state_dir_ = Normal(dir_.File("state"));
  std::string checkpoint_root_;  // empty: STATE_DIR/checkpoints
  bool new_job_store_ = false;
  absl::Duration worker_lease_ = absl::Minutes(10);
  int max_streams_per_tenant_ = 64;
  HeldCommit held_;  // StartServerHoldingCommits
  std::unique_ptr<YardServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::ClusterService::Stub> cluster_;
  std::unique_ptr<v1::WorkerService::Stub> worker_stub_;
};

TEST_F(YardServerTest, ServesHealthReflectionAndWritesItsAddress) {
  StartServer();
  EXPECT_EQ(ReadAll(dir_.File("state/yard-server.addr")),
            server_->address() + "\n");
  grpc::Status status;
  // HealthCheckRequest{} -> HealthCheckResponse{status: SERVING (1)}.
  EXPECT_EQ(RawUnary(channel_.get(), "/grpc.health.v1.Health/Check", "",
                     &status),
            std::string("\x08\x01", 2));
  EXPECT_TRUE(status.ok()) << status.error_message();
  // ServerReflectionRequest{list_services: ""} lists our services.
  const std::string listing = RawBidiOnce(
      channel_.get(),
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      std::string("\x3a\x00", 2));
  EXPECT_THAT(listing, HasSubstr("trainyard.v1.JobService"));
  EXPECT_THAT(listing, HasSubstr("trainyard.v1.WorkerService"));
  server_->Shutdown();
  EXPECT_FALSE(std::filesystem::exists(dir_.File("state/yard-server.addr")));
}

// Bytes that are no request message (a proto3 string field holding bytes
// that are not UTF-8, or no protobuf at all) are INVALID_ARGUMENT naming
// the method, never gRPC's bare INTERNAL, on unary and streaming methods.
TEST_F(YardServerTest, RequestsThatCannotBeParsedAreInvalidArguments) {
  StartServer();
  const std::string bad_utf8("\x0a\x04j-\xff\xfe", 6);  // job_id
  const std::string garbage("\xff\xff\xff\xff", 4);
  for (const auto& [method, request] :
       std::vector<std::pair<std::string, std::string>>{
           {"/trainyard.v1.JobService/GetJob", bad_utf8},
           {"/trainyard.v1.JobService/SubmitJob", garbage},
           {"/trainyard.v1.JobService/WatchJob", bad_utf8},
           {"/trainyard.v1.AdminService/CreateToken", garbage}}) {
    grpc::Status status;
    RawUnary(channel_.get(), method, request, &status);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << method << ": " << status.error_message();
    EXPECT_THAT(status.error_message(),
                HasSubstr("the request to " + method + " could not be parsed"));
  }
  // So is a worker's message on its Connect stream.
  {
    grpc::ClientContext ctx;
    AddBearerToken(ctx, WorkerToken());
    auto stream = worker_stub_->Connect(&ctx);
    v1::WorkerMessage hello;
    hello.mutable_hello()->set_worker_id("w\xff");  // not UTF-8
    stream->Write(hello);
    v1::ServerMessage unused;
    EXPECT_FALSE(stream->Read(&unused));
    const grpc::Status status = stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << status.error_message();
    EXPECT_THAT(status.error_message(),
                HasSubstr("/trainyard.v1.WorkerService/Connect"));
  }
  // A well-formed request still goes through to the handler.
  grpc::Status status;
  RawUnary(channel_.get(), "/trainyard.v1.JobService/GetJob",
           std::string("\x0a\x08j-000042", 10), &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND)
      << status.error_message();

  // A job id of no job's form is refused before any lookup, and a long one
  // is not echoed whole.
  grpc::ClientContext ctx;
  AddBearerToken(ctx, AdminToken());
  v1::GetJobRequest get;
  get.set_job_id(std::string(20000, 'j'));
  v1::Job job;
  status = jobs_->GetJob(&ctx, get, &job);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("job_id: \"jjjj"));
  EXPECT_THAT(status.error_message(), HasSubstr("...\" is not a job id"));
  EXPECT_LT(status.error_message().size(), 200u);
}

// The threads of this process (the server runs in it).
int ThreadCount() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

// Expects that `n` streams (`what`) opened since the process had `before`
// threads added fewer than n/2 (a server with a thread per stream adds one
// or two each).
void ExpectFewThreadsAdded(int before, int n, const std::string& what) {
  const int now = ThreadCount();
  EXPECT_LT(now - before, n / 2) << before << " threads before, " << now
                                 << " with the " << n << " " << what;
}

// An async client's streams on one completion queue: stream i's events
// are tagged Tag(i, kStarted), Tag(i, kRead) and Tag(i, kFinished). Shut
// down and drained when it goes.
class StreamQueue {
 public:
  enum Event { kStarted, kRead, kFinished };
  ~StreamQueue() {
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }
  grpc::CompletionQueue* cq() { return &cq_; }
  static void* Tag(int i, Event e) {
    return reinterpret_cast<void*>(static_cast<intptr_t>(3 * i + e));
  }
  // Runs the queue until `done` or 30 s have passed, handing each event to
  // `on_event(i, event, ok)`.
  void Drive(const std::function<bool()>& done,
             const std::function<void(int, Event, bool)>& on_event) {
    const auto give_up =
        std::chrono::system_clock::now() + std::chrono::seconds(30);
    while (!done()) {
      void* got = nullptr;
      bool ok = false;
      if (cq_.AsyncNext(&got, &ok, give_up) !=
          grpc::CompletionQueue::NextStatus::GOT_EVENT) {
        return;
      }
      const intptr_t tag = reinterpret_cast<intptr_t>(got);
      on_event(static_cast<int>(tag / 3), static_cast<Event>(tag % 3), ok);
    }
  }

 private:
  grpc::CompletionQueue cq_;
};

// An open WatchJob or followed GetJobLogs stream holds no server thread
// (gRPC's callback API): 60 streams waiting on a queued job leave the
// process's threads about where they were (one each before), and
// cancelling the job ends every one of them with OK, the watches after the
// CANCELLED event.
TEST_F(YardServerTest, OpenStreamsHoldNoThreads) {
  StartServer();
  const std::string id = Submit();
  {  // a first stream call, so that gRPC's callback threads are running
    grpc::ClientContext ctx;
    AddBearerToken(ctx, AdminToken());
    v1::GetJobLogsRequest req;
    req.set_job_id(id);
    auto reader = jobs_->GetJobLogs(&ctx, req);
    v1::LogChunk chunk;
    while (reader->Read(&chunk)) {
    }
    ASSERT_TRUE(reader->Finish().ok());
  }
  const int before = ThreadCount();
  constexpr int kWatches = 30, kStreams = 60;  // the rest follow the log
  struct Stream {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientAsyncReader<v1::JobEvent>> events;
    std::unique_ptr<grpc::ClientAsyncReader<v1::LogChunk>> logs;
    v1::JobEvent event;
    v1::LogChunk chunk;
    std::vector<v1::JobEvent> seen;
    grpc::Status status;
  };
  StreamQueue queue;
  std::vector<std::unique_ptr<Stream>> streams;
  using Q = StreamQueue;
  for (int i = 0; i < kStreams; ++i) {
    auto s = std::make_unique<Stream>();
    AddBearerToken(s->ctx, AdminToken());
    if (i < kWatches) {
      v1::WatchJobRequest req;
      req.set_job_id(id);
      s->events = jobs_->PrepareAsyncWatchJob(&s->ctx, req, queue.cq());
      s->events->StartCall(Q::Tag(i, Q::kStarted));
    } else {
      v1::GetJobLogsRequest req;
      req.set_job_id(id);
      req.set_follow(true);
      s->logs = jobs_->PrepareAsyncGetJobLogs(&s->ctx, req, queue.cq());
      s->logs->StartCall(Q::Tag(i, Q::kStarted));
    }
    streams.push_back(std::move(s));
  }
  int watching = 0, finished = 0;
  auto read = [&](int i) {
    Stream& s = *streams[i];
    if (s.events) {
      s.events->Read(&s.event, Q::Tag(i, Q::kRead));
    } else {
      s.logs->Read(&s.chunk, Q::Tag(i, Q::kRead));
    }
  };
  auto drive = [&](const std::function<bool()>& done) {
    queue.Drive(done, [&](int i, Q::Event e, bool ok) {
      Stream& s = *streams[i];
      switch (e) {
        case Q::kStarted:
          read(i);
          break;
        case Q::kRead:
          if (!ok) {
            if (s.events) s.events->Finish(&s.status, Q::Tag(i, Q::kFinished));
            if (s.logs) s.logs->Finish(&s.status, Q::Tag(i, Q::kFinished));
            break;
          }
          if (s.events) {
            s.seen.push_back(s.event);
            if (s.seen.size() == 1) ++watching;
          }
          read(i);
          break;
        case Q::kFinished:
          ++finished;
          break;
      }
    });
  };
  drive([&] { return watching == kWatches; });
  ASSERT_EQ(watching, kWatches) << "every watch read the QUEUED event";
  ExpectFewThreadsAdded(before, kStreams, "streams open");

  grpc::ClientContext ctx;
  AddBearerToken(ctx, AdminToken());
  v1::CancelJobRequest req;
  req.set_job_id(id);
  v1::Job job;
  ASSERT_TRUE(jobs_->CancelJob(&ctx, req, &job).ok());
  drive([&] { return finished == kStreams; });
  ASSERT_EQ(finished, kStreams);
  for (int i = 0; i < kStreams; ++i) {
    const Stream& s = *streams[i];
    EXPECT_TRUE(s.status.ok()) << i << ": " << s.status.error_message();
    if (s.events) {
      ASSERT_FALSE(s.seen.empty());
      EXPECT_EQ(s.seen.back().state_change().to(), v1::CANCELLED) << i;
    }
  }
}

// A connected worker holds no server thread either (two each before: its
// stream's reader and writer): 60 workers connected and heartbeating leave
// the process's threads about where they were, and each that then closes
// its side ends with OK.
TEST_F(YardServerTest, ConnectedWorkersHoldNoThreads) {
  StartServer();
  {  // a first stream, so that gRPC's callback threads are running
    ASSERT_TRUE(ConnectWorker({}, "warm-up")->Leave().ok());
  }
  const int before = ThreadCount();
  constexpr int kWorkers = 60;
  std::vector<std::unique_ptr<Worker>> workers;
  for (int i = 0; i < kWorkers; ++i) {
    workers.push_back(ConnectWorker({}, absl::StrCat("w", i)));
    v1::WorkerMessage heartbeat;
    heartbeat.mutable_heartbeat()->set_sequence(1);
    ASSERT_TRUE(workers.back()->Send(heartbeat));
    ASSERT_TRUE(workers.back()->Next().has_heartbeat_ack()) << i;
  }
  ExpectFewThreadsAdded(before, kWorkers, "workers connected");

  std::map<std::string, v1::WorkerState> states = WorkerStates();
  for (int i = 0; i < kWorkers; ++i) {
    EXPECT_EQ(states[absl::StrCat("w", i)], v1::WORKER_READY) << i;
  }
  for (int i = 0; i < kWorkers; ++i) {
    const grpc::Status status = workers[i]->Leave();
    EXPECT_TRUE(status.ok()) << i << ": " << status.error_message();
  }
}

// While a slow commit holds every thread that handles worker messages
// (here the hellos of more new workers than there are such threads, each
// waiting for its commit), the workers already connected keep their leases
// by talking: a message renews its worker's lease as it arrives, before a
// thread handles it.
TEST_F(YardServerTest, TalkingWorkersKeepTheirLeasesWhileACommitHoldsUp) {
  worker_lease_ = absl::Seconds(2);
  HeldCommit& held = StartServerHoldingCommits();
  constexpr int kTalking = 4;
  std::vector<std::unique_ptr<Worker>> talking;
  for (int i = 0; i < kTalking; ++i) {
    talking.push_back(ConnectWorker({}, absl::StrCat("talking", i)));
  }
  held.hold = true;
  std::vector<std::unique_ptr<Worker>> joining;
  for (int i = 0; i < WorkerServiceImpl::kSessionThreads + 4; ++i) {
    auto w = std::make_unique<Worker>();
    AddBearerToken(w->ctx, WorkerToken());
    w->stream = worker_stub_->Connect(&w->ctx);
    v1::WorkerMessage hello;
    hello.mutable_hello()->set_worker_id(absl::StrCat("joining", i));
    hello.mutable_hello()->set_cpu_slots(1);
    ASSERT_TRUE(w->Send(hello));
    joining.push_back(std::move(w));
  }
  held.in_commit.WaitForNotification();
  // 3 s, past the 2 s lease, with a heartbeat from each every 200 ms.
  for (int beat = 1; beat <= 15; ++beat) {
    for (auto& w : talking) {
      v1::WorkerMessage heartbeat;
      heartbeat.mutable_heartbeat()->set_sequence(beat);
      ASSERT_TRUE(w->Send(heartbeat));
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  std::map<std::string, v1::WorkerState> held_up = WorkerStates();
  // More than the 64 messages a stream reads ahead of its handling: its
  // reading waits, and goes on as they are handled.
  constexpr int kBeats = 15 + 60;
  for (auto& w : talking) {
    for (int beat = 16; beat <= kBeats; ++beat) {
      v1::WorkerMessage heartbeat;
      heartbeat.mutable_heartbeat()->set_sequence(beat);
      ASSERT_TRUE(w->Send(heartbeat));
    }
  }
  held.release.Notify();
  for (int i = 0; i < kTalking; ++i) {
    EXPECT_EQ(held_up[absl::StrCat("talking", i)], v1::WORKER_READY) << i;
  }
  // Once the commit goes through, every heartbeat is answered, in order.
  // (The joining workers' hellos waited past the lease: they were taken for
  // lost, and would connect again.)
  for (auto& w : talking) {
    int64_t acked = 0;
    v1::ServerMessage m;
    while (acked < kBeats && w->stream->Read(&m)) {
      if (!m.has_heartbeat_ack()) continue;
      EXPECT_EQ(m.heartbeat_ack().heartbeat_sequence(), acked + 1);
      acked = m.heartbeat_ack().heartbeat_sequence();
    }
    EXPECT_EQ(acked, kBeats);
  }
  std::map<std::string, v1::WorkerState> after = WorkerStates();
  for (int i = 0; i < kTalking; ++i) {
    EXPECT_EQ(after[absl::StrCat("talking", i)], v1::WORKER_READY) << i;
  }
}

// An open DownloadCheckpoint stream holds no server thread either (one
// each before, waiting in its write for the client to read): 40 downloads
// whose clients read one chunk each and stop leave the process's threads
// about where they were; each then reads on to the end and has the
// checkpoint whole.
TEST_F(YardServerTest, OpenDownloadsHoldNoThreads) {
  StartServer();
  auto worker = ConnectWorker();
  std::string tensors(4 * kCheckpointChunkBytes, '\0');
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i] = char(i * 13 + 1);
  const std::string id = JobWithCheckpoint(*worker, tensors);
  grpc::Status status;
  // A first download, whole, so that gRPC's callback threads are running.
  ASSERT_TRUE(Download(id, &status) == tensors);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const int before = ThreadCount();
  constexpr int kDownloads = 40;
  std::unique_ptr<v1::JobService::Stub> slow = SlowReadingJobs();
  struct Stream {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientAsyncReader<v1::CheckpointChunk>> reader;
    v1::CheckpointChunk chunk;
    int chunks = 0;
    std::string tensors;
    grpc::Status status;
  };
  StreamQueue queue;
  std::vector<std::unique_ptr<Stream>> streams;
  using Q = StreamQueue;
  v1::DownloadCheckpointRequest req;
  req.set_job_id(id);
  for (int i = 0; i < kDownloads; ++i) {
    auto s = std::make_unique<Stream>();
    AddBearerToken(s->ctx, AdminToken());
    s->reader = slow->PrepareAsyncDownloadCheckpoint(&s->ctx, req, queue.cq());
    s->reader->StartCall(Q::Tag(i, Q::kStarted));
    streams.push_back(std::move(s));
  }
  bool reading_on = false;  // past each stream's first chunk
  int first_read = 0, finished = 0;
  auto drive = [&](const std::function<bool()>& done) {
    queue.Drive(done, [&](int i, Q::Event e, bool ok) {
      Stream& s = *streams[i];
      switch (e) {
        case Q::kStarted:
          s.reader->Read(&s.chunk, Q::Tag(i, Q::kRead));
          break;
        case Q::kRead:
          if (!ok) {
            s.reader->Finish(&s.status, Q::Tag(i, Q::kFinished));
            break;
          }
          if (s.chunk.file() == "model.safetensors") {
            s.tensors += s.chunk.data();
          }
          if (++s.chunks == 1) ++first_read;
          if (reading_on) s.reader->Read(&s.chunk, Q::Tag(i, Q::kRead));
          break;
        case Q::kFinished:
          ++finished;
          break;
      }
    });
  };
  drive([&] { return first_read == kDownloads; });
  ASSERT_EQ(first_read, kDownloads) << "every download read its first chunk";
  absl::SleepFor(absl::Milliseconds(200));  // the servers' writes under way
  ExpectFewThreadsAdded(before, kDownloads, "downloads open");

  reading_on = true;
  for (int i = 0; i < kDownloads; ++i) {
    streams[i]->reader->Read(&streams[i]->chunk, Q::Tag(i, Q::kRead));
  }
  drive([&] { return finished == kDownloads; });
  ASSERT_EQ(finished, kDownloads);
  for (int i = 0; i < kDownloads; ++i) {
    const Stream& s = *streams[i];
    EXPECT_TRUE(s.status.ok()) << i << ": " << s.status.error_message();
    EXPECT_EQ(s.chunks, 5) << i << ": meta.json, then 4 of the tensors";
    EXPECT_TRUE(s.tensors == tensors) << i;
  }
}

// A download holds its tenant's stream slot until it ends, and one whose
// client goes away mid-way frees it as soon as the server sees the
// cancel: with one stream a tenant, a second download is refused while the
// first waits on its reader, and served once the first is cancelled.
TEST_F(YardServerTest, ADownloadItsClientLeavesFreesItsStreamSlot) {
  max_streams_per_tenant_ = 1;
  StartServer();
  auto worker = ConnectWorker();
  const std::string tensors(3 * kCheckpointChunkBytes, 'q');
  const std::string id = JobWithCheckpoint(*worker, tensors);
  std::unique_ptr<v1::JobService::Stub> slow = SlowReadingJobs();
  grpc::ClientContext ctx;
  AddBearerToken(ctx, AdminToken());
  v1::DownloadCheckpointRequest req;
  req.set_job_id(id);
  auto first = slow->DownloadCheckpoint(&ctx, req);
  v1::CheckpointChunk chunk;
  ASSERT_TRUE(first->Read(&chunk));  // being served; its next write waits
  grpc::Status refused;
  EXPECT_TRUE(Download(id, &refused).empty());
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("limit per tenant is 1"));

  ctx.TryCancel();
  EXPECT_EQ(first->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // Asked at once, it may come before the cancel is seen: refused then,
  // it is asked again.
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  grpc::Status status;
  std::string got;
  do {
    got = Download(id, &status);
    if (!status.ok()) absl::SleepFor(absl::Milliseconds(10));
  } while (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
           absl::Now() < give_up);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(got == tensors);
}

TEST_F(YardServerTest, SubmitScheduleRunWatchAndInspect) {
  StartServer();
  auto worker = ConnectWorker();
  const std::string id = Submit();
  auto watch = StartWatch(id, 0);
  v1::ServerMessage m = worker->Next();
  ASSERT_TRUE(m.has_assignment());
  EXPECT_EQ(m.assignment().job_id(), id);
  EXPECT_THAT(m.assignment().checkpoint_dir(), HasSubstr("/checkpoints/" + id));
  ASSERT_TRUE(worker->Update(id, 1, [](auto& u) { u.mutable_started(); }));
  ASSERT_TRUE(worker->Update(id, 1, [](auto& u) {
    u.mutable_trainer()->mutable_progress()->set_step(10);
  }));
  ASSERT_TRUE(worker->Update(
      id, 1, [](auto& u) { u.set_log("first line\nhello log\n"); }));
  ASSERT_TRUE(worker->Update(id, 1, [](auto& u) {
    u.mutable_trainer()->mutable_finished()->set_eval_accuracy(0.97);
  }));
  ASSERT_TRUE(worker->Update(id, 1, [](auto& u) { u.mutable_exited(); }));
  watch->Join();
  ASSERT_TRUE(watch->status.ok()) << watch->status.error_message();
  ASSERT_FALSE(watch->events.empty());
  EXPECT_EQ(watch->events.back().state_change().to(), v1::SUCCEEDED);

  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_DOUBLE_EQ(job.result().eval_accuracy(), 0.97);

  // The whole log, its last line, and two bad requests.
  auto read_logs = [&](int64_t offset, int32_t tail_lines, std::string* log) {
    grpc::ClientContext logs_ctx;
    AddBearerToken(logs_ctx, AdminToken());
    v1::GetJobLogsRequest logs_req;
    logs_req.set_job_id(id);
    logs_req.set_offset(offset);
    logs_req.set_tail_lines(tail_lines);
    auto logs = jobs_->GetJobLogs(&logs_ctx, logs_req);
    v1::LogChunk chunk;
    while (logs->Read(&chunk)) *log += chunk.data();
    return logs->Finish();
  };
  std::string log;
  EXPECT_TRUE(read_logs(0, 0, &log).ok());
  EXPECT_EQ(log, "first line\nhello log\n");
  log.clear();
  EXPECT_TRUE(read_logs(0, 1, &log).ok());
  EXPECT_EQ(log, "hello log\n");
  grpc::Status bad = read_logs(0, -1, &log);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad.error_message(), "tail_lines: must be >= 0, got -1");
  bad = read_logs(3, 1, &log);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad.error_message(),
            "tail_lines: not with offset: give one or the other");

  grpc::ClientContext list_ctx;

  AddBearerToken(list_ctx, AdminToken());
  v1::ListJobsRequest list_req;
  list_req.add_states(v1::SUCCEEDED);
  v1::ListJobsResponse list;
  ASSERT_TRUE(jobs_->ListJobs(&list_ctx, list_req, &list).ok());
  ASSERT_EQ(list.jobs_size(), 1);
  EXPECT_EQ(list.jobs(0).id(), id);

  grpc::ClientContext workers_ctx;

  AddBearerToken(workers_ctx, AdminToken());
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(cluster_->ListWorkers(&workers_ctx, {}, &workers).ok());
  ASSERT_EQ(workers.workers_size(), 1);
  EXPECT_EQ(workers.workers(0).id(), "w1");
  EXPECT_EQ(workers.workers(0).hostname(), "test-host");
  EXPECT_EQ(workers.workers(0).free_cpu_slots(), 1);
  grpc::ClientContext status_ctx;
  AddBearerToken(status_ctx, AdminToken());
  v1::ClusterStatus cs;
  ASSERT_TRUE(cluster_->GetClusterStatus(&status_ctx, {}, &cs).ok());
  EXPECT_EQ(cs.workers_ready(), 1);
  EXPECT_EQ(cs.jobs_succeeded(), 1);
  worker->stream->WritesDone();
  EXPECT_TRUE(worker->stream->Finish().ok());
}

TEST_F(YardServerTest, BadRequestsGetTheRightCodes) {
  StartServer();
  grpc::Status s;
  Get("j-000404", &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("j-000404"));
  Get("", &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  grpc::ClientContext submit_ctx;

  AddBearerToken(submit_ctx, AdminToken());
  v1::SubmitJobResponse resp;
  s = jobs_->SubmitJob(&submit_ctx, v1::SubmitJobRequest(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  grpc::ClientContext bad_ctx;

  AddBearerToken(bad_ctx, AdminToken());
  v1::SubmitJobRequest bad;
  *bad.mutable_spec() = Spec();
  bad.mutable_spec()->mutable_data()->mutable_mnist()->set_images("missing.gz");
  s = jobs_->SubmitJob(&bad_ctx, bad, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("data.mnist.images"));

  grpc::ClientContext list_ctx;

  AddBearerToken(list_ctx, AdminToken());
  v1::ListJobsRequest list_req;
  list_req.set_page_token("not-a-token");
  v1::ListJobsResponse list;
  s = jobs_->ListJobs(&list_ctx, list_req, &list);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // A worker id no worker can have: the field named, the id not echoed
  // whole (a 20,000-byte one overflowed the status metadata).
  for (const std::string& id :
       {std::string(20000, 'w'), std::string("w\n1"), std::string()}) {
    v1::Worker worker;
    v1::ForgetWorkerResponse forgotten;
    grpc::ClientContext drain_ctx, undrain_ctx, forget_ctx;
    for (grpc::ClientContext* ctx : {&drain_ctx, &undrain_ctx, &forget_ctx}) {
      AddBearerToken(*ctx, AdminToken());
    }
    v1::DrainWorkerRequest drain;
    drain.set_worker_id(id);
    v1::UndrainWorkerRequest undrain;
    undrain.set_worker_id(id);
    v1::ForgetWorkerRequest forget;
    forget.set_worker_id(id);
    for (const grpc::Status& st :
         {cluster_->DrainWorker(&drain_ctx, drain, &worker),
          cluster_->UndrainWorker(&undrain_ctx, undrain, &worker),
          cluster_->ForgetWorker(&forget_ctx, forget, &forgotten)}) {
      EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
          << st.error_message();
      EXPECT_THAT(st.error_message(), HasSubstr("worker_id: "));
      EXPECT_LT(st.error_message().size(), 200u);
    }
  }

  grpc::ClientContext name_ctx;
  AddBearerToken(name_ctx, AdminToken());
  v1::ListJobsRequest by_name;
  by_name.set_name_contains(std::string(129, 'n'));
  s = jobs_->ListJobs(&name_ctx, by_name, &list);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "name_contains: at most 128 bytes, got 129");

  const std::string id = Submit();
  grpc::ClientContext cancel_ctx;
  AddBearerToken(cancel_ctx, AdminToken());
  v1::CancelJobRequest cancel;
  cancel.set_job_id(id);
  v1::Job cancelled;
  ASSERT_TRUE(jobs_->CancelJob(&cancel_ctx, cancel, &cancelled).ok());
  EXPECT_EQ(cancelled.state(), v1::CANCELLED);
  grpc::ClientContext again_ctx;
  AddBearerToken(again_ctx, AdminToken());
  s = jobs_->CancelJob(&again_ctx, cancel, &cancelled);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(), "job " + id + " is already CANCELLED");

  // Suspend and resume: a reason too long, the wrong state.
  const std::string other = Submit();
  grpc::ClientContext long_ctx;
  AddBearerToken(long_ctx, AdminToken());
  v1::SuspendJobRequest suspend;
  suspend.set_job_id(other);
  suspend.set_reason(std::string(1025, 'r'));
  s = jobs_->SuspendJob(&long_ctx, suspend, &cancelled);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "reason: at most 1024 bytes of UTF-8, got 1025");
  grpc::ClientContext long_cancel_ctx;
  AddBearerToken(long_cancel_ctx, AdminToken());
  v1::CancelJobRequest long_cancel;
  long_cancel.set_job_id(other);
  long_cancel.set_reason(std::string(2000, 'r'));
  s = jobs_->CancelJob(&long_cancel_ctx, long_cancel, &cancelled);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext resume_ctx;
  AddBearerToken(resume_ctx, AdminToken());
  v1::ResumeJobRequest resume;
  resume.set_job_id(other);
  s = jobs_->ResumeJob(&resume_ctx, resume, &cancelled);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(), "job " + other + " is not suspended (QUEUED)");
  grpc::ClientContext empty_ctx;
  AddBearerToken(empty_ctx, AdminToken());
  s = jobs_->ResumeJob(&empty_ctx, v1::ResumeJobRequest(), &cancelled);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "job_id: required");

  auto watch = StartWatch("j-000404", 0);
  watch->Join();
  EXPECT_EQ(watch->status.error_code(), grpc::StatusCode::NOT_FOUND);
  auto future = StartWatch(id, 100);
  future->Join();
  EXPECT_EQ(future->status.error_code(), grpc::StatusCode::OUT_OF_RANGE);

  // A worker that does not start with a hello is refused.
  grpc::ClientContext worker_ctx;
  AddBearerToken(worker_ctx, WorkerToken());
  auto stream = worker_stub_->Connect(&worker_ctx);
  v1::WorkerMessage heartbeat;
  heartbeat.mutable_heartbeat();
  stream->Write(heartbeat);
  v1::ServerMessage unused;
  EXPECT_FALSE(stream->Read(&unused));
  s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("WorkerHello"));
}

TEST_F(YardServerTest, RestartKeepsTheRunningJobAndTheWatchResumes) {
  StartServer();
  auto worker = ConnectWorker();
  const std::string id = Submit();
  ASSERT_TRUE(worker->Next().has_assignment());
  ASSERT_TRUE(worker->Update(id, 1, [](auto& u) { u.mutable_started(); }));
  {  // Follow the job until RUNNING is committed (events 1..3).
    grpc::ClientContext ctx;
    AddBearerToken(ctx, AdminToken());
    v1::WatchJobRequest req;
    req.set_job_id(id);
    auto reader = jobs_->WatchJob(&ctx, req);
    v1::JobEvent e;
    while (reader->Read(&e) && e.state_change().to() != v1::RUNNING) {
    }
    EXPECT_EQ(e.sequence(), 3);
    ctx.TryCancel();
    reader->Finish();
  }

  server_->Shutdown();
  worker->stream->Finish();  // the old stream ended with the server
  server_.reset();
  StartServer();  // same state dir, new port
  EXPECT_EQ(Get(id).state(), v1::RUNNING);
  auto back = ConnectWorker({{id, 1}});
  auto watch = StartWatch(id, 3);
  ASSERT_TRUE(back->Update(id, 1, [](auto& u) { u.mutable_exited(); }));
  watch->Join();
  ASSERT_TRUE(watch->status.ok()) << watch->status.error_message();
  ASSERT_EQ(watch->events.size(), 1u);
  EXPECT_EQ(watch->events[0].sequence(), 4);
  EXPECT_EQ(watch->events[0].state_change().to(), v1::SUCCEEDED);
  EXPECT_EQ(Get(id).attempt(), 1);  // re-attached, never run twice
  back->stream->WritesDone();
  EXPECT_TRUE(back->stream->Finish().ok());
}

TEST_F(YardServerTest, ShutdownEndsLiveStreams) {
  StartServer();
  const std::string id = Submit();  // no worker: it stays queued
  auto watch = StartWatch(id, 0);
  auto worker = ConnectWorker();
  server_->Shutdown();
  watch->Join();
  EXPECT_FALSE(watch->status.ok());
  v1::ServerMessage m;
  while (worker->stream->Read(&m)) {
  }
  EXPECT_FALSE(worker->stream->Finish().ok());
}

// A download open when the server shuts down (its client not reading, so
// its next write waits) ends with an error within the server's grace for
// calls, and the shutdown completes: nothing waits on it for ever.
TEST_F(YardServerTest, ShutdownEndsOpenDownloads) {
  StartServer();
  auto worker = ConnectWorker();
  const std::string id =
      JobWithCheckpoint(*worker, std::string(4 * kCheckpointChunkBytes, 'd'));
  std::unique_ptr<v1::JobService::Stub> slow = SlowReadingJobs();
  grpc::ClientContext ctx;
  AddBearerToken(ctx, AdminToken());
  v1::DownloadCheckpointRequest req;
  req.set_job_id(id);
  auto download = slow->DownloadCheckpoint(&ctx, req);
  v1::CheckpointChunk chunk;
  ASSERT_TRUE(download->Read(&chunk));
  const absl::Time t0 = absl::Now();
  server_->Shutdown();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
  int64_t bytes = 0;
  while (download->Read(&chunk)) bytes += chunk.data().size();
  EXPECT_LT(bytes, 4 * kCheckpointChunkBytes) << "it was not sent whole";
  EXPECT_FALSE(download->Finish().ok());
}

TEST_F(YardServerTest, RefusesNonLoopbackAndASecondServerOnOneStateDir) {
  EXPECT_EQ(CheckListenAddress("0.0.0.0:7070", false, false).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(CheckListenAddress("10.1.2.3:7070", false, false).message(),
              HasSubstr("needs TLS"));
  EXPECT_EQ(CheckListenAddress("127.0.0.1", true, false).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckListenAddress("localhost:0", false, false).ok());
  EXPECT_TRUE(CheckListenAddress("[::1]:7070", false, false).ok());
  // With TLS, or when told to, any address.
  EXPECT_TRUE(CheckListenAddress("0.0.0.0:7070", true, false).ok());
  EXPECT_TRUE(CheckListenAddress("10.1.2.3:7070", false, true).ok());
  StartServer();
  YardServerOptions o;
  o.listen = "127.0.0.1:0";
  o.state_dir = dir_.File("state");
  auto second = YardServer::Start(o);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("another yard-server"));
  // Nor a second server on the first one's port (its own state dir): gRPC
  // would otherwise share the port with it (SO_REUSEPORT).
  o.listen = server_->address();
  o.state_dir = dir_.File("state2");
  auto same_port = YardServer::Start(o);
  EXPECT_EQ(same_port.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(same_port.status().message(),
              HasSubstr("cannot listen on " + server_->address()));
}

TEST_F(YardServerTest, ShutdownLetsACommitInFlightFinishAndKeepsIt) {
  HeldCommit& held = StartServerHoldingCommits();
  held.hold = true;
  grpc::Status submitted;
  v1::SubmitJobResponse response;
  std::thread submit([&] {
    grpc::ClientContext ctx;
    AddBearerToken(ctx, AdminToken());
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec();
    submitted = jobs_->SubmitJob(&ctx, req, &response);
  });
  held.in_commit.WaitForNotification();
  std::thread stop([&] { server_->Shutdown(); });
  // Shutdown removes the address file first, then turns health off and
  // waits for calls in flight; let the held commit go only then.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (std::filesystem::exists(dir_.File("state/yard-server.addr")) &&
         absl::Now() < deadline) {
    std::this_thread::yield();
  }
  held.release.Notify();
  submit.join();
  stop.join();
  ASSERT_TRUE(submitted.ok()) << submitted.error_message();
  // Acknowledged, so on disk: a fresh store over the same file has it.
  JobStoreOptions so;
  so.path = dir_.File("state/trainyard.db");
  auto store = JobStore::Open(so);
  ASSERT_TRUE(store.ok()) << store.status();
  auto job = (*store)->GetJob(response.job().id());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->job.state(), v1::QUEUED);
}

// A submission whose client gave up (its deadline passed) while the server
// was still busy is not stored: the client saw a failure, and its retry
// with the same request id makes the job once.
TEST_F(YardServerTest, ASubmitWhoseClientGaveUpStoresNothing) {
  HeldCommit& held = StartServerHoldingCommits();
  // A queue limit makes the tenant's submissions take turns: the second
  // waits behind the first's held commit.
  auto admin = v1::AdminService::NewStub(channel_);
  {
    grpc::ClientContext ctx;
    AddBearerToken(ctx, AdminToken());
    v1::SetTenantRequest req;
    req.mutable_tenant()->set_name("admin");
    req.mutable_tenant()->set_max_queued_jobs(10);
    v1::Tenant resp;
    ASSERT_TRUE(admin->SetTenant(&ctx, req, &resp).ok());
  }
  auto submit = [&](const std::string& request_id, absl::Duration deadline,
                    v1::SubmitJobResponse* response) {
    grpc::ClientContext ctx;
    AddBearerToken(ctx, AdminToken());
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec();
    req.set_request_id(request_id);
    return jobs_->SubmitJob(&ctx, req, response);
  };
  held.hold = true;
  grpc::Status first_status, late_status;
  v1::SubmitJobResponse first, late;
  std::thread a([&] { first_status = submit("a", absl::Seconds(30), &first); });
  held.in_commit.WaitForNotification();
  std::thread b(
      [&] { late_status = submit("b", absl::Milliseconds(300), &late); });
  b.join();
  EXPECT_EQ(late_status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The server's deadline is the client's timeout from when the request
  // arrived: later than the client's by the request's transit, which a
  // loaded machine stretches to milliseconds. Let it pass there too (the
  // server stores what reaches the commit before its deadline, and a
  // retry with the request id then gets it).
  absl::SleepFor(absl::Milliseconds(200));
  held.release.Notify();
  a.join();
  ASSERT_TRUE(first_status.ok()) << first_status.error_message();
  v1::SubmitJobResponse retried;
  grpc::Status retry = submit("b", absl::Seconds(30), &retried);
  ASSERT_TRUE(retry.ok()) << retry.error_message();
  EXPECT_FALSE(retried.already_existed()) << "the late try stored a job";
  grpc::ClientContext ctx;
  AddBearerToken(ctx, AdminToken());
  v1::ListJobsRequest list;
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(jobs_->ListJobs(&ctx, list, &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 2);
}

// Runs `sql` on the SQLite file at `path` (as an operator's sqlite3 would).
void Sql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK)
      << (error != nullptr ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

int64_t UserVersion(const std::string& path) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &q, nullptr),
            SQLITE_OK);
  EXPECT_EQ(sqlite3_step(q), SQLITE_ROW);
  const int64_t version = sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  sqlite3_close(db);
  return version;
}

// What `cp state/trainyard.db` of a running server copies: the file
// without its -wal, which holds nearly everything (no tables at all; a
// 0-byte file acts the same), beside the old auth.db and checkpoints. The
// server refuses to start on it, saying what happened, rather than number
// jobs from j-000001 again and let them take the old jobs' checkpoints;
// told to start anew, it numbers new jobs past the old directories.
TEST_F(YardServerTest, ANewJobStoreBesideOldStateIsRefusedUnlessAsked) {
  StartServer();
  Submit();
  server_->Shutdown();
  server_.reset();
  const std::string db = state_dir_ + "/trainyard.db";
  ASSERT_FALSE(fs::exists(db + "-wal"));
  { std::ofstream truncate(db, std::ios::trunc); }
  fs::create_directories(state_dir_ + "/checkpoints/j-000001/step-00000300");
  auto refused = YardServer::Start(Options());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("trainyard.db is not a job store yet"));
  EXPECT_THAT(refused.status().message(), HasSubstr("auth.db holds 2 tokens"));
  EXPECT_THAT(refused.status().message(),
              HasSubstr("holds 1 job directory (up to j-000001)"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--new-job-store"));
  EXPECT_EQ(ReadAll(db), "");

  // Any one of them is enough: the job directories (no auth.db)...
  fs::remove(state_dir_ + "/auth.db");
  refused = YardServer::Start(Options());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(fs::exists(state_dir_ + "/auth.db"));
  // ... and even with no trainyard.db at all, which is not created.
  fs::remove(db);
  refused = YardServer::Start(Options());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(fs::exists(db));
  // ... and the admin token file of a first start alone (auth.db too was
  // copied without its -wal), with no checkpoints yet.
  fs::remove_all(state_dir_ + "/checkpoints/j-000001");
  refused = YardServer::Start(Options());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("admin.token is there from a first start"));
  fs::create_directories(state_dir_ + "/checkpoints/j-000001/step-00000300");

  new_job_store_ = true;
  StartServer();
  EXPECT_EQ(Submit(), "j-000002");
  EXPECT_TRUE(fs::exists(state_dir_ + "/checkpoints/j-000001/step-00000300"));
}

// A store restored from a backup older than the checkpoint root beside it
// (sqlite3 .backup, or another copy) does not know the jobs created since:
// new jobs are numbered past their directories, never taking over their
// checkpoints.
TEST_F(YardServerTest, ARestoredOlderStoreNumbersNewJobsPastNewerCheckpoints) {
  StartServer();
  EXPECT_EQ(Submit(), "j-000001");
  server_->Shutdown();
  server_.reset();
  const std::string db = state_dir_ + "/trainyard.db";
  const std::string backup = ReadAll(db);  // the server stopped: all in it
  StartServer();
  EXPECT_EQ(Submit(), "j-000002");
  EXPECT_EQ(Submit(), "j-000003");
  fs::create_directories(state_dir_ + "/checkpoints/j-000003/step-00000010");
  server_->Shutdown();
  server_.reset();
  std::ofstream(db, std::ios::binary | std::ios::trunc) << backup;
  StartServer();
  EXPECT_EQ(Submit(), "j-000004");
}

// A start refused for auth.db (here not a database at all) upgrades
// nothing: the job store an older server wrote stays byte for byte as it
// was, so that server can still open it.
TEST_F(YardServerTest, AStartRefusedForAuthDbLeavesTheJobStoreAsItWas) {
  StartServer();
  Submit();
  server_->Shutdown();
  server_.reset();
  const std::string db = state_dir_ + "/trainyard.db";
  // What a version 4 server wrote.
  Sql(db,
      "DROP TABLE known_workers; DROP TABLE attempt_usage; "
      "PRAGMA user_version=4");
  ASSERT_FALSE(fs::exists(db + "-wal"));
  const std::string before = ReadAll(db);
  std::ofstream(state_dir_ + "/auth.db", std::ios::trunc)
      << "somebody's notes, not a database\n";
  auto refused = YardServer::Start(Options());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("auth.db"));
  EXPECT_EQ(ReadAll(db), before);
  EXPECT_EQ(UserVersion(db), 4);
}

TEST_F(YardServerTest, TwoServersCannotShareACheckpointRoot) {
  checkpoint_root_ = Normal(dir_.File("shared"));
  StartServer();
  YardServerOptions o = Options();
  o.state_dir = dir_.File("state2");
  auto second = YardServer::Start(o);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(),
              HasSubstr("another yard-server is using the checkpoint root " +
                        checkpoint_root_));
  EXPECT_THAT(second.status().message(), HasSubstr("state dir " + state_dir_));
  EXPECT_FALSE(fs::exists(dir_.File("state2/trainyard.db")));
  // Once the first has stopped, the second may use it.
  server_->Shutdown();
  server_.reset();
  state_dir_ = dir_.File("state2");
  StartServer();
}

// The whole state dir moved (mv, or restored at another path): each job
// keeps its checkpoints, shown where they are now, listed, and removed
// with the job.
TEST_F(YardServerTest, MovingTheStateDirKeepsEveryJobsCheckpoints) {
  StartServer();
  auto worker = ConnectWorker();
  const std::string id = Submit();
  v1::ServerMessage assigned = worker->Next();
  ASSERT_TRUE(assigned.has_assignment());
  const std::string old_dir = assigned.assignment().checkpoint_dir();
  EXPECT_EQ(old_dir, state_dir_ + "/checkpoints/" + id);
  fs::create_directories(old_dir + "/step-00000010");
  std::ofstream(old_dir + "/step-00000010/meta.json") << "{\"step\": 10}";
  std::ofstream(old_dir + "/step-00000010/model.safetensors") << "weights";
  auto watch = StartWatch(id, 0);
  ASSERT_TRUE(worker->Update(id, 1, [](auto& u) { u.mutable_started(); }));
  ASSERT_TRUE(worker->Update(id, 1, [](auto& u) { u.mutable_exited(); }));
  watch->Join();
  ASSERT_EQ(Get(id).state(), v1::SUCCEEDED);
  worker->stream->WritesDone();
  worker->stream->Finish();
  server_->Shutdown();
  server_.reset();

  state_dir_ = Normal(dir_.File("moved"));
  fs::rename(Normal(dir_.File("state")), state_dir_);
  StartServer();
  const std::string new_dir = state_dir_ + "/checkpoints/" + id;
  EXPECT_EQ(Get(id).checkpoint_dir(), new_dir);
  {
    grpc::ClientContext ctx;
    AddBearerToken(ctx, AdminToken());
    v1::ListCheckpointsRequest req;
    req.set_job_id(id);
    v1::ListCheckpointsResponse resp;
    ASSERT_TRUE(jobs_->ListCheckpoints(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.checkpoints_size(), 1);
    EXPECT_EQ(resp.checkpoints(0).step(), 10);
  }
  grpc::ClientContext ctx;
  AddBearerToken(ctx, AdminToken());
  v1::DeleteJobRequest req;
  req.set_job_id(id);
  v1::DeleteJobResponse resp;
  ASSERT_TRUE(jobs_->DeleteJob(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.deleted_checkpoint_dir(), new_dir);
  EXPECT_FALSE(fs::exists(new_dir));
  EXPECT_FALSE(fs::exists(old_dir));
}

}  // namespace
}  // namespace trainyard::server
