#include "server/job_watch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/job_state.h"

namespace trainyard::server {

JobWatcher::JobWatcher(const JobStore* store, JobWatchOptions options)
    : store_(store), options_(options) {}

JobWatcher::EventFeed JobWatcher::Events(const std::string& job_id,
                                         int64_t after_sequence) const {
  return [this, job_id, seen = after_sequence]() mutable
         -> absl::StatusOr<FeedStep<v1::JobEvent>> {
    ASSIGN_OR_RETURN(std::vector<v1::JobEvent> events,
                     store_->ReadEvents(job_id, seen,
                                        options_.events_per_read));
    FeedStep<v1::JobEvent> step;
    for (v1::JobEvent& e : events) {
      seen = e.sequence();
      step.end = e.has_state_change() && IsTerminal(e.state_change().to());
      step.messages.push_back(std::move(e));
      if (step.end) return step;
    }
    if (static_cast<int32_t>(events.size()) == options_.events_per_read) {
      step.more = true;
      return step;
    }
    // Resumed after the terminal event: nothing more will come.
    ASSIGN_OR_RETURN(JobRecord record, store_->GetJob(job_id));
    step.end = IsTerminal(record.job.state()) && record.last_sequence <= seen;
    return step;
  };
}

absl::StatusOr<int64_t> JobWatcher::TailOffset(const std::string& job_id,
                                               int64_t lines) const {
  ASSIGN_OR_RETURN(LogRead held, store_->ReadLog(job_id, 0, 0));
  const int64_t end = held.end;
  int64_t pos = end;  // scanned back to here
  int64_t newlines = 0;
  // Backwards one chunk at a time: the log may hold megabytes.
  while (pos > held.offset) {
    const int64_t from = std::max(held.offset, pos - options_.log_chunk_bytes);
    ASSIGN_OR_RETURN(LogRead window, store_->ReadLog(job_id, from, pos - from));
    // Trimmed meanwhile: what is left starts later.
    if (window.offset >= pos) return window.offset;
    const std::string& d = window.data;
    for (int64_t at = pos - 1; at >= window.offset; --at) {
      if (d[static_cast<size_t>(at - window.offset)] != '\n') continue;
      if (at == end - 1) continue;  // the last line's own newline
      if (++newlines == lines) return at + 1;
    }
    if (window.offset > from) return window.offset;
    pos = from;
  }
  return held.offset;
}

JobWatcher::LogFeed JobWatcher::Log(const std::string& job_id, int64_t offset,
                                    bool follow) const {
  return [this, job_id, offset,
          follow]() mutable -> absl::StatusOr<FeedStep<v1::LogChunk>> {
    // The state before the log, so bytes written before the job ended are
    // always read once it is seen ended.
    ASSIGN_OR_RETURN(JobRecord record, store_->GetJob(job_id));
    ASSIGN_OR_RETURN(LogRead read,
                     store_->ReadLog(job_id, offset, options_.log_chunk_bytes));
    FeedStep<v1::LogChunk> step;
    if (!read.data.empty()) {
      v1::LogChunk& chunk = step.messages.emplace_back();
      chunk.set_offset(read.offset);
      chunk.set_data(std::move(read.data));
      offset = read.offset + static_cast<int64_t>(chunk.data().size());
      step.more = true;
      return step;
    }
    offset = read.offset;
    step.end = !follow || IsTerminal(record.job.state());
    return step;
  };
}

}  // namespace trainyard::server
