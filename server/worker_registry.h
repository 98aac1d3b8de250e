// WorkerRegistry: the live view of workers — which are connected, their
// capacity (from their hello), their leases, and the link to each. It holds
// no job state (the JobStore does); what a worker is running is derived from
// the store when needed.
//
// Each heartbeat's device figures (memory in use, utilisation, temperature,
// power) are kept with the worker until the next one, for ListWorkers.
//
// Drains: a worker is DRAINING, and takes no assignments, while it shuts
// itself down (MarkDraining, for its current session) or while an
// administrator drains it (SetDrain; kept across its sessions until
// cleared). The registry only records drains; WorkerDrains (worker_drains.h)
// keeps them in the store and moves the jobs.
//
// Leases: every message from a worker's current session renews its lease
// for `lease`. A worker whose lease runs out is declared LOST by
// ExpireLeases(); a worker whose stream merely ended keeps its lease, so it
// can reconnect and re-attach its running jobs. Workers known only from the
// store after a server restart (JobStore::ListKnownWorkers, and those its
// jobs are held by) get a fresh lease from the registry's start: those not
// back by then are LOST, listed until they return or are forgotten.
//
// Held time: an attempt on a worker the server no longer hears (lost, or
// not back since a server restart) is charged until the worker was last
// heard from plus the lease, since a worker cut off stops its jobs within
// its lease (HeldUntil); time the server itself was down is not counted
// against a worker that never came back.
// Safe for concurrent use.
#ifndef TRAINYARD_SERVER_WORKER_REGISTRY_H_
#define TRAINYARD_SERVER_WORKER_REGISTRY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/worker_link.h"
#include "trainyard/v1/cluster.pb.h"
#include "trainyard/v1/worker.pb.h"

namespace trainyard::server {

// A copy of what the registry knows about one worker.
struct WorkerStatus {
  std::string id;
  // Its latest hello; for a recovered worker not yet back, the one the
  // store kept (empty when only its jobs named it).
  v1::WorkerHello hello;
  // The live figures of its devices from its latest heartbeat, by device
  // index (only devices of the hello); empty until the first heartbeat of
  // the current session.
  std::map<int32_t, v1::Device> device_figures;
  v1::WorkerState state = v1::WORKER_READY;
  bool connected = false;    // a stream is open
  bool schedulable = false;  // connected, re-attached, not lost or draining
  std::optional<v1::WorkerDrain> drain;  // an administrator drains it
  absl::Time connect_time = absl::InfinitePast();
  absl::Time last_heartbeat = absl::InfinitePast();
  absl::Time lease_deadline = absl::InfinitePast();
};

// NOT_FOUND naming a worker the server does not know.
absl::Status UnknownWorkerError(const std::string& worker_id);

class WorkerRegistry {
 public:
  WorkerRegistry(Clock* clock, absl::Duration lease);

  absl::Duration lease() const { return lease_; }

  // A worker the store knows (its last `hello`, or empty when only jobs
  // held there name it), before it reconnects after a server restart: it
  // gets a fresh lease from now, or is LOST at once when it was declared
  // lost before. `last_heard`: the latest the previous server can have
  // heard from it (JobStore::LastAlive), InfinitePast when not known. No-op
  // for a worker the registry knows.
  void AddRecovered(const std::string& worker_id, v1::WorkerHello hello = {},
                    bool lost = false,
                    absl::Time last_heard = absl::InfinitePast());

