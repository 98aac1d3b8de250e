#include "server/task_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace trainyard::server {
namespace {

TEST(TaskPoolTest, RunsEveryTaskOnItsThreadsAtOnce) {
  TaskPool pool(4);
  // Four tasks that each wait for all four to have started: they pass
  // only if they run at the same time, each on its own thread.
  std::atomic<int> started{0};
  absl::Notification all_started;
  std::vector<std::thread::id> ids(4);
  absl::Notification done[4];
  for (int i = 0; i < 4; ++i) {
    pool.Post([&, i] {
      ids[i] = std::this_thread::get_id();
      if (started.fetch_add(1) + 1 == 4) all_started.Notify();
      all_started.WaitForNotification();
      done[i].Notify();
    });
  }
  for (absl::Notification& d : done) d.WaitForNotification();
  for (int i = 0; i < 4; ++i) {
    EXPECT_NE(ids[i], std::this_thread::get_id());
    for (int j = 0; j < i; ++j) EXPECT_NE(ids[i], ids[j]);
  }
}

TEST(TaskPoolTest, ShutdownRunsWhatIsQueuedThenLaterTasksRunOnTheCaller) {
  TaskPool pool(1);
  absl::Notification release;
  pool.Post([&] { release.WaitForNotification(); });  // holds the thread
  std::atomic<int> ran{0};
  for (int i = 0; i < 100; ++i) pool.Post([&] { ran.fetch_add(1); });
  std::thread stopper([&] { pool.Shutdown(); });
  release.Notify();
  stopper.join();
  EXPECT_EQ(ran.load(), 100);  // none dropped

  std::thread::id where;
  pool.Post([&] { where = std::this_thread::get_id(); });
  EXPECT_EQ(where, std::this_thread::get_id());
  pool.Shutdown();  // idempotent
}

}  // namespace
}  // namespace trainyard::server
