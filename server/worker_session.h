// WorkerSession: the server's side of one worker's Connect stream, without
// gRPC: it takes the worker's messages in order and answers through a
// WorkerLink. The protocol (see trainyard/v1/worker.proto):
//
//   - The first message is a WorkerHello (else INVALID_ARGUMENT). The server
//     answers HelloAck, then re-attaches the jobs the hello lists as running:
//     the job's current attempt on this worker keeps running (a SCHEDULED one
//     becomes RUNNING); anything else (a finished job, a superseded attempt,
//     an unknown job) gets StopAttempt. Only then may assignments go to it.
//   - Jobs the store places on this worker but the hello does not list either
//     exited while the worker was cut off (their exit reports follow the
//     hello) or were lost with the worker or its stream. They are settled at
//     the first heartbeat, after those reports: any still held and still not
//     running there go back to the queue.
//   - Heartbeats and every other message renew the lease. A heartbeat that
//     lists a stale attempt gets StopAttempt. Its device figures are kept
//     in the registry (ListWorkers shows them).
//   - Job updates are fenced by attempt (JobLifecycle::OnUpdate); a stale
//     one is answered with StopAttempt (once per attempt and session).
//     A resent update the store already holds (by its sequence number) is
//     dropped there. An exit with lost_server (the worker stopped the job
//     because it could no longer reach the server) re-queues the job.
//   - Every heartbeat is answered with a HeartbeatAck acknowledging, per
//     attempt, the highest sequence processed since the last one (applied,
//     stale or duplicate alike: the worker may forget them). FlushAcks()
//     sends what is left when the worker closes the stream.
//
// Not thread-safe (but for Heard): one session per stream, driven by that
// stream's reader.
#ifndef TRAINYARD_SERVER_WORKER_SESSION_H_
#define TRAINYARD_SERVER_WORKER_SESSION_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/job_lifecycle.h"
#include "server/job_store.h"
#include "server/worker_link.h"
#include "server/worker_registry.h"
#include "trainyard/v1/worker.pb.h"

namespace trainyard::server {

// The longest worker id a worker may take (yard-worker --name).
inline constexpr int32_t kMaxWorkerIdLength = 128;

// A worker id as `field` of a request carries it: 1 to kMaxWorkerIdLength
// characters of [A-Za-z0-9._-]; otherwise INVALID_ARGUMENT about `field`
// (a long or odd id is not echoed whole).
absl::Status CheckWorkerId(absl::string_view field, std::string_view id);

struct WorkerSessionOptions {
  absl::Duration heartbeat_interval = absl::Seconds(1);
  int32_t max_cpu_slots = 4096;
  int32_t max_devices = 1024;
};

class WorkerSession {
 public:
  WorkerSession(JobStore* store, WorkerRegistry* workers,
                JobLifecycle* lifecycle, std::shared_ptr<WorkerLink> link,
                WorkerSessionOptions options,
                std::function<void()> wake_scheduler);
  ~WorkerSession();

  // Handles one message. A non-OK status ends the stream with it.
  absl::Status Handle(const v1::WorkerMessage& message);
  // A message came in, not yet handled: renews the worker's lease (once
  // its hello was handled), so that while handling waits (the store slow
  // to commit, the messages of other workers first) a worker that keeps
  // talking is not taken for lost. May run on any thread, beside the rest.
  void Heard();
  // The worker closed its side: acknowledge what was processed since the
  // last heartbeat.
  void FlushAcks();
  // The stream ended (idempotent; also done by the destructor).
  void Close();

  const std::string& worker_id() const { return worker_id_; }

 private:
  // Drops the store's record of a worker that shut down and left.
  void ForgetLeftWorker();
  absl::Status OnHello(const v1::WorkerHello& hello);
  absl::Status Reattach(const v1::WorkerHello& hello);
  absl::Status OnHeartbeat(const v1::Heartbeat& heartbeat);
  absl::Status OnUpdate(const v1::JobUpdate& update);
  absl::Status OnLostServerExit(const v1::JobUpdate& update);
  absl::Status ApplyUpdate(const v1::JobUpdate& update);
  void SendAcks(int64_t heartbeat_sequence);
  absl::Status RenewLease();
  void Stop(const std::string& job_id, int32_t attempt);

  JobStore* const store_;
  WorkerRegistry* const workers_;
  JobLifecycle* const lifecycle_;
  const std::shared_ptr<WorkerLink> link_;
  const WorkerSessionOptions options_;
  const std::function<void()> wake_scheduler_;

  std::string worker_id_;  // empty until the hello
  int64_t session_ = 0;
  absl::Mutex heard_mu_;
  // worker_id_ and session_ for Heard (set with them).
  std::pair<std::string, int64_t> heard_ ABSL_GUARDED_BY(heard_mu_);
  bool closed_ = false;
  bool said_draining_ = false;  // a heartbeat said it is shutting down
  // Held by this worker in the store but missing from its hello; settled
  // at the first heartbeat, each attempt ended when the worker's previous
  // session held it until (WorkerRegistry::HeldUntil before the hello).
  std::vector<v1::RunningJobRef> unconfirmed_;
  absl::Time unconfirmed_until_ = absl::InfiniteFuture();
  std::set<std::pair<std::string, int32_t>> stopped_;
  // Highest sequence processed per attempt since the last HeartbeatAck.
  std::map<std::pair<std::string, int32_t>, int64_t> to_ack_;
  // Attempts whose exit this session processed: a heartbeat may still list
  // them until the worker hears the ack, and they need no StopAttempt.
  std::set<std::pair<std::string, int32_t>> exited_;
};

// INVALID_ARGUMENT naming the field when a hello is malformed.
absl::Status ValidateHello(const v1::WorkerHello& hello,
                           const WorkerSessionOptions& options);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_WORKER_SESSION_H_
