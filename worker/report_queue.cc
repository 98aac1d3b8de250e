#include "worker/report_queue.h"

#include <algorithm>
#include <utility>

namespace trainyard::worker {

bool ReportQueue::IsDroppable(const trainyard::v1::JobUpdate& update) {
  return update.has_log() ||
         (update.has_trainer() && update.trainer().has_progress());
}

bool ReportQueue::Full() const {
  return entries_.size() >= limits_.max_entries || bytes_ >= limits_.max_bytes;
}

void ReportQueue::Erase(size_t index) {
  bytes_ -= entries_[index].bytes;
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(index));
  if (index < sent_) --sent_;
}

void ReportQueue::Push(trainyard::v1::JobUpdate update) {
  if (!update.has_log()) {
    const Key key(update.job_id(), update.attempt());
    update.set_sequence(++last_sequence_[key]);
  } else {
    update.set_sequence(0);
  }
  const bool droppable = IsDroppable(update);
  if (Full()) {
    if (droppable) {
      ++dropped_;
      return;
    }
    auto oldest =
        std::find_if(entries_.begin(), entries_.end(),
                     [](const Entry& e) { return IsDroppable(e.update); });
    if (oldest != entries_.end()) {
      Erase(static_cast<size_t>(oldest - entries_.begin()));
      ++dropped_;
    }
  }
  const size_t size = update.ByteSizeLong();
  bytes_ += size;
  entries_.push_back(Entry{std::move(update), size});
}

std::optional<trainyard::v1::JobUpdate> ReportQueue::Next(bool keep) {
  if (!has_unsent()) return std::nullopt;
  Entry& e = entries_[sent_];
  if (Kept(e.update, keep)) {
    ++sent_;
    return e.update;
  }
  trainyard::v1::JobUpdate update = std::move(e.update);
  Erase(sent_);
  if (update.has_exited()) {
    last_sequence_.erase(Key(update.job_id(), update.attempt()));
  }
  return update;
}

void ReportQueue::Unsend(trainyard::v1::JobUpdate update) {
  const size_t size = update.ByteSizeLong();
  bytes_ += size;
  entries_.insert(entries_.begin() + static_cast<std::ptrdiff_t>(sent_),
                  Entry{std::move(update), size});
}

void ReportQueue::Rewind() { sent_ = 0; }

void ReportQueue::Ack(const std::string& job_id, int32_t attempt,
                      int64_t sequence) {
  std::deque<Entry> kept;
  size_t sent = 0;
  bool exit_acked = false;
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    const int64_t seq = e.update.sequence();
    if (seq > 0 && seq <= sequence && e.update.attempt() == attempt &&
        e.update.job_id() == job_id) {
      bytes_ -= e.bytes;
      exit_acked = exit_acked || e.update.has_exited();
      continue;
    }
    if (i < sent_) ++sent;
    kept.push_back(std::move(e));
  }
  entries_.swap(kept);
  sent_ = sent;
  if (exit_acked) last_sequence_.erase(Key(job_id, attempt));
}

std::vector<trainyard::v1::RunningJobRef> ReportQueue::PendingExits() const {
  std::vector<trainyard::v1::RunningJobRef> out;
  for (const Entry& e : entries_) {
    if (!e.update.has_exited()) continue;
    trainyard::v1::RunningJobRef& ref = out.emplace_back();
    ref.set_job_id(e.update.job_id());
    ref.set_attempt(e.update.attempt());
    if (e.update.exited().has_exit_time()) {
      *ref.mutable_exit_time() = e.update.exited().exit_time();
    }
  }
  return out;
}

}  // namespace trainyard::worker
