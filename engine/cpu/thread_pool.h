// ThreadPool: a fixed set of worker threads that run one parallel loop at a
// time for the CPU backend's ops. ParallelFor hands out task indices
// dynamically; callers make every task write disjoint outputs in a fixed
// order, so results do not depend on which thread ran which task. Its
// workers flush denormals to zero (denormals.h), as the CPU backend does
// on the thread that runs it.
//
// Thread-safety: ParallelFor may be called from one thread at a time (the
// training loop); it blocks until every task is done.
#ifndef TRAINYARD_ENGINE_CPU_THREAD_POOL_H_
#define TRAINYARD_ENGINE_CPU_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace trainyard::engine {

class ThreadPool {
 public:
  // `threads` >= 1 counts the calling thread, so threads - 1 workers start.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(task) for every task in [0, num_tasks), on the pool and the
  // calling thread; returns when all are done.
  void ParallelFor(int64_t num_tasks, const std::function<void(int64_t)>& fn);

 private:
  void WorkerLoop();
  void RunTasks();

  std::vector<std::thread> workers_;
  absl::Mutex mu_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int busy_workers_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The current loop; written under mu_ before generation_ moves on.
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t num_tasks_ = 0;
  std::atomic<int64_t> next_task_{0};
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CPU_THREAD_POOL_H_
