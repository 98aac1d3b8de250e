// ChangeNotifier: wakes threads waiting for a job in the store to change
// (WatchJob and followed GetJobLogs streams) without polling. Writers call
// Notify(job ids) after each commit; a reader holds a Watch on its job,
// remembers Generation(watch) before reading and then WaitForChange()s from
// it, so a change between the read and the wait is never missed. A commit
// wakes only the watchers of the jobs it wrote: thousands of idle streams
// cost nothing while other jobs change. Shutdown() releases every waiter
// for good. Safe for concurrent use.
#ifndef TRAINYARD_SERVER_CHANGE_NOTIFIER_H_
#define TRAINYARD_SERVER_CHANGE_NOTIFIER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainyard::server {

class ChangeNotifier {
 private:
  struct Entry {
    uint64_t changes = 0;
    int watchers = 0;
    absl::CondVar changed;
  };

 public:
  enum class Wake { kChanged, kTimeout, kShutdown };

  // Interest in one key (a job id) while it lives; movable, not copyable.
  class Watch {
   public:
    Watch(Watch&& other) noexcept;
    Watch& operator=(Watch&&) = delete;
    Watch(const Watch&) = delete;
    ~Watch();

   private:
    friend class ChangeNotifier;
    Watch(ChangeNotifier* notifier, std::string key, Entry* entry)
        : notifier_(notifier), key_(std::move(key)), entry_(entry) {}
    ChangeNotifier* notifier_;
    std::string key_;
    Entry* entry_;
  };

  Watch WatchKey(const std::string& key);
  // How many times the watched key has changed (or everything, NotifyAll).
  uint64_t Generation(const Watch& watch) const;
  // Returns when the watched key's generation differs from `seen`, after
  // `timeout` (real time: it only bounds how long a waiter goes without
  // re-checking that its client is still there), or on shutdown.
  Wake WaitForChange(const Watch& watch, uint64_t seen,
                     absl::Duration timeout) const;

  // The keys a commit wrote changed.
  void Notify(const std::vector<std::string>& keys);
  // Every key changed.
  void NotifyAll();
  // Notify and NotifyAll calls so far (tests count commits with it).
  uint64_t Generation() const;
  void Shutdown();
  bool IsShutdown() const;

 private:
  uint64_t GenerationLocked(const Entry& entry) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return entry.changes + all_changes_;
  }
  void SignalAllLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Entry>> entries_
      ABSL_GUARDED_BY(mu_);
  uint64_t all_changes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t notifications_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_CHANGE_NOTIFIER_H_
