#include "server/change_notifier.h"

#include <algorithm>
#include <utility>

namespace trainyard::server {

ChangeNotifier::Watch::Watch(Watch&& other) noexcept
    : notifier_(std::exchange(other.notifier_, nullptr)),
      key_(std::move(other.key_)),
      on_change_(std::move(other.on_change_)) {}

ChangeNotifier::Watch::~Watch() {
  if (notifier_ == nullptr) return;
  absl::MutexLock lock(&notifier_->mu_);
  auto it = notifier_->watches_.find(key_);
  std::vector<const Callback*>& all = it->second;
  all.erase(std::find(all.begin(), all.end(), on_change_.get()));
  if (all.empty()) notifier_->watches_.erase(it);
}

ChangeNotifier::Watch ChangeNotifier::WatchKey(const std::string& key,
                                               Callback on_change) {
  auto callback = std::make_unique<Callback>(std::move(on_change));
  absl::MutexLock lock(&mu_);
  watches_[key].push_back(callback.get());
  return Watch(this, key, std::move(callback));
}

void ChangeNotifier::Notify(const std::vector<std::string>& keys) {
  absl::MutexLock lock(&mu_);
  ++notifications_;
  for (const std::string& key : keys) {
    auto it = watches_.find(key);
    if (it == watches_.end()) continue;  // no one watches it
    for (const Callback* on_change : it->second) (*on_change)();
  }
}

uint64_t ChangeNotifier::Generation() const {
  absl::MutexLock lock(&mu_);
  return notifications_;
}

int ChangeNotifier::watchers(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = watches_.find(key);
  return it == watches_.end() ? 0 : static_cast<int>(it->second.size());
}

}  // namespace trainyard::server
