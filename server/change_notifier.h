// ChangeNotifier: tells the server streams that follow a job (WatchJob and
// followed GetJobLogs, run by LiveStreams) that their job changed, without
// polling. Writers call Notify(job ids) after each commit; a follower holds
// a Watch on its job with a callback, and Notify runs the callbacks of the
// watches of the jobs it names and no others: thousands of idle streams
// cost nothing while other jobs change.
//
// The callbacks run on the notifying thread with the notifier's lock held:
// they must be quick (hand the work to another thread) and must not call
// the notifier or destroy a Watch. A Watch's destructor waits for that
// lock, so once it returns no callback of that Watch runs or will run.
// Safe for concurrent use.
#ifndef TRAINYARD_SERVER_CHANGE_NOTIFIER_H_
#define TRAINYARD_SERVER_CHANGE_NOTIFIER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace trainyard::server {

class ChangeNotifier {
 public:
  using Callback = std::function<void()>;

  // Interest in one key (a job id) while it lives; movable, not copyable.
  class Watch {
   public:
    Watch(Watch&& other) noexcept;
    Watch& operator=(Watch&&) = delete;
    Watch(const Watch&) = delete;
    ~Watch();

   private:
    friend class ChangeNotifier;
    Watch(ChangeNotifier* notifier, std::string key,
          std::unique_ptr<Callback> on_change)
        : notifier_(notifier),
          key_(std::move(key)),
          on_change_(std::move(on_change)) {}
    ChangeNotifier* notifier_;
    std::string key_;
    std::unique_ptr<Callback> on_change_;  // its address is the handle
  };

  // Calls `on_change` after each Notify naming `key`, until the Watch ends.
  Watch WatchKey(const std::string& key, Callback on_change);

  // The keys a commit wrote changed.
  void Notify(const std::vector<std::string>& keys);
  // Notify calls so far (tests count commits with it).
  uint64_t Generation() const;
  // Watches open on `key`.
  int watchers(const std::string& key) const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::vector<const Callback*>> watches_
      ABSL_GUARDED_BY(mu_);
  uint64_t notifications_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_CHANGE_NOTIFIER_H_
