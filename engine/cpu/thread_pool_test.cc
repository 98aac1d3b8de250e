#include "engine/cpu/thread_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/denormals.h"
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

// A denormal result, made where the compiler cannot fold it.
float TinyProduct() {
  volatile float a = 1e-30f;
  volatile float b = 1e-10f;
  return a * b;  // 1e-40: below FLT_MIN (1.2e-38)
}

// The pool's workers flush denormals to zero whoever started them (here a
// thread that does not); the backend flushes on the thread that makes it.
TEST(DenormalsTest, ThePoolsWorkersAndTheBackendsThreadFlushThem) {
  std::thread([] {
    EXPECT_NE(TinyProduct(), 0.0f) << "a fresh thread keeps denormals";
    ThreadPool pool(4);
    std::vector<std::atomic<int>> flushed(64);
    std::vector<float> products(64);
    pool.ParallelFor(64, [&](int64_t t) {
      flushed[t] = DenormalsFlushedOnThisThread() ? 1 : 0;
      products[t] = TinyProduct();
    });
    // A flushing thread made 0 (the calling thread runs tasks too, and
    // keeps denormals: it is not the pool's).
    for (int t = 0; t < 64; ++t) {
      if (flushed[t].load() == 1) {
        EXPECT_EQ(products[t], 0.0f) << t;
      }
    }
    auto backend = CpuBackend::Create({.threads = 2});
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_TRUE(DenormalsFlushedOnThisThread());
    EXPECT_EQ(TinyProduct(), 0.0f);
  }).join();
  std::thread([] {
    ThreadPool pool(3);
    std::atomic<int> unflushed_workers = 0;
    const std::thread::id caller = std::this_thread::get_id();
    pool.ParallelFor(300, [&](int64_t) {
      if (std::this_thread::get_id() != caller &&
          !DenormalsFlushedOnThisThread()) {
        ++unflushed_workers;
      }
    });
    EXPECT_EQ(unflushed_workers.load(), 0);
  }).join();
}

}  // namespace
}  // namespace trainyard::engine
