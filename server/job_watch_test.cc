// WatchJob and followed logs: live streams woken by commits, resumable,
// ended by the terminal event, by the client going away, or by shutdown.
#include "server/job_watch.h"

#include <atomic>
#include <random>
#include <thread>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server_test_fixture.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;

class JobWatchTest : public ServerLogicTest {
 protected:
  JobWatchOptions FastRecheck() {
    JobWatchOptions o;
    o.recheck = absl::Milliseconds(5);
    return o;
  }
  // Runs job `id` to success on worker `w`, logging on the way.
  void RunToSuccess(FakeWorker& w, const std::string& id) {
    Pass();
    ASSERT_TRUE(w.Started(id, 1).ok());
    for (int step = 1; step <= 3; ++step) {
      ASSERT_TRUE(w.Update(id, 1, [&](v1::JobUpdate& u) {
                     u.mutable_trainer()->mutable_progress()->set_step(step);
                   }).ok());
      ASSERT_TRUE(w.Update(id, 1, [&](v1::JobUpdate& u) {
                     u.set_log(absl::StrCat("step ", step, "\n"));
                   }).ok());
    }
    ASSERT_TRUE(w.Exited(id, 1, 0).ok());
  }
};

// A commit wakes the watchers of the jobs it wrote and no others (idle
// streams on other jobs cost nothing); NotifyAll and Shutdown wake all.
TEST(ChangeNotifierTest, ACommitWakesOnlyTheWatchersOfItsJobs) {
  ChangeNotifier n;
  const ChangeNotifier::Watch a = n.WatchKey("j-000001");
  const ChangeNotifier::Watch also_a = n.WatchKey("j-000001");
  const ChangeNotifier::Watch b = n.WatchKey("j-000002");
  const uint64_t seen_a = n.Generation(a);
  const uint64_t seen_b = n.Generation(b);
  n.Notify({"j-000002", "j-000404"});
  EXPECT_EQ(n.WaitForChange(a, seen_a, absl::Milliseconds(20)),
            ChangeNotifier::Wake::kTimeout);
  EXPECT_EQ(n.WaitForChange(b, seen_b, absl::Milliseconds(20)),
            ChangeNotifier::Wake::kChanged);
  // A waiter blocked on its job wakes when that job changes.
  std::thread notify([&] {
    absl::SleepFor(absl::Milliseconds(50));
    n.Notify({"j-000001"});
  });
  EXPECT_EQ(n.WaitForChange(a, seen_a, absl::Seconds(30)),
            ChangeNotifier::Wake::kChanged);
  notify.join();
  EXPECT_EQ(n.Generation(also_a), n.Generation(a));
  const uint64_t now_b = n.Generation(b);
  n.NotifyAll();
  EXPECT_EQ(n.WaitForChange(b, now_b, absl::Milliseconds(20)),
            ChangeNotifier::Wake::kChanged);
  EXPECT_EQ(n.Generation(), 3u) << "commits counted";
  n.Shutdown();
  EXPECT_EQ(n.WaitForChange(b, n.Generation(b), absl::Seconds(30)),
            ChangeNotifier::Wake::kShutdown);
}

TEST_F(JobWatchTest, FollowsLiveUntilTheTerminalEvent) {
  const std::string id = Submit();
  JobWatcher watcher(store_.get(), &notifier_);
  std::vector<v1::JobEvent> seen;
  absl::Status result;
  std::thread watch([&] {
    result = watcher.WatchEvents(
        id, 0,
        [&](const v1::JobEvent& e) {
          seen.push_back(e);
          return true;
        },
        [] { return absl::OkStatus(); });
  });
  FakeWorker& w = Connect("w1");
  RunToSuccess(w, id);
  watch.join();  // returns by itself after SUCCEEDED
  ASSERT_TRUE(result.ok()) << result;
  ASSERT_EQ(seen.size(), 7u);  // QUEUED SCHEDULED RUNNING 3x progress SUCCEEDED
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].sequence(), static_cast<int64_t>(i + 1));
  }
  EXPECT_EQ(seen.back().state_change().to(), v1::SUCCEEDED);
}

TEST_F(JobWatchTest, ResumesFromASequenceAndEndsAtOnceAfterTheEnd) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  RunToSuccess(w, id);
  JobWatcher watcher(store_.get(), &notifier_);
  std::vector<int64_t> seqs;
  auto collect = [&](const v1::JobEvent& e) {
    seqs.push_back(e.sequence());
    return true;
  };
  ASSERT_TRUE(
      watcher.WatchEvents(id, 4, collect, [] { return absl::OkStatus(); })
          .ok());
  EXPECT_EQ(seqs, (std::vector<int64_t>{5, 6, 7}));
  seqs.clear();
  ASSERT_TRUE(
      watcher.WatchEvents(id, 7, collect, [] { return absl::OkStatus(); })
          .ok());
  EXPECT_TRUE(seqs.empty());
  EXPECT_EQ(watcher.WatchEvents(id, 8, collect, [] { return absl::OkStatus(); })
                .code(),
            absl::StatusCode::kOutOfRange);
  absl::Status unknown = watcher.WatchEvents("j-000999", 0, collect,
                                             [] { return absl::OkStatus(); });
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.message(), HasSubstr("j-000999"));
}

