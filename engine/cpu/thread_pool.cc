// ThreadPool implementation. See thread_pool.h.
#include "engine/cpu/thread_pool.h"

#include "engine/cpu/denormals.h"

namespace trainyard::engine {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i)
    workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunTasks() {
  while (true) {
    const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= num_tasks_) return;
    (*fn_)(task);
  }
}

void ThreadPool::WorkerLoop() {
  FlushDenormalsOnThisThread();
  uint64_t seen = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto has_work = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || generation_ != seen;
      };
      mu_.Await(absl::Condition(&has_work));
      if (stopping_) return;
      seen = generation_;
    }
    RunTasks();
    absl::MutexLock lock(&mu_);
    --busy_workers_;
  }
}

void ThreadPool::ParallelFor(int64_t num_tasks,
                             const std::function<void(int64_t)>& fn) {
  if (num_tasks <= 0) return;
  if (workers_.empty() || num_tasks == 1) {
    for (int64_t t = 0; t < num_tasks; ++t) fn(t);
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    fn_ = &fn;
    num_tasks_ = num_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    busy_workers_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  RunTasks();
  absl::MutexLock lock(&mu_);
  auto all_done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return busy_workers_ == 0;
  };
  mu_.Await(absl::Condition(&all_done));
}

}  // namespace trainyard::engine
