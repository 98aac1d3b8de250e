// A fake yard-server for the worker's tests: a WorkerService on
// 127.0.0.1:PORT that records every WorkerMessage (with the number of the
// stream it came on), answers each hello with a HelloAck, and sends what the
// test queues. FakeServerHub holds the state, so a server can be killed and
// a new one started on the same port ("server restart") with the record
// intact. Like yard-server it acknowledges (unless set_acks(false)): HelloAck
// says so, and every heartbeat is answered with a HeartbeatAck carrying the
// highest report sequence received per attempt; the switches below withhold
// parts of that to play a server that lost track of the worker.
// Thread-safe. Test-only code.
#ifndef TRAINYARD_WORKER_FAKE_WORKER_SERVICE_H_
#define TRAINYARD_WORKER_FAKE_WORKER_SERVICE_H_

#include <grpcpp/server.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "trainyard/v1/worker.grpc.pb.h"

namespace trainyard::worker::testing {

struct Received {
  int stream;  // 1 for the first Connect, 2 for the next, ...
  trainyard::v1::WorkerMessage message;
};

class FakeServerHub {
 public:
  using Predicate = std::function<bool(const std::vector<Received>&)>;

  explicit FakeServerHub(int heartbeat_interval_ms = 50)
      : heartbeat_interval_ms_(heartbeat_interval_ms) {}

  // Answer heartbeats and acknowledge reports (on by default).
  void set_acks(bool on);
  // The lease told in HelloAck (default 2 s).
  void set_lease_ms(int lease_ms);
  // Leave reports unacknowledged (heartbeats are still answered).
  void set_ack_reports(bool on);
  // Answer no heartbeat at all (a server that no longer hears the worker).
  void set_silent(bool on);
  // Send no HelloAck (a connection that hangs).
  void set_answer_hello(bool on);
  // End every stream at once, before reading anything, with UNAUTHENTICATED
  // (a server that refuses the worker's credentials).
  void set_refuse(bool on);
  bool refuse();

  // Sends `message` on the current stream, or on the next one if none is
  // open.
  void Send(trainyard::v1::ServerMessage message);
  bool WaitFor(const Predicate& pred,
               absl::Duration timeout = absl::Seconds(20));
  std::vector<Received> received();
  int streams();

  // Used by the service.
  int OpenStream();
  void CloseStream(int stream);
  void Record(int stream, trainyard::v1::WorkerMessage message);
  // Blocks until a message for `stream` is queued (true) or it closed.
  bool NextOutgoing(int stream, trainyard::v1::ServerMessage& out);
  int heartbeat_interval_ms() const { return heartbeat_interval_ms_; }
  // The HelloAck, or nothing when set_answer_hello(false).
  bool MakeHelloAck(trainyard::v1::ServerMessage& ack);

 private:
  const int heartbeat_interval_ms_;
  absl::Mutex mu_;
  std::vector<Received> received_ ABSL_GUARDED_BY(mu_);
  std::deque<trainyard::v1::ServerMessage> outbox_ ABSL_GUARDED_BY(mu_);
  bool acks_ ABSL_GUARDED_BY(mu_) = true;
  int lease_ms_ ABSL_GUARDED_BY(mu_) = 2000;
  bool ack_reports_ ABSL_GUARDED_BY(mu_) = true;
  bool silent_ ABSL_GUARDED_BY(mu_) = false;
  bool answer_hello_ ABSL_GUARDED_BY(mu_) = true;
  bool refuse_ ABSL_GUARDED_BY(mu_) = false;
  // Highest sequence received per (job, attempt), not yet acknowledged.
  std::map<std::pair<std::string, int32_t>, int64_t> to_ack_
      ABSL_GUARDED_BY(mu_);
  int streams_ ABSL_GUARDED_BY(mu_) = 0;
  int open_stream_ ABSL_GUARDED_BY(mu_) = 0;  // 0: none
};

class FakeServer {
 public:
  // Serves on 127.0.0.1:`port` (0 picks one). Null if it cannot bind.
  static std::unique_ptr<FakeServer> Start(FakeServerHub& hub, int port = 0);
  // Kill() if still running.
  ~FakeServer();

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // Ends every stream at once and stops serving, like a crashed server.
  void Kill();

 private:
  FakeServer() = default;
  std::unique_ptr<trainyard::v1::WorkerService::Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// Message predicates for WaitFor.
bool HasHello(const std::vector<Received>& r, int stream);
int CountHeartbeats(const std::vector<Received>& r, int stream);
// Index in `r` of the first update of `kind` for the attempt, or -1.
int FindUpdate(const std::vector<Received>& r, const std::string& job_id,
               int attempt, trainyard::v1::JobUpdate::UpdateCase kind);

}  // namespace trainyard::worker::testing

#endif  // TRAINYARD_WORKER_FAKE_WORKER_SERVICE_H_
