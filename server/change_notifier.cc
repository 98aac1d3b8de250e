#include "server/change_notifier.h"

namespace trainyard::server {

uint64_t ChangeNotifier::Generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

void ChangeNotifier::Notify() {
  absl::MutexLock lock(&mu_);
  ++generation_;
}

ChangeNotifier::Wake ChangeNotifier::WaitForChange(
    uint64_t seen, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [this, seen]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return shutdown_ || generation_ != seen;
  };
  mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  if (shutdown_) return Wake::kShutdown;
  return generation_ != seen ? Wake::kChanged : Wake::kTimeout;
}

void ChangeNotifier::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
}

bool ChangeNotifier::IsShutdown() const {
  absl::MutexLock lock(&mu_);
  return shutdown_;
}

}  // namespace trainyard::server
