// WatchJob and followed logs: live streams pumped when commits write their
// job, resumable, ended by the terminal event, by the client going away, by
// a revoked token or by shutdown -- and holding no thread while they wait.
#include "server/job_watch.h"

#include <atomic>
#include <random>
#include <thread>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/live_streams.h"
#include "server/server_test_fixture.h"

namespace trainyard::server {
namespace {

using ::testing::HasSubstr;

absl::Status AlwaysOk() { return absl::OkStatus(); }

// The client end of a FollowedStream, as gRPC's callback API is: writes are
// taken on the client's own thread, which then reports them done (false
// when `take` says the client cannot take it: gone), and the stream's end
// is recorded.
template <typename M>
class TestClient final : public StreamSink<M> {
 public:
  explicit TestClient(std::function<bool(const M&)> take)
      : take_(std::move(take)) {}
  ~TestClient() override {
    if (thread_.joinable()) thread_.join();
  }

  // Follows `feed` on `key` until the stream ends; returns how it ended.
  absl::Status Follow(LiveStreams& streams, const std::string& key,
                      typename FollowedStream<M>::Read feed,
                      StreamCheck check = AlwaysOk) {
    Open(streams, key, std::move(feed), std::move(check));
    return Wait();
  }
  void Open(LiveStreams& streams, const std::string& key,
            typename FollowedStream<M>::Read feed,
            StreamCheck check = AlwaysOk) {
    streams_ = &streams;
    stream_ = std::make_shared<FollowedStream<M>>(this, &streams,
                                                  std::move(feed), check);
    thread_ = std::thread([this] { Run(); });
    streams.Add(stream_, key);
  }
  // The call is done: as gRPC's OnDone, the stream is removed.
  absl::Status Wait() {
    thread_.join();
    streams_->Remove(stream_.get());
    absl::MutexLock lock(&mu_);
    return *closed_;
  }
  FollowedStream<M>& stream() { return *stream_; }
  int writes() {
    absl::MutexLock lock(&mu_);
    return writes_;
  }
  bool ended() {
    absl::MutexLock lock(&mu_);
    return closed_.has_value();
  }

  void Write(const M* message) override {
    absl::MutexLock lock(&mu_);
    EXPECT_EQ(inbox_, nullptr) << "a second write in flight";
    EXPECT_FALSE(closed_.has_value()) << "a write after the end";
    inbox_ = message;
    ++writes_;
  }
  void Close(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    EXPECT_EQ(inbox_, nullptr) << "closed with a write in flight";
    EXPECT_FALSE(closed_.has_value()) << "closed twice";
    closed_ = status;
  }

 private:
  void Run() {
    while (true) {
      const M* message;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return inbox_ != nullptr || closed_.has_value();
        };
        mu_.Await(absl::Condition(&ready));
        if (inbox_ == nullptr) return;  // closed
        message = std::exchange(inbox_, nullptr);
      }
      stream_->OnWriteDone(take_(*message));
    }
  }

  const std::function<bool(const M&)> take_;
  LiveStreams* streams_ = nullptr;
  std::shared_ptr<FollowedStream<M>> stream_;
  std::thread thread_;
  absl::Mutex mu_;
  const M* inbox_ ABSL_GUARDED_BY(mu_) = nullptr;
  int writes_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<absl::Status> closed_ ABSL_GUARDED_BY(mu_);
};

using EventClient = TestClient<v1::JobEvent>;
using LogClient = TestClient<v1::LogChunk>;

class JobWatchTest : public ServerLogicTest {
 protected:
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
  // The events a stream from `after` reads to its end (it must end).
  absl::Status Collect(const JobWatcher& watcher, const std::string& id,
                       int64_t after, std::vector<int64_t>* seqs) {
    EventClient client([&](const v1::JobEvent& e) {
      seqs->push_back(e.sequence());
      return true;
    });
    return client.Follow(streams_, id, watcher.Events(id, after));
  }

  LiveStreams streams_{&notifier_};
};

