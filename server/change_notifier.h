// ChangeNotifier: wakes threads waiting for "something in the store changed"
// (WatchJob and followed GetJobLogs streams) without polling. Writers call
// Notify() after each commit; readers remember Generation() before reading
// and then WaitForChange() from it, so a change between the read and the
// wait is never missed. Shutdown() releases every waiter for good.
// Safe for concurrent use.
#ifndef TRAINYARD_SERVER_CHANGE_NOTIFIER_H_
#define TRAINYARD_SERVER_CHANGE_NOTIFIER_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainyard::server {

class ChangeNotifier {
 public:
  enum class Wake { kChanged, kTimeout, kShutdown };

  uint64_t Generation() const;
  void Notify();
  // Returns when the generation differs from `seen`, after `timeout` (real
  // time: it only bounds how long a waiter goes without re-checking that
  // its client is still there), or on shutdown.
  Wake WaitForChange(uint64_t seen, absl::Duration timeout) const;
  void Shutdown();
  bool IsShutdown() const;

 private:
  mutable absl::Mutex mu_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_CHANGE_NOTIFIER_H_
