#include "engine/cpu/thread_pool.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

TEST(ThreadPoolTest, RunsEveryTaskExactlyOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (int round = 0; round < 50; ++round) {
      const int64_t n = round * 7 + 1;
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, [&](int64_t t) { hits[t].fetch_add(1); });
      for (int64_t t = 0; t < n; ++t) ASSERT_EQ(hits[t].load(), 1) << t;
    }
  }
}

TEST(ThreadPoolTest, ZeroTasksIsANoOp) {
  ThreadPool pool(3);
  bool ran = false;
  pool.ParallelFor(0, [&](int64_t) { ran = true; });
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace trainyard::engine