// A commit wakes the watchers of the jobs it wrote and no others (idle
// streams on other jobs cost nothing); a Watch that ended is never called.
TEST(ChangeNotifierTest, ACommitWakesOnlyTheWatchersOfItsJobs) {
  ChangeNotifier n;
  std::atomic<int> a_calls{0}, b_calls{0};
  std::optional<ChangeNotifier::Watch> a =
      n.WatchKey("j-000001", [&] { ++a_calls; });
  std::optional<ChangeNotifier::Watch> also_a =
      n.WatchKey("j-000001", [&] { ++a_calls; });
  const ChangeNotifier::Watch b = n.WatchKey("j-000002", [&] { ++b_calls; });
  EXPECT_EQ(n.watchers("j-000001"), 2);
  n.Notify({"j-000002", "j-000404"});
  EXPECT_EQ(a_calls, 0);
  EXPECT_EQ(b_calls, 1);
  n.Notify({"j-000001"});
  EXPECT_EQ(a_calls, 2) << "both watches of the job";
  also_a.reset();
  n.Notify({"j-000001", "j-000002"});
  EXPECT_EQ(a_calls, 3);
  EXPECT_EQ(b_calls, 2);
  ChangeNotifier::Watch moved = *std::move(a);
  a.reset();  // the moved-from Watch unwatches nothing
  n.Notify({"j-000001"});
  EXPECT_EQ(a_calls, 4) << "the moved Watch still watches";
  EXPECT_EQ(n.Generation(), 4u) << "commits counted";
  EXPECT_EQ(n.watchers("j-000001"), 1);
}

TEST_F(JobWatchTest, FollowsLiveUntilTheTerminalEvent) {
  const std::string id = Submit();
  JobWatcher watcher(store_.get());
  std::vector<v1::JobEvent> seen;
  EventClient client([&](const v1::JobEvent& e) {
    seen.push_back(e);
    return true;
  });
  client.Open(streams_, id, watcher.Events(id, 0));
  FakeWorker& w = Connect("w1");
  RunToSuccess(w, id);
  const absl::Status result = client.Wait();  // ends by itself at SUCCEEDED
  ASSERT_TRUE(result.ok()) << result;
  ASSERT_EQ(seen.size(), 7u);  // QUEUED SCHEDULED RUNNING 3x progress SUCCEEDED
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].sequence(), static_cast<int64_t>(i + 1));
  }
  EXPECT_EQ(seen.back().state_change().to(), v1::SUCCEEDED);
  EXPECT_EQ(streams_.size(), 0);
  EXPECT_EQ(notifier_.watchers(id), 0) << "its watch ended with it";
}

// A job with more events than one read holds: read page after page, at
// once, each event sent once and in order.
TEST_F(JobWatchTest, ReadsPageAfterPage) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_TRUE(w.Started(id, 1).ok());
  for (int step = 1; step <= 20; ++step) {
    ASSERT_TRUE(w.Update(id, 1, [&](v1::JobUpdate& u) {
                   u.mutable_trainer()->mutable_progress()->set_step(step);
                 }).ok());
  }
  ASSERT_TRUE(w.Exited(id, 1, 0).ok());
  JobWatchOptions pages;
  pages.events_per_read = 3;
  JobWatcher watcher(store_.get(), pages);
  std::vector<int64_t> seqs;
  ASSERT_TRUE(Collect(watcher, id, 0, &seqs).ok());
  ASSERT_EQ(seqs.size(), 24u);  // QUEUED SCHEDULED RUNNING 20x SUCCEEDED
  for (size_t i = 0; i < seqs.size(); ++i) {
    EXPECT_EQ(seqs[i], static_cast<int64_t>(i + 1));
  }
}

