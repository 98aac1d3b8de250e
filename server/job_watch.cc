#include "server/job_watch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/job_state.h"

namespace trainyard::server {

JobWatcher::JobWatcher(JobStore* store, ChangeNotifier* notifier,
                       JobWatchOptions options)
    : store_(store), notifier_(notifier), options_(options) {}

absl::Status JobWatcher::WaitForChange(const ChangeNotifier::Watch& watch,
                                       uint64_t seen,
                                       const StreamCheck& check) const {
  while (true) {
    switch (notifier_->WaitForChange(watch, seen, options_.recheck)) {
      case ChangeNotifier::Wake::kChanged:
        return absl::OkStatus();
      case ChangeNotifier::Wake::kShutdown:
        return absl::UnavailableError("the server is shutting down");
      case ChangeNotifier::Wake::kTimeout:
        RETURN_IF_ERROR(check());
        break;
    }
  }
}

absl::Status JobWatcher::WatchEvents(const std::string& job_id,
                                     int64_t after_sequence,
                                     const EmitEvent& emit,
                                     const StreamCheck& check) const {
  int64_t seen = after_sequence;
  const ChangeNotifier::Watch watch = notifier_->WatchKey(job_id);
  while (true) {
    RETURN_IF_ERROR(check());
    const uint64_t generation = notifier_->Generation(watch);
    ASSIGN_OR_RETURN(std::vector<v1::JobEvent> events,
                     store_->ReadEvents(job_id, seen,
                                        options_.events_per_read));
    for (const v1::JobEvent& e : events) {
      if (!emit(e)) return absl::CancelledError("the client went away");
      seen = e.sequence();
      if (e.has_state_change() && IsTerminal(e.state_change().to())) {
        return absl::OkStatus();
      }
    }
    if (static_cast<int32_t>(events.size()) == options_.events_per_read) {
      continue;  // more are waiting
    }
    // Resumed after the terminal event: nothing more will come.
    ASSIGN_OR_RETURN(JobRecord record, store_->GetJob(job_id));
    if (IsTerminal(record.job.state()) && record.last_sequence <= seen) {
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(WaitForChange(watch, generation, check));
  }
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

absl::Status JobWatcher::StreamLog(const std::string& job_id, int64_t offset,
                                   bool follow, const EmitLog& emit,
                                   const StreamCheck& check) const {
  const ChangeNotifier::Watch watch = notifier_->WatchKey(job_id);
  while (true) {
    RETURN_IF_ERROR(check());
    const uint64_t generation = notifier_->Generation(watch);
    // Read the state before the log, so bytes written before the job ended
    // are always read once it is seen ended.
    ASSIGN_OR_RETURN(JobRecord record, store_->GetJob(job_id));
    ASSIGN_OR_RETURN(LogRead read,
                     store_->ReadLog(job_id, offset, options_.log_chunk_bytes));
    if (!read.data.empty()) {
      v1::LogChunk chunk;
      chunk.set_offset(read.offset);
      chunk.set_data(std::move(read.data));
      offset = read.offset + static_cast<int64_t>(chunk.data().size());
      if (!emit(chunk)) return absl::CancelledError("the client went away");
      continue;
    }
    offset = read.offset;
    if (!follow || IsTerminal(record.job.state())) return absl::OkStatus();
    RETURN_IF_ERROR(WaitForChange(watch, generation, check));
  }
}

}  // namespace trainyard::server
