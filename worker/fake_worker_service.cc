#include "worker/fake_worker_service.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace trainyard::worker::testing {
namespace {

using trainyard::v1::ServerMessage;
using trainyard::v1::WorkerMessage;

class FakeWorkerService final : public trainyard::v1::WorkerService::Service {
 public:
  explicit FakeWorkerService(FakeServerHub& hub) : hub_(hub) {}

  grpc::Status Connect(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<ServerMessage, WorkerMessage>* stream) override {
    if (hub_.refuse()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bad join token");
    }
    WorkerMessage first;
    if (!stream->Read(&first)) return grpc::Status::OK;
    const int id = hub_.OpenStream();
    const bool is_hello = first.has_hello();
    hub_.Record(id, std::move(first));
    if (!is_hello) {
      hub_.CloseStream(id);
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "hello first");
    }
    ServerMessage ack;
    if (hub_.MakeHelloAck(ack)) stream->Write(ack);
    std::thread writer([&] {
      ServerMessage out;
      while (hub_.NextOutgoing(id, out)) {
        if (!stream->Write(out)) break;
      }
    });
    WorkerMessage in;
    while (stream->Read(&in)) hub_.Record(id, in);
    hub_.CloseStream(id);
    writer.join();
    return grpc::Status::OK;
  }

 private:
  FakeServerHub& hub_;
};

}  // namespace

void FakeServerHub::set_acks(bool on) {
  absl::MutexLock lock(&mu_);
  acks_ = on;
}

void FakeServerHub::set_lease_ms(int lease_ms) {
  absl::MutexLock lock(&mu_);
  lease_ms_ = lease_ms;
}

void FakeServerHub::set_ack_reports(bool on) {
  absl::MutexLock lock(&mu_);
  ack_reports_ = on;
}

void FakeServerHub::set_silent(bool on) {
  absl::MutexLock lock(&mu_);
  silent_ = on;
}

void FakeServerHub::set_answer_hello(bool on) {
  absl::MutexLock lock(&mu_);
  answer_hello_ = on;
}

void FakeServerHub::set_refuse(bool on) {
  absl::MutexLock lock(&mu_);
  refuse_ = on;
}

bool FakeServerHub::refuse() {
  absl::MutexLock lock(&mu_);
  return refuse_;
}

bool FakeServerHub::MakeHelloAck(ServerMessage& ack) {
  absl::MutexLock lock(&mu_);
  if (!answer_hello_) return false;
  ack.mutable_hello_ack()->set_heartbeat_interval_ms(heartbeat_interval_ms_);
  ack.mutable_hello_ack()->set_lease_ms(lease_ms_);
  ack.mutable_hello_ack()->set_acks_heartbeats(acks_);
  return true;
}

void FakeServerHub::Send(ServerMessage message) {
  absl::MutexLock lock(&mu_);
  outbox_.push_back(std::move(message));
}

bool FakeServerHub::WaitFor(const Predicate& pred, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto holds = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return pred(received_);
  };
  return mu_.AwaitWithTimeout(absl::Condition(&holds), timeout);
}

std::vector<Received> FakeServerHub::received() {
  absl::MutexLock lock(&mu_);
  return received_;
}

int FakeServerHub::streams() {
  absl::MutexLock lock(&mu_);
  return streams_;
}

int FakeServerHub::OpenStream() {
  absl::MutexLock lock(&mu_);
  open_stream_ = ++streams_;
  return open_stream_;
}

void FakeServerHub::CloseStream(int stream) {
  absl::MutexLock lock(&mu_);
  if (open_stream_ == stream) open_stream_ = 0;
}

void FakeServerHub::Record(int stream, WorkerMessage message) {
  absl::MutexLock lock(&mu_);
  if (message.has_update() && message.update().sequence() > 0) {
    int64_t& seq =
        to_ack_[{message.update().job_id(), message.update().attempt()}];
    seq = std::max(seq, message.update().sequence());
  }
  if (acks_ && !silent_ && message.has_heartbeat()) {
    // Queued behind what the test sends; goes out on this open stream.
    ServerMessage& answer = outbox_.emplace_back();
    auto* ack = answer.mutable_heartbeat_ack();
    ack->set_heartbeat_sequence(message.heartbeat().sequence());
    if (ack_reports_) {
      for (const auto& [key, seq] : to_ack_) {
        auto* r = ack->add_reports();
        r->set_job_id(key.first);
        r->set_attempt(key.second);
        r->set_sequence(seq);
      }
      to_ack_.clear();
    }
  }
  received_.push_back(Received{stream, std::move(message)});
}

bool FakeServerHub::NextOutgoing(int stream, ServerMessage& out) {
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return open_stream_ != stream || !outbox_.empty();
  };
  mu_.Await(absl::Condition(&ready));
  if (open_stream_ != stream) return false;
  out = std::move(outbox_.front());
  outbox_.pop_front();
  return true;
}

std::unique_ptr<FakeServer> FakeServer::Start(FakeServerHub& hub, int port) {
  std::unique_ptr<FakeServer> server(new FakeServer());
  server->service_ = std::make_unique<FakeWorkerService>(hub);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(port),
                           grpc::InsecureServerCredentials(), &server->port_);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) return nullptr;
  return server;
}

FakeServer::~FakeServer() { Kill(); }

void FakeServer::Kill() {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
  server_.reset();
}

bool HasHello(const std::vector<Received>& r, int stream) {
  for (const Received& m : r) {
    if (m.stream == stream && m.message.has_hello()) return true;
  }
  return false;
}

int CountHeartbeats(const std::vector<Received>& r, int stream) {
  int n = 0;
  for (const Received& m : r)
    n += m.stream == stream && m.message.has_heartbeat();
  return n;
}

int FindUpdate(const std::vector<Received>& r, const std::string& job_id,
               int attempt, trainyard::v1::JobUpdate::UpdateCase kind) {
  for (size_t i = 0; i < r.size(); ++i) {
    const auto& m = r[i].message;
    if (m.has_update() && m.update().job_id() == job_id &&
        m.update().attempt() == attempt && m.update().update_case() == kind) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

}  // namespace trainyard::worker::testing