TEST_F(JobWatchTest, PrunedSequenceIsOutOfRange) {
  JobStoreOptions so;
  so.path = dir_.File("pruned.db");
  so.trainer_events_kept = 1;
  auto store = JobStore::Open(so);
  ASSERT_TRUE(store.ok());
  v1::Job job;
  job.set_tenant("default");
  ASSERT_TRUE((*store)->CreateJob(job).ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*store)
                    ->UpdateJob("j-000001", Durability::kTelemetry,
                                [](JobRecord&, auto& events) {
                                  events.emplace_back()
                                      .mutable_trainer()
                                      ->mutable_progress();
                                  return true;
                                })
                    .ok());
  }
  JobWatcher watcher(store->get(), &notifier_);
  absl::Status s = watcher.WatchEvents(
      "j-000001", 1, [](const v1::JobEvent&) { return true; },
      [] { return absl::OkStatus(); });
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
}

TEST_F(JobWatchTest, EndsWhenTheClientGoesAwayOrTheServerStops) {
  const std::string id = Submit();
  JobWatcher watcher(store_.get(), &notifier_, FastRecheck());
  std::atomic<bool> gone{false};
  absl::Status result;
  std::thread watch([&] {
    result = watcher.WatchEvents(
        id, 0, [](const v1::JobEvent&) { return true; },
        [&] {
          return gone.load() ? absl::CancelledError("gone") : absl::OkStatus();
        });
  });
  gone = true;
  watch.join();
  EXPECT_EQ(result.code(), absl::StatusCode::kCancelled);

  // A client that cannot take the next event ends the stream too.
  EXPECT_EQ(watcher
                .WatchEvents(
                    id, 0, [](const v1::JobEvent&) { return false; },
                    [] { return absl::OkStatus(); })
                .code(),
            absl::StatusCode::kCancelled);

  std::thread watch2([&] {
    result = watcher.WatchEvents(
        id, 0, [](const v1::JobEvent&) { return true; },
        [] { return absl::OkStatus(); });
  });
  notifier_.Shutdown();
  watch2.join();
  EXPECT_EQ(result.code(), absl::StatusCode::kUnavailable);
}

// A stream checks whether it may go on before each read, not only when
// nothing happens for a while: a token revoked while a busy job keeps
// writing events (each waking the stream well inside the recheck period)
// still ends its watch and its followed log.
TEST_F(JobWatchTest, EndsWhenItsCheckFailsWhileEventsKeepComing) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_TRUE(w.Started(id, 1).ok());
  JobWatchOptions slow;
  slow.recheck = absl::Seconds(30);  // never reached below
  JobWatcher watcher(store_.get(), &notifier_, slow);
  std::atomic<bool> revoked{false};
  auto check = [&] {
    return revoked.load() ? absl::UnauthenticatedError("revoked")
                          : absl::OkStatus();
  };
  std::atomic<int> ended{0};
  absl::Status watched, followed;
  std::thread watch([&] {
    watched = watcher.WatchEvents(
        id, 0, [](const v1::JobEvent&) { return true; }, check);
    ++ended;
  });
  std::thread follow([&] {
    followed = watcher.StreamLog(
        id, 0, true, [](const v1::LogChunk&) { return true; }, check);
    ++ended;
  });
  for (int step = 1; step <= 1000 && ended.load() < 2; ++step) {
    ASSERT_TRUE(w.Update(id, 1, [&](v1::JobUpdate& u) {
                   u.mutable_trainer()->mutable_progress()->set_step(step);
                   u.set_log(absl::StrCat("step ", step, "\n"));
                 }).ok());
    if (step == 5) revoked = true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  notifier_.Shutdown();  // ends them (UNAVAILABLE) if the check did not
  watch.join();
  follow.join();
  EXPECT_EQ(watched.code(), absl::StatusCode::kUnauthenticated) << watched;
  EXPECT_EQ(followed.code(), absl::StatusCode::kUnauthenticated) << followed;
}