  // A worker opened a stream and said hello. Closes an older link of the
  // same worker process (a reconnect: same instance_id). Returns the new
  // session number; ALREADY_EXISTS, changing nothing, while another
  // process (another instance_id) is connected with the same worker id.
  // The worker is not schedulable until MarkReady (its running jobs are
  // re-attached first).
  absl::StatusOr<int64_t> Attach(const v1::WorkerHello& hello,
                                 std::shared_ptr<WorkerLink> link);
  void MarkReady(const std::string& worker_id, int64_t session);
  // The worker said it is shutting down: DRAINING, no more assignments
  // (until it connects again).
  void MarkDraining(const std::string& worker_id, int64_t session);
  // An administrator drains the worker (a value) or no longer does
  // (nullopt). May name a worker not yet known (one that has not
  // reconnected since a server restart): it applies once it attaches.
  void SetDrain(const std::string& worker_id,
                std::optional<v1::WorkerDrain> drain);
  // Renews the lease. False when `session` is no longer the worker's
  // current one (replaced, or the worker was declared lost): its stream
  // should end.
  bool Renew(const std::string& worker_id, int64_t session);
  // Keeps the devices' live figures from a heartbeat of the worker's
  // current session; figures for devices its hello did not list are
  // dropped.
  void RecordDeviceFigures(
      const std::string& worker_id, int64_t session,
      const google::protobuf::RepeatedPtrField<v1::Device>& figures);
  // The session's stream ended; the lease keeps running. False, changing
  // nothing, when `session` is no longer the worker's current one.
  bool Detach(const std::string& worker_id, int64_t session);

  // Declares every worker whose lease has run out LOST, closes its link,
  // and returns their ids (only newly lost ones). A worker that was
  // shutting down (MarkDraining) and whose stream ended is forgotten
  // instead: it left.
  std::vector<std::string> ExpireLeases();

  // Forgets a LOST worker, or a drained one not back since the server
  // started: its entry and its drain go. NOT_FOUND when unknown;
  // FAILED_PRECONDITION for any other worker (its lease still runs).
  absl::Status Forget(const std::string& worker_id);
  // What Forget would answer now, forgetting nothing.
  absl::Status CheckForgettable(const std::string& worker_id) const;

  // Queues `message` on the worker's link; false when it is not connected.
  // Assignments go only to schedulable workers (`require_ready`).
  bool Send(const std::string& worker_id, const v1::ServerMessage& message,
            bool require_ready = false);

  std::vector<WorkerStatus> List() const;  // ordered by id
  std::optional<WorkerStatus> Find(const std::string& worker_id) const;
  // Whether the worker attached or was recovered since the registry
  // started, or is drained (it may not be back yet).
  bool Knows(const std::string& worker_id) const;
  // The earliest lease deadline of a worker not yet lost, if any.
  std::optional<absl::Time> NextLeaseDeadline() const;
  // Until when a job's attempt on the worker counts as holding it: now
  // while the server hears the worker; for one it does not (lost, or not
  // back since a server restart) when it was last heard from plus the
  // lease, when the worker has stopped its jobs, never later than now. Now
  // for a worker not known, or recovered with no time it was last heard.
  // With `job_id` and `attempt`: no later than when the worker's latest
  // hello said that attempt ended (RunningJobRef.exit_time; its exit
  // report follows the hello).
  absl::Time HeldUntil(const std::string& worker_id,
                       const std::string& job_id = "",
                       int32_t attempt = 0) const;

  // Closes every link (server shutdown).
  void CloseAll(const absl::Status& status);

 private:
  struct Entry {
    WorkerStatus status;
    int64_t session = 0;
    std::shared_ptr<WorkerLink> link;
    bool reattached = false;     // MarkReady in this session
    bool shutting_down = false;  // MarkDraining in this session
    // Its last message; for a recovered worker, the latest the previous
    // server can have heard from it (InfinitePast: not known).
    absl::Time last_heard = absl::InfinitePast();
    // The attempts its latest hello listed as ended, their exit to come:
    // when they ended.
    std::map<std::pair<std::string, int32_t>, absl::Time> ended;
  };

  absl::Status Forgettable(const std::string& worker_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Derives status.state (unless LOST), status.schedulable and
  // status.drain from the entry's flags and drains_.
  void Settle(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  const absl::Duration lease_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> workers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::WorkerDrain> drains_ ABSL_GUARDED_BY(mu_);
  int64_t next_session_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_WORKER_REGISTRY_H_
