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
  EXPECT_EQ(q.Next(false)->trainer().progress().step(), 1);
  EXPECT_TRUE(q.Next(false)->has_exited());
  EXPECT_FALSE(q.Next(false).has_value());
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
  EXPECT_EQ(q.Next(false)->trainer().progress().step(), 1);
}

TEST(ReportQueueTest, ExitEvictsOldestDroppable) {
  ReportQueue q({.max_entries = 2, .max_bytes = 1 << 20});
  q.Push(Progress("a", 1));
  q.Push(Progress("a", 2));
  q.Push(Exit("a"));
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.Next(false)->trainer().progress().step(), 2);
  EXPECT_TRUE(q.Next(false)->has_exited());
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

TEST(ReportQueueTest, UnsendPutsBackAtTheHead) {
  ReportQueue q;
  q.Push(Exit("a"));
  q.Push(Exit("b"));
  std::optional<JobUpdate> first = q.Next(false);
  q.Unsend(*first);
  EXPECT_EQ(q.Next(false)->job_id(), "a");
  EXPECT_EQ(q.Next(false)->job_id(), "b");
}

TEST(ReportQueueTest, NumbersEachAttemptsReportsButNotLogBytes) {
  ReportQueue q;
  q.Push(Progress("a", 1));
  q.Push(Log("a", "text"));
  q.Push(Progress("b", 1));
  q.Push(Checkpoint("a"));
  q.Push(Exit("a", 2));
  EXPECT_EQ(q.Next(true)->sequence(), 1);  // a/1
  EXPECT_EQ(q.Next(true)->sequence(), 0);  // log bytes
  EXPECT_EQ(q.Next(true)->sequence(), 1);  // b/1
  EXPECT_EQ(q.Next(true)->sequence(), 2);  // a/1 again
  EXPECT_EQ(q.Next(true)->sequence(), 1);  // a/2: another attempt
  EXPECT_FALSE(q.Next(true).has_value());
}

TEST(ReportQueueTest, KeepsSentReportsUntilAckedAndResendsAfterRewind) {
  ReportQueue q;
  q.Push(Progress("a", 1));
  q.Push(Log("a", "text"));
  q.Push(Checkpoint("a"));
  q.Push(Exit("a"));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(q.Next(true).has_value());
  EXPECT_FALSE(q.has_unsent());
  EXPECT_EQ(q.size(), 3u) << "the log bytes left once sent";
  EXPECT_EQ(q.PendingExits().size(), 1u);

  q.Ack("a", 1, 1);  // the server had the progress, not the rest
  EXPECT_EQ(q.size(), 2u);
  q.Rewind();  // the stream broke: the rest goes again, in order
  std::optional<JobUpdate> again = q.Next(true);
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(again->trainer().has_checkpoint());
  EXPECT_EQ(again->sequence(), 2);
  EXPECT_TRUE(q.Next(true)->has_exited());
  EXPECT_FALSE(q.Next(true).has_value());

  q.Ack("a", 1, 3);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.bytes(), 0u);
  EXPECT_TRUE(q.PendingExits().empty());
}

TEST(ReportQueueTest, AckTouchesOnlyItsAttemptAndKeepsTheRestInOrder) {
  ReportQueue q;
  q.Push(Checkpoint("a"));  // a/1 #1
  q.Push(Exit("b", 1));     // b/1 #1
  q.Push(Exit("a", 2));     // a/2 #1
  q.Push(Exit("a"));        // a/1 #2
  ASSERT_TRUE(q.Next(true).has_value());
  ASSERT_TRUE(q.Next(true).has_value());
  q.Ack("a", 1, 5);    // covers a/1 #1 (sent) and #2 (unsent)
  q.Ack("zzz", 1, 9);  // unknown: nothing
  q.Ack("b", 1, 0);    // acks nothing
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.unsent(), 1u);
  std::optional<JobUpdate> next = q.Next(true);
  EXPECT_EQ(next->job_id(), "a");
  EXPECT_EQ(next->attempt(), 2);
  q.Rewind();
  EXPECT_EQ(q.Next(true)->job_id(), "b");
}

TEST(ReportQueueTest, AnAttemptsNumbersRestartOnlyAfterItsExitIsAcked) {
  ReportQueue q;
  q.Push(Checkpoint("a"));
  q.Push(Exit("a"));
  ASSERT_TRUE(q.Next(true).has_value());
  q.Ack("a", 1, 1);
  q.Push(Checkpoint("a"));  // not expected after an exit, but numbered on
  ASSERT_TRUE(q.Next(true).has_value());
  EXPECT_EQ(q.Next(true)->sequence(), 3);
  q.Ack("a", 1, 3);
  EXPECT_TRUE(q.empty());
}

TEST(ReportQueueTest, DropsUnackedProgressFirstWhenFull) {
  ReportQueue q({.max_entries = 2, .max_bytes = 1 << 20});
  q.Push(Progress("a", 1));
  q.Push(Checkpoint("a"));
  ASSERT_TRUE(q.Next(true).has_value());
  ASSERT_TRUE(q.Next(true).has_value());
  q.Push(Exit("a"));  // evicts the sent, unacknowledged progress
  EXPECT_EQ(q.dropped(), 1u);
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.unsent(), 1u);
  EXPECT_TRUE(q.Next(true)->has_exited());
  q.Rewind();
  EXPECT_TRUE(q.Next(true)->trainer().has_checkpoint());
}

TEST(ReportQueueTest, ListsPendingExits) {
  ReportQueue q;
  q.Push(Progress("a", 1));
  JobUpdate b = Exit("b", 2);
  b.mutable_exited()->mutable_exit_time()->set_seconds(1'800'000'000);
  q.Push(b);
  q.Push(Exit("c", 1));
  auto pending = q.PendingExits();
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_EQ(pending[0].job_id(), "b");
  EXPECT_EQ(pending[0].attempt(), 2);
  // When it ended: the server need not count it as running meanwhile.
  EXPECT_EQ(pending[0].exit_time().seconds(), 1'800'000'000);
  EXPECT_EQ(pending[1].job_id(), "c");
  EXPECT_FALSE(pending[1].has_exit_time());
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
