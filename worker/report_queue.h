// ReportQueue: the job reports waiting to be sent to the server, oldest
// first. It is bounded (entries and bytes); when full, what can be lost
// without losing a job's outcome goes first: progress events and log chunks
// (the log stays complete on the worker's disk). Started, exits, checkpoints,
// evals and the other trainer events are always kept, even over the bound:
// there are few of them and the server needs every one.
//
// Not thread-safe: ServerLink guards it with its own mutex.
#ifndef TRAINYARD_WORKER_REPORT_QUEUE_H_
#define TRAINYARD_WORKER_REPORT_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
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

  // Appends `update`. When full, a droppable update is dropped, and a kept
  // one evicts the oldest droppable entry if there is one.
  void Push(trainyard::v1::JobUpdate update);
  // Puts back at the front a report that could not be sent.
  void PushFront(trainyard::v1::JobUpdate update);
  std::optional<trainyard::v1::JobUpdate> Pop();

  // Attempts whose JobExited is still queued: they count as running until
  // the server has heard of their end.
  std::vector<trainyard::v1::RunningJobRef> PendingExits() const;

  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  size_t bytes() const { return bytes_; }
  uint64_t dropped() const { return dropped_; }

 private:
  struct Entry {
    trainyard::v1::JobUpdate update;
    size_t bytes;
  };
  bool Full() const;
  void Erase(std::deque<Entry>::iterator it);

  ReportQueueLimits limits_;
  std::deque<Entry> entries_;
  size_t bytes_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace trainyard::worker

#endif  // TRAINYARD_WORKER_REPORT_QUEUE_H_
