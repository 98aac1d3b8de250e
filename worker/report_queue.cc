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

void ReportQueue::Erase(std::deque<Entry>::iterator it) {
  bytes_ -= it->bytes;
  entries_.erase(it);
}

void ReportQueue::Push(trainyard::v1::JobUpdate update) {
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
      Erase(oldest);
      ++dropped_;
    }
  }
  const size_t size = update.ByteSizeLong();
  bytes_ += size;
  entries_.push_back(Entry{std::move(update), size});
}

void ReportQueue::PushFront(trainyard::v1::JobUpdate update) {
  const size_t size = update.ByteSizeLong();
  bytes_ += size;
  entries_.push_front(Entry{std::move(update), size});
}

std::optional<trainyard::v1::JobUpdate> ReportQueue::Pop() {
  if (entries_.empty()) return std::nullopt;
  trainyard::v1::JobUpdate update = std::move(entries_.front().update);
  bytes_ -= entries_.front().bytes;
  entries_.pop_front();
  return update;
}

std::vector<trainyard::v1::RunningJobRef> ReportQueue::PendingExits() const {
  std::vector<trainyard::v1::RunningJobRef> out;
  for (const Entry& e : entries_) {
    if (!e.update.has_exited()) continue;
    trainyard::v1::RunningJobRef& ref = out.emplace_back();
    ref.set_job_id(e.update.job_id());
    ref.set_attempt(e.update.attempt());
  }
  return out;
}

}  // namespace trainyard::worker
