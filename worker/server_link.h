// ServerLink: the worker's end of WorkerService.Connect. It keeps one stream
// open to the server, reconnecting with capped exponential backoff whenever
// the stream fails (server restart, network), and on every (re)connect sends
// a WorkerHello listing the attempts still running, then (once the server
// answered) the reports queued meanwhile, then a Heartbeat every
// HelloAck.heartbeat_interval_ms with the running attempts and the
// devices' live figures. Server messages other than HelloAck and
// HeartbeatAck go to the Delegate on the link's reader thread.
//
// Reports are kept until the server acknowledges them (HeartbeatAck) and
// sent again on the next stream if it broke first (ReportQueue); the server
// drops the duplicates by their sequence numbers (see worker.proto).
//
// A watchdog thread keeps two deadlines. A stream whose hello gets no
// answer within the lease (or hello_timeout before the first) is cancelled
// and opened again: a dropped connection can hang without failing. And when
// no heartbeat was answered for the server's lease (ServerContact), the
// server is about to declare this worker lost and re-queue its jobs: the
// link cancels the stream and tells the Delegate (OnLeaseExpired), which
// stops the jobs so they never run twice.
//
// Report() and Shutdown() are thread-safe. The Delegate's methods are called
// without any ServerLink lock held, so they may call Report().
#ifndef TRAINYARD_WORKER_SERVER_LINK_H_
#define TRAINYARD_WORKER_SERVER_LINK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc_credentials.h"
#include "trainyard/v1/worker.grpc.pb.h"
#include "trainyard/v1/worker.pb.h"
#include "worker/report_queue.h"
#include "worker/server_contact.h"

namespace trainyard::worker {

struct ServerLinkOptions {
  std::string server_address;  // HOST:PORT
  std::string token;           // the worker join token (bearer)
  ClientTlsFiles tls;          // TLS/mTLS to the server; empty: plaintext
  absl::Duration initial_backoff = absl::Milliseconds(100);
  // Small enough that a worker is back within a second of a restarted
  // server serving again, well inside its lease.
  absl::Duration max_backoff = absl::Seconds(1);
  // A connection the server accepted starts the backoff over only if it
  // lasted this long.
  absl::Duration stable_connection = absl::Seconds(10);
  // Until the server's HelloAck says otherwise.
  absl::Duration default_heartbeat_interval = absl::Seconds(1);
  // How long a new stream may wait for its HelloAck before the server's
  // lease is known; afterwards the lease is the limit.
  absl::Duration hello_timeout = absl::Seconds(10);
  ReportQueueLimits queue_limits;
};

class ServerLink {
 public:
  class Delegate {
   public:
    virtual ~Delegate() = default;
    // Who this worker is; ServerLink fills in `running`.
    virtual trainyard::v1::WorkerHello Hello() = 0;
    // The attempts whose processes still run (or whose exit is being
    // reported right now).
    virtual std::vector<trainyard::v1::RunningJobRef> RunningJobs() = 0;
    // The devices' live figures for the next heartbeat. Called on the
    // writer thread before each heartbeat: it must return at once (a
    // cached reading), or the heartbeat is late.
    virtual std::vector<trainyard::v1::Device> DeviceFigures() { return {}; }
    // Assignment, Cancel, StopAttempt: on the reader thread, in order.
    virtual void OnServerMessage(const trainyard::v1::ServerMessage& m) = 0;
    // No heartbeat was answered for the server's lease: the server declares
    // this worker lost and re-queues its jobs. On the watchdog thread, once
    // per loss of contact.
    virtual void OnLeaseExpired() {}
    // The server heard this worker again: its lease (as the worker counts
    // it, with a margin) now runs out at `deadline`. On the reader thread,
    // after each answered hello and heartbeat.
    virtual void OnLeaseRenewed(absl::Time /*deadline*/) {}
    // A stream ended before the server answered its hello: the server could
    // not be reached, or refused this worker (UNAUTHENTICATED,
    // PERMISSION_DENIED). On the link's thread, once per try.
    virtual void OnConnectFailed(const absl::Status& /*status*/) {}
  };

  // `delegate` must outlive the link.
  ServerLink(ServerLinkOptions options, Delegate* delegate);
  // Shutdown(zero) if not done yet.
  ~ServerLink();
  ServerLink(const ServerLink&) = delete;
  ServerLink& operator=(const ServerLink&) = delete;

  // Starts connecting in the background.
  void Start();
  // Queues a report; sent in order after the current or next hello.
  void Report(trainyard::v1::JobUpdate update);
  // Stops reconnecting. If connected, first sends what is queued (for at
  // most `flush_timeout`) and closes the stream. Returns when the link's
  // threads are gone.
  void Shutdown(absl::Duration flush_timeout);
  // From now on heartbeats say the worker is draining (the server assigns
  // it nothing more); sends one at once and waits, up to `timeout`, until
  // it is written, so the server hears it before the jobs' exits.
  void SetDraining(absl::Duration timeout);

  // A HelloAck arrived on the current stream.
  bool connected() const;
  // Reports held: not sent yet, or not acknowledged yet.
  size_t queued() const;

 private:
  using Stream =
      grpc::ClientReaderWriterInterface<trainyard::v1::WorkerMessage,
                                        trainyard::v1::ServerMessage>;

  void Loop();
  // One stream from connect to failure or shutdown. `acked` tells whether
  // the server answered the hello (then, if it lasted, the backoff starts
  // over).
  absl::Status RunConnection(bool& acked);
  // Writes queued reports and heartbeats until the stream breaks (false) or
  // the link is shut down and flushed (true).
  bool WriteLoop(Stream& stream);
  void ReadLoop(Stream& stream);
  void OnHelloAck(const trainyard::v1::HelloAck& ack);
  void OnHeartbeatAck(const trainyard::v1::HeartbeatAck& ack);
  // Waits for the HelloAck before the first report: whether the server
  // acknowledges reports decides whether they are kept once sent.
  bool AwaitHelloAck();
  bool WriteHeartbeat(Stream& stream);
  std::vector<trainyard::v1::RunningJobRef> Running();
  void WaitBackoff(absl::Duration backoff);
  void Watch();

  const ServerLinkOptions options_;
  Delegate* const delegate_;
  std::thread thread_;
  std::thread watchdog_;

  mutable absl::Mutex mu_;
  ReportQueue queue_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_sent_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time flush_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool loop_done_ ABSL_GUARDED_BY(mu_) = false;
  // The current stream: its context (to cancel it), whether the server
  // acked the hello, whether it broke, whether its reader has finished.
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool acked_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool reader_done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_);
  // The current stream's server acknowledges reports (HelloAck).
  bool server_acks_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time hello_sent_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // The current stream is cancelled if no HelloAck came by then.
  absl::Time hello_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Duration lease_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  int64_t heartbeats_sent_ ABSL_GUARDED_BY(mu_) = 0;  // on this stream
  ServerContact contact_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard::worker

#endif  // TRAINYARD_WORKER_SERVER_LINK_H_
