// Group commit in JobStore: concurrent writes share one transaction, a
// failed COMMIT fails exactly the writes of its batch and leaves the store
// as it was, and one write's own error does not fail the others.
#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/test_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/job_store.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;

v1::Job NewJob() {
  v1::Job job;
  job.set_tenant("default");
  job.mutable_spec()->set_steps(10);
  return job;
}

// Holds the first batch in its commit hook until the test has queued the
// writes it wants in the second batch; the second batch's COMMIT then
// succeeds or fails as `second_commit` says.
class GroupCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JobStoreOptions o;
    o.path = dir_.File("trainyard.db");
    o.clock = &clock_;
    o.on_commit_failure = [this](const absl::Status&) { ++failed_batches_; };
    o.commit_fault = [this]() -> absl::Status {
      const int n = ++commits_;
      if (n == hold_batch_) {
        in_hook_.Notify();
        release_.WaitForNotification();
      }
      return n == hold_batch_ + 1 ? second_commit_ : absl::OkStatus();
    };
    auto store = JobStore::Open(std::move(o));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    ASSERT_TRUE(store_->CreateJob(NewJob()).ok());  // j-000001
    commits_ = 0;
  }

  // Starts a write that leads batch 1 and waits until it is held.
  void HoldFirstBatch() {
    hold_batch_ = 1;
    threads_.emplace_back(
        [this] { ASSERT_TRUE(store_->CreateJob(NewJob()).ok()); });
    in_hook_.WaitForNotification();
  }

  // Waits (bounded) until `n` writes are queued behind the held batch.
  void AwaitQueued(int n) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (store_->QueuedWrites() < n && absl::Now() < deadline) {
      std::this_thread::yield();
    }
    ASSERT_EQ(store_->QueuedWrites(), n);
  }

  void ReleaseAndJoin() {
    release_.Notify();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  TestDir dir_;
  FakeClock clock_;
  std::unique_ptr<JobStore> store_;
  std::atomic<int> commits_{0};
  std::atomic<int> failed_batches_{0};
  int hold_batch_ = 0;
  absl::Status second_commit_;
  absl::Notification in_hook_, release_;
  std::vector<std::thread> threads_;
};

TEST_F(GroupCommitTest, ConcurrentWritesShareOneCommit) {
  HoldFirstBatch();
  constexpr int kWriters = 5;
  std::atomic<int> ok{0};
  for (int i = 0; i < kWriters; ++i) {
    threads_.emplace_back([&] { ok += store_->CreateJob(NewJob()).ok(); });
  }
  AwaitQueued(kWriters);
  // Reads do not wait for the held commit, and see only committed data.
  auto listed = store_->ListJobs({});
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->jobs.size(), 1u);
  ReleaseAndJoin();
  EXPECT_EQ(ok, kWriters);
  EXPECT_EQ(commits_, 2) << "one commit for the held write, one for the rest";
  EXPECT_EQ(store_->ListJobs({})->jobs.size(), 2u + kWriters);
}

TEST_F(GroupCommitTest, FailedCommitFailsItsWholeBatchAndNothingElse) {
  second_commit_ = absl::ResourceExhaustedError("disk full (injected)");
  HoldFirstBatch();
  std::vector<absl::Status> results(3);
  for (int i = 0; i < 3; ++i) {
    threads_.emplace_back(
        [&, i] { results[i] = store_->CreateJob(NewJob()).status(); });
  }
  AwaitQueued(3);
  ReleaseAndJoin();
  for (const absl::Status& s : results) {
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_THAT(s.message(), HasSubstr("store: commit failed"));
    EXPECT_THAT(s.message(), HasSubstr("disk full"));
    EXPECT_TRUE(IsStoreWriteFailure(s)) << s;
  }
  EXPECT_EQ(failed_batches_, 1);
  // The held batch committed; the failed one left nothing behind, not even
  // a used job number.
  EXPECT_EQ(store_->ListJobs({})->jobs.size(), 2u);
  auto next = store_->CreateJob(NewJob());
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->record.job.id(), "j-000003");
  EXPECT_EQ(store_->ReadEvents("j-000003", 0, 10)->size(), 1u);
}

TEST_F(GroupCommitTest, OneWritesOwnErrorLeavesTheRestOfItsBatch) {
  HoldFirstBatch();
  absl::Status failed_update, created;
  threads_.emplace_back([&] {
    failed_update =
        store_
            ->UpdateJob("j-000001", Durability::kTransition,
                        [](JobRecord& r, auto& events) -> absl::StatusOr<bool> {
                          r.job.set_state(v1::SCHEDULED);
                          events.emplace_back();
                          return absl::FailedPreconditionError("no, thanks");
                        })
            .status();
  });
  AwaitQueued(1);
  threads_.emplace_back(
      [&] { created = store_->CreateJob(NewJob()).status(); });
  AwaitQueued(2);
  ReleaseAndJoin();
  EXPECT_EQ(failed_update.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(IsStoreWriteFailure(failed_update)) << "its own error";
  EXPECT_EQ(failed_batches_, 0);
  EXPECT_TRUE(created.ok()) << created;
  auto first = store_->GetJob("j-000001");
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->job.state(), v1::QUEUED)
      << "the failed update left no trace";
  EXPECT_EQ(first->last_sequence, 1);
  EXPECT_EQ(store_->ListJobs({})->jobs.size(), 3u);
}

}  // namespace
}  // namespace trainyard::server
