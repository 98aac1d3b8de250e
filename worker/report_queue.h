// ReportQueue: the job reports on their way to the server, oldest first.
// It numbers each report of an attempt (JobUpdate.sequence 1, 2, ...) and
// keeps it after it was sent, until the server acknowledges it; a new stream
// Rewind()s, so every unacknowledged report is sent again, in order, and the
// server drops the ones it already applied (worker.proto). Log bytes are not
// numbered: they leave the queue once sent (the log stays complete on the
// worker's disk).
//
// It is bounded (entries and bytes); when full, what can be lost without
// losing a job's outcome goes first: progress events and log chunks.
// Started, exits, checkpoints, evals and the other trainer events are always
// kept, even over the bound: there are few of them and the server needs
// every one.
//
// Not thread-safe: ServerLink guards it with its own mutex.
#ifndef TRAINYARD_WORKER_REPORT_QUEUE_H_
#define TRAINYARD_WORKER_REPORT_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainyard/v1/cluster.pb.h"
#include "trainyard/v1/worker.pb.h"

namespace trainyard::worker {

struct ReportQueueLimits {
  size_t max_entries = 10'000;
  size_t max_bytes = 16 << 20;
};

class ReportQueue {
 public:
  explicit ReportQueue(ReportQueueLimits limits = {}) : limits_(limits) {}

  // True for reports that may be dropped when the queue is full.
  static bool IsDroppable(const trainyard::v1::JobUpdate& update);

  // Numbers `update` (unless it is log bytes) and appends it. When full, a
  // droppable update is dropped, and a kept one evicts the oldest droppable
  // entry if there is one.
  void Push(trainyard::v1::JobUpdate update);

  // The oldest report not sent yet. With `keep`, a numbered report stays
  // until acknowledged; without (a server that sends no acks) it leaves, as
  // log bytes always do.
  std::optional<trainyard::v1::JobUpdate> Next(bool keep);
  // True when Next(keep) keeps `update` (it is sent again after Rewind).
  static bool Kept(const trainyard::v1::JobUpdate& update, bool keep) {
    return keep && update.sequence() > 0;
  }
  // Puts back, first in line, a report that left in Next() but could not be
  // written.
  void Unsend(trainyard::v1::JobUpdate update);
  // A new stream: every report kept is unsent again.
  void Rewind();
  // The server processed the attempt's reports up to `sequence`.
  void Ack(const std::string& job_id, int32_t attempt, int64_t sequence);

  // Attempts whose JobExited is still here (unsent or unacknowledged): they
  // count as running until the server has heard of their end, each with
  // its exit_time (RunningJobRef.exit_time: ended, the report to come).
  std::vector<trainyard::v1::RunningJobRef> PendingExits() const;

  bool has_unsent() const { return sent_ < entries_.size(); }
  size_t unsent() const { return entries_.size() - sent_; }
  bool empty() const { return entries_.empty(); }
  // Reports held: unsent and unacknowledged.
  size_t size() const { return entries_.size(); }
  size_t bytes() const { return bytes_; }
  uint64_t dropped() const { return dropped_; }

 private:
  using Key = std::pair<std::string, int32_t>;
  struct Entry {
    trainyard::v1::JobUpdate update;
    size_t bytes;
  };
  bool Full() const;
  void Erase(size_t index);

  ReportQueueLimits limits_;
  // entries_[0, sent_) were sent and await an ack; the rest are unsent.
  std::deque<Entry> entries_;
  size_t sent_ = 0;
  size_t bytes_ = 0;
  uint64_t dropped_ = 0;
  // The last sequence given to each attempt still reporting; an attempt
  // leaves once its exit is acknowledged (its last report).
  std::map<Key, int64_t> last_sequence_;
};

}  // namespace trainyard::worker

#endif  // TRAINYARD_WORKER_REPORT_QUEUE_H_
