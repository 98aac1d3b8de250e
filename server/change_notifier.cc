#include "server/change_notifier.h"

#include <utility>

namespace trainyard::server {

ChangeNotifier::Watch::Watch(Watch&& other) noexcept
    : notifier_(std::exchange(other.notifier_, nullptr)),
      key_(std::move(other.key_)),
      entry_(std::exchange(other.entry_, nullptr)) {}

ChangeNotifier::Watch::~Watch() {
  if (notifier_ == nullptr) return;
  absl::MutexLock lock(&notifier_->mu_);
  if (--entry_->watchers == 0) notifier_->entries_.erase(key_);
}

ChangeNotifier::Watch ChangeNotifier::WatchKey(const std::string& key) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Entry>& entry = entries_[key];
  if (entry == nullptr) entry = std::make_unique<Entry>();
  ++entry->watchers;
  return Watch(this, key, entry.get());
}

uint64_t ChangeNotifier::Generation(const Watch& watch) const {
  absl::MutexLock lock(&mu_);
  return GenerationLocked(*watch.entry_);
}

ChangeNotifier::Wake ChangeNotifier::WaitForChange(
    const Watch& watch, uint64_t seen, absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  // A condition variable per key: a commit wakes its watchers only, and
  // unlocking the mutex never re-evaluates every idle waiter's condition.
  while (!shutdown_ && GenerationLocked(*watch.entry_) == seen) {
    if (watch.entry_->changed.WaitWithDeadline(&mu_, deadline)) break;
  }
  if (shutdown_) return Wake::kShutdown;
  return GenerationLocked(*watch.entry_) != seen ? Wake::kChanged
                                                 : Wake::kTimeout;
}

void ChangeNotifier::Notify(const std::vector<std::string>& keys) {
  absl::MutexLock lock(&mu_);
  ++notifications_;
  for (const std::string& key : keys) {
    auto it = entries_.find(key);
    if (it == entries_.end()) continue;  // no one watches it
    ++it->second->changes;
    it->second->changed.SignalAll();
  }
}

void ChangeNotifier::NotifyAll() {
  absl::MutexLock lock(&mu_);
  ++notifications_;
  ++all_changes_;
  SignalAllLocked();
}

uint64_t ChangeNotifier::Generation() const {
  absl::MutexLock lock(&mu_);
  return notifications_;
}

void ChangeNotifier::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
  SignalAllLocked();
}

bool ChangeNotifier::IsShutdown() const {
  absl::MutexLock lock(&mu_);
  return shutdown_;
}

void ChangeNotifier::SignalAllLocked() {
  for (auto& [key, entry] : entries_) entry->changed.SignalAll();
}

}  // namespace trainyard::server
