#include "server/live_streams.h"

#include <algorithm>

namespace trainyard::server {

LiveStreams::LiveStreams(ChangeNotifier* notifier, LiveStreamsOptions options)
    : notifier_(notifier), options_(options) {
  for (int i = 0; i < std::max(1, options_.threads); ++i) {
    threads_.emplace_back([this] { PumpLoop(); });
  }
  threads_.emplace_back([this] { RecheckLoop(); });
}

LiveStreams::~LiveStreams() { Shutdown(); }

void LiveStreams::Add(std::shared_ptr<LiveStream> stream,
                      const std::string& key) {
  LiveStream* const raw = stream.get();
  // Made before the entry: a commit in between is read by the first pump.
  ChangeNotifier::Watch watch =
      notifier_->WatchKey(key, [this, raw] { Wake(raw); });
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      Entry& e = streams_[raw];
      e.stream = std::move(stream);
      e.watch.emplace(std::move(watch));
      e.queued = true;
      queue_.push_back(raw);
      return;
    }
  }
  stream->End(absl::UnavailableError("the server is shutting down"));
}

void LiveStreams::Wake(LiveStream* stream) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end() || stopping_) return;
  Entry& e = it->second;
  if (e.running) {
    e.again = true;
  } else if (!e.queued) {
    e.queued = true;
    queue_.push_back(stream);
  }
}

void LiveStreams::Remove(LiveStream* stream) {
  std::optional<Entry> gone;  // its Watch ends outside the lock
  {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(stream);
    if (it == streams_.end()) return;
    gone.emplace(std::move(it->second));
    streams_.erase(it);
  }
}

std::vector<std::shared_ptr<LiveStream>> LiveStreams::All() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<LiveStream>> all;
  all.reserve(streams_.size());
  for (const auto& [raw, e] : streams_) all.push_back(e.stream);
  return all;
}

void LiveStreams::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  for (const std::shared_ptr<LiveStream>& s : All()) {
    s->End(absl::UnavailableError("the server is shutting down"));
  }
  for (std::thread& t : threads_) t.join();
}

int LiveStreams::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(streams_.size());
}

void LiveStreams::PumpLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || !queue_.empty();
    };
    mu_.Await(absl::Condition(&has_work));
    if (stopping_) return;
    LiveStream* raw = queue_.front();
    queue_.pop_front();
    auto it = streams_.find(raw);
    if (it == streams_.end()) continue;  // removed meanwhile
    Entry& e = it->second;
    e.queued = false;
    e.running = true;
    std::shared_ptr<LiveStream> stream = e.stream;
    mu_.Unlock();
    stream->Pump();
    mu_.Lock();
    it = streams_.find(raw);
    if (it != streams_.end()) {
      it->second.running = false;
      if (it->second.again && !stopping_) {
        it->second.again = false;
        it->second.queued = true;
        queue_.push_back(raw);
      }
    }
    // `stream` may be the last reference: let it go without the lock.
    mu_.Unlock();
    stream.reset();
    mu_.Lock();
  }
}

void LiveStreams::RecheckLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_;
      };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), options_.recheck)) {
        return;
      }
    }
    for (const std::shared_ptr<LiveStream>& s : All()) s->Recheck();
  }
}

}  // namespace trainyard::server
