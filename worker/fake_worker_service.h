// A fake yard-server for the worker's tests: a WorkerService on
// 127.0.0.1:PORT that records every WorkerMessage (with the number of the
// stream it came on), answers each hello with a HelloAck, and sends what the
// test queues. FakeServerHub holds the state, so a server can be killed and
// a new one started on the same port ("server restart") with the record
// intact. Thread-safe. Test-only code.
#ifndef TRAINYARD_WORKER_FAKE_WORKER_SERVICE_H_
#define TRAINYARD_WORKER_FAKE_WORKER_SERVICE_H_

#include <grpcpp/server.h>

#include <deque>
#include <functional>
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

 private:
  const int heartbeat_interval_ms_;
  absl::Mutex mu_;
  std::vector<Received> received_ ABSL_GUARDED_BY(mu_);
  std::deque<trainyard::v1::ServerMessage> outbox_ ABSL_GUARDED_BY(mu_);
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
