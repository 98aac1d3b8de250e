// TaskPool: a few threads that run posted tasks, oldest first. For work
// that may block (a store commit) and so must not run on a thread that
// serves gRPC's callback reactions. Tasks posted by one poster run in the
// order posted only when the poster waits for each to finish before posting
// the next (as a stream's reactor does); otherwise two may run at once.
//
// Thread-safe.
#ifndef TRAINYARD_SERVER_TASK_POOL_H_
#define TRAINYARD_SERVER_TASK_POOL_H_

#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace trainyard::server {

class TaskPool {
 public:
  explicit TaskPool(int threads);
  ~TaskPool();  // Shutdown()

  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // Runs `task` on one of the threads soon; after Shutdown, on the caller's
  // thread at once (nothing posted is ever dropped).
  void Post(absl::AnyInvocable<void() &&> task);
  // Runs what is posted, then stops the threads. Idempotent.
  void Shutdown();

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_TASK_POOL_H_
