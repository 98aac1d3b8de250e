// JobWatcher: the streaming reads of JobService without gRPC — a job's
// events from a sequence number on (WatchJob) and its log from a byte offset
// (GetJobLogs with follow). Both read the store and, when caught up, sleep on
// the ChangeNotifier until the next commit; the timeout of that sleep only
// bounds how often they check whether the stream may go on (StreamCheck:
// the client still there, its token not revoked), which they also check
// before each read.
// Safe for concurrent use: each call keeps its state on its own stack.
#ifndef TRAINYARD_SERVER_JOB_WATCH_H_
#define TRAINYARD_SERVER_JOB_WATCH_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/change_notifier.h"
#include "server/job_store.h"
#include "server/stream_check.h"
#include "trainyard/v1/jobs.pb.h"

namespace trainyard::server {

struct JobWatchOptions {
  absl::Duration recheck = absl::Milliseconds(500);
  int32_t events_per_read = 256;
  int64_t log_chunk_bytes = 64 * 1024;
};

class JobWatcher {
 public:
  // `emit` returns false when the client cannot take more (gone).
  using EmitEvent = std::function<bool(const v1::JobEvent&)>;
  using EmitLog = std::function<bool(const v1::LogChunk&)>;

  JobWatcher(JobStore* store, ChangeNotifier* notifier,
             JobWatchOptions options = {});

  // Emits the events with sequence > after_sequence, live, and returns OK
  // after the event that makes the job terminal. NOT_FOUND for an unknown
  // job, OUT_OF_RANGE for a pruned or future sequence, CANCELLED when the
  // client went away (`emit` false), UNAVAILABLE when the server shuts
  // down, and what `check` returns when it is not OK.
  absl::Status WatchEvents(const std::string& job_id, int64_t after_sequence,
                           const EmitEvent& emit,
                           const StreamCheck& check) const;

  // Where the job's last `lines` (> 0) lines begin in its log: the offset
  // after the newline `lines` newlines back from the end (a last line
  // without its newline counts as a line), or the oldest byte held when
  // the log holds fewer lines. NOT_FOUND for an unknown job.
  absl::StatusOr<int64_t> TailOffset(const std::string& job_id,
                                     int64_t lines) const;

  // Emits the job's log from `offset`. Without `follow` it stops at the
  // current end; with it, it keeps going until the job is terminal and its
  // log fully sent.
  absl::Status StreamLog(const std::string& job_id, int64_t offset, bool follow,
                         const EmitLog& emit, const StreamCheck& check) const;

 private:
  // Waits for a commit to the watched job after its generation `seen`.
  absl::Status WaitForChange(const ChangeNotifier::Watch& watch, uint64_t seen,
                             const StreamCheck& check) const;

  JobStore* const store_;
  ChangeNotifier* const notifier_;
  const JobWatchOptions options_;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_JOB_WATCH_H_
