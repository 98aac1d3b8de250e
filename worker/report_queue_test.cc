#include "worker/report_queue.h"

#include <string>

#include "gtest/gtest.h"

namespace trainyard::worker {
namespace {

using trainyard::v1::JobUpdate;

JobUpdate Progress(const std::string& job, int step) {
  JobUpdate u;
  u.set_job_id(job);
  u.set_attempt(1);
  u.mutable_trainer()->mutable_progress()->set_step(step);
  return u;
}

JobUpdate Exit(const std::string& job, int attempt = 1) {
  JobUpdate u;
  u.set_job_id(job);
  u.set_attempt(attempt);
  u.mutable_exited()->set_exit_code(0);
  return u;
}

JobUpdate Checkpoint(const std::string& job) {
  JobUpdate u;
  u.set_job_id(job);
  u.set_attempt(1);
  u.mutable_trainer()->mutable_checkpoint()->set_step(1);
  return u;
}

JobUpdate Log(const std::string& job, const std::string& text) {
  JobUpdate u;
  u.set_job_id(job);
  u.set_attempt(1);
  u.set_log(text);
  return u;
}

TEST(ReportQueueTest, PopsInOrder) {
  ReportQueue q;
  q.Push(Progress("a", 1));
  q.Push(Exit("a"));
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.Pop()->trainer().progress().step(), 1);
  EXPECT_TRUE(q.Pop()->has_exited());
  EXPECT_FALSE(q.Pop().has_value());
  EXPECT_EQ(q.bytes(), 0u);
}

TEST(ReportQueueTest, DropsProgressAndLogWhenFull) {
  ReportQueue q({.max_entries = 2, .max_bytes = 1 << 20});
  q.Push(Progress("a", 1));
  q.Push(Progress("a", 2));
  q.Push(Progress("a", 3));
  q.Push(Log("a", "text"));
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.dropped(), 2u);
  EXPECT_EQ(q.Pop()->trainer().progress().step(), 1);
}

TEST(ReportQueueTest, ExitEvictsOldestDroppable) {
  ReportQueue q({.max_entries = 2, .max_bytes = 1 << 20});
  q.Push(Progress("a", 1));
  q.Push(Progress("a", 2));
  q.Push(Exit("a"));
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.Pop()->trainer().progress().step(), 2);
  EXPECT_TRUE(q.Pop()->has_exited());
}

TEST(ReportQueueTest, NeverDropsExitsOrCheckpoints) {
  ReportQueue q({.max_entries = 2, .max_bytes = 1 << 20});
  for (int i = 0; i < 5; ++i) q.Push(Exit("job" + std::to_string(i)));
  q.Push(Checkpoint("c"));
  EXPECT_EQ(q.size(), 6u);
  EXPECT_EQ(q.dropped(), 0u);
  q.Push(Progress("a", 1));
  EXPECT_EQ(q.dropped(), 1u);
}

TEST(ReportQueueTest, BoundsBytes) {
  ReportQueue q({.max_entries = 100, .max_bytes = 64});
  q.Push(Log("a", std::string(100, 'x')));
  q.Push(Log("a", "more"));
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(q.dropped(), 1u);
}

TEST(ReportQueueTest, PushFrontPutsBackAtTheHead) {
  ReportQueue q;
  q.Push(Exit("a"));
  q.Push(Exit("b"));
  std::optional<JobUpdate> first = q.Pop();
  q.PushFront(*first);
  EXPECT_EQ(q.Pop()->job_id(), "a");
  EXPECT_EQ(q.Pop()->job_id(), "b");
}

TEST(ReportQueueTest, ListsPendingExits) {
  ReportQueue q;
  q.Push(Progress("a", 1));
  q.Push(Exit("b", 2));
  q.Push(Exit("c", 1));
  auto pending = q.PendingExits();
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_EQ(pending[0].job_id(), "b");
  EXPECT_EQ(pending[0].attempt(), 2);
  EXPECT_EQ(pending[1].job_id(), "c");
}

TEST(ReportQueueTest, DroppableKinds) {
  EXPECT_TRUE(ReportQueue::IsDroppable(Progress("a", 1)));
  EXPECT_TRUE(ReportQueue::IsDroppable(Log("a", "x")));
  EXPECT_FALSE(ReportQueue::IsDroppable(Exit("a")));
  EXPECT_FALSE(ReportQueue::IsDroppable(Checkpoint("a")));
  JobUpdate started;
  started.mutable_started()->set_pid(1);
  EXPECT_FALSE(ReportQueue::IsDroppable(started));
}

}  // namespace
}  // namespace trainyard::worker
