// ServerContact: when the server last heard this worker, as far as the
// worker can tell, and so when the server's lease on it runs out at the
// earliest. The server renews the lease whenever a message of the worker
// arrives and answers each heartbeat; an answer to the heartbeat sent at T
// proves the server renewed the lease at T or later, so the lease lasts at
// least until T + lease. The worker's deadline is that, less a margin (one
// heartbeat interval, at most a quarter of the lease) for the time it takes
// to stop its jobs: they are gone before the server can re-queue them.
//
// Not thread-safe: ServerLink guards it with its own mutex.
#ifndef TRAINYARD_WORKER_SERVER_CONTACT_H_
#define TRAINYARD_WORKER_SERVER_CONTACT_H_

#include <cstdint>
#include <deque>
#include <utility>

#include "absl/time/time.h"

namespace trainyard::worker {

class ServerContact {
 public:
  // The server answered the hello sent at `hello_sent`, with its lease and
  // heartbeat interval. Arms the deadline (again, after Expire).
  void HelloAnswered(absl::Time hello_sent, absl::Duration lease,
                     absl::Duration heartbeat_interval);
  // A new stream: heartbeats sent on the old one will not be answered.
  void NewStream() { in_flight_.clear(); }
  void HeartbeatSent(int64_t sequence, absl::Time sent);
  // The answer to heartbeat `sequence` (answers come in order).
  void HeartbeatAnswered(int64_t sequence);
  // The deadline passed and the worker acted on it: disarmed until the
  // next answered hello.
  void Expire() { armed_ = false; }

  // InfiniteFuture when not armed (no contact yet, or expired).
  absl::Time Deadline() const;
  bool armed() const { return armed_; }

 private:
  bool armed_ = false;
  absl::Time heard_ = absl::InfinitePast();  // send time of the last answered
  absl::Duration lease_;
  absl::Duration margin_;
  std::deque<std::pair<int64_t, absl::Time>> in_flight_;  // sequence, sent
};

}  // namespace trainyard::worker

#endif  // TRAINYARD_WORKER_SERVER_CONTACT_H_