TEST_F(JobWatchTest, LogsReadOnceOrFollowedToTheEnd) {
  const std::string id = Submit();
  JobWatcher watcher(store_.get(), &notifier_);
  std::string followed;
  absl::Status result;
  std::thread follow([&] {
    result = watcher.StreamLog(
        id, 0, true,
        [&](const v1::LogChunk& c) {
          EXPECT_EQ(c.offset(), static_cast<int64_t>(followed.size()));
          followed += c.data();
          return true;
        },
        [] { return absl::OkStatus(); });
  });
  FakeWorker& w = Connect("w1");
  RunToSuccess(w, id);
  follow.join();
  ASSERT_TRUE(result.ok()) << result;
  EXPECT_EQ(followed, "step 1\nstep 2\nstep 3\n");

  std::string once;
  ASSERT_TRUE(watcher
                  .StreamLog(
                      id, 7, false,
                      [&](const v1::LogChunk& c) {
                        once += c.data();
                        return true;
                      },
                      [] { return absl::OkStatus(); })
                  .ok());
  EXPECT_EQ(once, "step 2\nstep 3\n");
  EXPECT_EQ(watcher
                .StreamLog(
                    id, 1000, false, [](const v1::LogChunk&) { return true; },
                    [] { return absl::OkStatus(); })
                .code(),
            absl::StatusCode::kOutOfRange);
}

// Where the last `lines` lines of `log` begin, the plain way.
int64_t NaiveTail(const std::string& log, int64_t lines) {
  int64_t at = static_cast<int64_t>(log.size());
  if (at > 0 && log.back() == '\n') --at;  // the last line's own newline
  while (at > 0) {
    const size_t nl = log.rfind('\n', static_cast<size_t>(at - 1));
    if (nl == std::string::npos) return 0;
    if (--lines == 0) return static_cast<int64_t>(nl) + 1;
    at = static_cast<int64_t>(nl);
  }
  return 0;
}

TEST_F(JobWatchTest, TailOffsetFindsTheLastLinesAcrossChunks) {
  const std::string id = Submit();
  JobWatchOptions small;
  small.log_chunk_bytes = 3;  // lines cross every chunk boundary
  JobWatcher watcher(store_.get(), &notifier_, small);
  EXPECT_EQ(*watcher.TailOffset(id, 5), 0) << "an empty log";
  ASSERT_TRUE(store_->AppendLog(id, "a\nbb\nccc\n").ok());
  EXPECT_EQ(*watcher.TailOffset(id, 1), 5);
  EXPECT_EQ(*watcher.TailOffset(id, 2), 2);
  EXPECT_EQ(*watcher.TailOffset(id, 3), 0);
  EXPECT_EQ(*watcher.TailOffset(id, 100), 0);
  ASSERT_TRUE(store_->AppendLog(id, "dd").ok());  // a line still being written
  EXPECT_EQ(*watcher.TailOffset(id, 1), 9);
  EXPECT_EQ(*watcher.TailOffset(id, 2), 5);
  EXPECT_EQ(watcher.TailOffset("j-999999", 1).status().code(),
            absl::StatusCode::kNotFound);

  // Against the plain way, over logs of every shape and several chunk sizes.
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    const std::string job = Submit();
    std::string log;
    const int pieces = static_cast<int>(rng() % 6);
    for (int i = 0; i < pieces; ++i) {
      std::string piece;
      for (uint32_t n = rng() % 9; n > 0; --n) {
        piece.push_back(rng() % 3 == 0 ? '\n' : 'x');
      }
      if (piece.empty()) continue;
      ASSERT_TRUE(store_->AppendLog(job, piece).ok());
      log += piece;
    }
    JobWatchOptions o;
    o.log_chunk_bytes = 1 + static_cast<int64_t>(rng() % 7);
    JobWatcher w(store_.get(), &notifier_, o);
    for (int64_t lines = 1; lines <= 6; ++lines) {
      EXPECT_EQ(*w.TailOffset(job, lines), NaiveTail(log, lines))
          << "log \"" << absl::CHexEscape(log) << "\", " << lines
          << " lines, chunks of " << o.log_chunk_bytes;
    }
  }
}

TEST_F(JobWatchTest, TailOffsetStopsAtTheOldestByteHeld) {
  JobStoreOptions so;
  so.path = dir_.File("trimmed.db");
  so.log_bytes_kept = 8;
  auto store = JobStore::Open(so);
  ASSERT_TRUE(store.ok()) << store.status();
  v1::Job job;
  job.set_tenant("t");
  auto created = (*store)->CreateJob(job);
  ASSERT_TRUE(created.ok()) << created.status();
  const std::string id = created->record.job.id();
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE((*store)->AppendLog(id, absl::StrCat("line ", i, "\n")).ok());
  }
  auto held = (*store)->ReadLog(id, 0, 0);
  ASSERT_TRUE(held.ok());
  ASSERT_GT(held->offset, 0) << "the head was trimmed";
  JobWatcher watcher(store->get(), &notifier_);
  EXPECT_EQ(*watcher.TailOffset(id, 1), held->end - 7);  // "line 9\n"
  EXPECT_EQ(*watcher.TailOffset(id, 1000), held->offset);
}

}  // namespace
}  // namespace trainyard::server
