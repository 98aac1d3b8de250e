// JobWatcher: what the streaming reads of JobService send, without gRPC
// and without waiting -- a job's events from a sequence number on (WatchJob)
// and its log from a byte offset (GetJobLogs). Each is a feed: a function
// that reads what is new since its last call (FeedStep), which LiveStreams
// calls again when the job changes. Feeds of one stream are called one at
// a time; the JobWatcher itself is safe for concurrent use.
#ifndef TRAINYARD_SERVER_JOB_WATCH_H_
#define TRAINYARD_SERVER_JOB_WATCH_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/job_store.h"
#include "server/live_streams.h"
#include "trainyard/v1/jobs.pb.h"

namespace trainyard::server {

struct JobWatchOptions {
  int32_t events_per_read = 256;
  int64_t log_chunk_bytes = 64 * 1024;
};

class JobWatcher {
 public:
  using EventFeed = FollowedStream<v1::JobEvent>::Read;
  using LogFeed = FollowedStream<v1::LogChunk>::Read;

  explicit JobWatcher(const JobStore* store, JobWatchOptions options = {});

  // The events with sequence > after_sequence, up to the one that makes the
  // job terminal (the step that holds it ends the stream; a feed resumed
  // after it ends at once). NOT_FOUND for an unknown job, OUT_OF_RANGE for
  // a pruned or future sequence.
  EventFeed Events(const std::string& job_id, int64_t after_sequence) const;

  // The job's log from `offset`, a chunk a step. Without `follow` it ends at
  // the current end; with it, once the job is terminal and its log sent.
  LogFeed Log(const std::string& job_id, int64_t offset, bool follow) const;

  // Where the job's last `lines` (> 0) lines begin in its log: the offset
  // after the newline `lines` newlines back from the end (a last line
  // without its newline counts as a line), or the oldest byte held when
  // the log holds fewer lines. NOT_FOUND for an unknown job.
  absl::StatusOr<int64_t> TailOffset(const std::string& job_id,
                                     int64_t lines) const;

 private:
  const JobStore* const store_;
  const JobWatchOptions options_;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_JOB_WATCH_H_