TEST_F(JobWatchTest, ResumesFromASequenceAndEndsAtOnceAfterTheEnd) {
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  RunToSuccess(w, id);
  JobWatcher watcher(store_.get());
  std::vector<int64_t> seqs;
  ASSERT_TRUE(Collect(watcher, id, 4, &seqs).ok());
  EXPECT_EQ(seqs, (std::vector<int64_t>{5, 6, 7}));
  seqs.clear();
  ASSERT_TRUE(Collect(watcher, id, 7, &seqs).ok());
  EXPECT_TRUE(seqs.empty());
  EXPECT_EQ(Collect(watcher, id, 8, &seqs).code(),
            absl::StatusCode::kOutOfRange);
  absl::Status unknown = Collect(watcher, "j-000999", 0, &seqs);
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
  JobWatcher watcher(store->get());
  std::vector<int64_t> seqs;
  EXPECT_EQ(Collect(watcher, "j-000001", 1, &seqs).code(),
            absl::StatusCode::kOutOfRange);
}

TEST_F(JobWatchTest, EndsWhenTheClientGoesAwayOrTheServerStops) {
  const std::string id = Submit();
  JobWatcher watcher(store_.get());
  // Gone while waiting for the job to change (gRPC's OnCancel).
  EventClient idle([](const v1::JobEvent&) { return true; });
  idle.Open(streams_, id, watcher.Events(id, 0));
  while (idle.writes() == 0) absl::SleepFor(absl::Milliseconds(1));
  idle.stream().OnCancel();
  EXPECT_EQ(idle.Wait().code(), absl::StatusCode::kCancelled);

  // A client that cannot take the next event ends the stream too.
  EventClient refusing([](const v1::JobEvent&) { return false; });
  EXPECT_EQ(refusing.Follow(streams_, id, watcher.Events(id, 0)).code(),
            absl::StatusCode::kCancelled);

  // Shutdown ends the streams open, and any opened after it at once.
  EventClient open([](const v1::JobEvent&) { return true; });
  open.Open(streams_, id, watcher.Events(id, 0));
  while (open.writes() == 0) absl::SleepFor(absl::Milliseconds(1));
  streams_.Shutdown();
  EXPECT_EQ(open.Wait().code(), absl::StatusCode::kUnavailable);
  EventClient late([](const v1::JobEvent&) { return true; });
  EXPECT_EQ(late.Follow(streams_, id, watcher.Events(id, 0)).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(streams_.size(), 0);
}

// A stream checks whether it may go on before each read, not only at its
// rechecks: a token revoked while a busy job keeps writing events (each
// waking the stream well inside the recheck period) still ends its watch
// and its followed log. An idle stream's recheck ends it too.
TEST_F(JobWatchTest, EndsWhenItsCheckFailsWhileEventsKeepComing) {
  LiveStreamsOptions slow;
  slow.recheck = absl::Seconds(30);  // never reached below
  LiveStreams streams(&notifier_, slow);
  const std::string id = Submit();
  FakeWorker& w = Connect("w1");
  Pass();
  ASSERT_TRUE(w.Started(id, 1).ok());
  JobWatcher watcher(store_.get());
  std::atomic<bool> revoked{false};
  auto check = [&] {
    return revoked.load() ? absl::UnauthenticatedError("revoked")
                          : absl::OkStatus();
  };
  EventClient watch([](const v1::JobEvent&) { return true; });
  LogClient follow([](const v1::LogChunk&) { return true; });
  watch.Open(streams, id, watcher.Events(id, 0), check);
  follow.Open(streams, id, watcher.Log(id, 0, true), check);
  for (int step = 1; !(watch.ended() && follow.ended()); ++step) {
    ASSERT_TRUE(w.Update(id, 1, [&](v1::JobUpdate& u) {
                   u.mutable_trainer()->mutable_progress()->set_step(step);
                   u.set_log(absl::StrCat("step ", step, "\n"));
                 }).ok());
    if (step == 5) revoked = true;
    absl::SleepFor(absl::Milliseconds(10));
    if (step == 500) streams.Shutdown();  // ends them (UNAVAILABLE): failed
  }
  const absl::Status watched = watch.Wait();
  const absl::Status followed = follow.Wait();
  EXPECT_EQ(watched.code(), absl::StatusCode::kUnauthenticated) << watched;
  EXPECT_EQ(followed.code(), absl::StatusCode::kUnauthenticated) << followed;

  LiveStreamsOptions fast;
  fast.recheck = absl::Milliseconds(5);
  LiveStreams rechecked(&notifier_, fast);
  revoked = false;
  EventClient idle([](const v1::JobEvent&) { return true; });
  idle.Open(rechecked, id, watcher.Events(id, 0), check);
  while (idle.writes() == 0) absl::SleepFor(absl::Milliseconds(1));
  revoked = true;  // no commit comes: the recheck finds it
  EXPECT_EQ(idle.Wait().code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(JobWatchTest, LogsReadOnceOrFollowedToTheEnd) {
  const std::string id = Submit();
  JobWatcher watcher(store_.get());
  std::string followed;
  LogClient client([&](const v1::LogChunk& c) {
    EXPECT_EQ(c.offset(), static_cast<int64_t>(followed.size()));
    followed += c.data();
    return true;
  });
  client.Open(streams_, id, watcher.Log(id, 0, true));
  FakeWorker& w = Connect("w1");
  RunToSuccess(w, id);
  const absl::Status result = client.Wait();
  ASSERT_TRUE(result.ok()) << result;
  EXPECT_EQ(followed, "step 1\nstep 2\nstep 3\n");

  std::string once;
  LogClient reader([&](const v1::LogChunk& c) {
    once += c.data();
    return true;
  });
  ASSERT_TRUE(reader.Follow(streams_, id, watcher.Log(id, 7, false)).ok());
  EXPECT_EQ(once, "step 2\nstep 3\n");
  LogClient past([](const v1::LogChunk&) { return true; });
  EXPECT_EQ(past.Follow(streams_, id, watcher.Log(id, 1000, false)).code(),
            absl::StatusCode::kOutOfRange);
}

// Many streams wait on one pump thread: none holds it while it waits, and
// a commit to one job wakes its streams only.
TEST_F(JobWatchTest, ManyStreamsWaitWithoutAThreadEach) {
  LiveStreamsOptions one;
  one.threads = 1;
  LiveStreams streams(&notifier_, one);
  JobWatcher watcher(store_.get());
  const std::string busy = Submit();
  const std::string quiet = Submit();
  constexpr int kEach = 100;
  std::vector<std::unique_ptr<EventClient>> clients;
  std::atomic<int> cancelled_seen{0};
  for (int i = 0; i < 2 * kEach; ++i) {
    clients.push_back(std::make_unique<EventClient>([&](const v1::JobEvent& e) {
      if (e.has_state_change() && e.state_change().to() == v1::CANCELLED) {
        ++cancelled_seen;
      }
      return true;
    }));
    const std::string& id = i % 2 == 0 ? busy : quiet;
    clients.back()->Open(streams, id, watcher.Events(id, 0));
  }
  for (auto& c : clients) {
    while (c->writes() == 0) absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(notifier_.watchers(busy), kEach);
  ASSERT_TRUE(lifecycle_->Cancel(busy, "test").ok());
  for (int i = 0; i < 2 * kEach; i += 2) {
    EXPECT_TRUE(clients[i]->Wait().ok());
  }
  EXPECT_EQ(cancelled_seen, kEach);
  EXPECT_EQ(streams.size(), kEach) << "the quiet job's streams still open";
  for (int i = 1; i < 2 * kEach; i += 2) {
    EXPECT_EQ(clients[i]->writes(), 1) << "QUEUED only: never woken";
  }
  streams.Shutdown();
  for (int i = 1; i < 2 * kEach; i += 2) {
    EXPECT_EQ(clients[i]->Wait().code(), absl::StatusCode::kUnavailable);
  }
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
  JobWatcher watcher(store_.get(), small);
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
    JobWatcher w(store_.get(), o);
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
  JobWatcher watcher(store->get());
  EXPECT_EQ(*watcher.TailOffset(id, 1), held->end - 7);  // "line 9\n"
  EXPECT_EQ(*watcher.TailOffset(id, 1000), held->offset);
}

}  // namespace
}  // namespace trainyard::server
