// LiveStreams: runs the server streams that follow a job as it changes
// (WatchJob, GetJobLogs with follow) without a thread each. A stream is
// pumped -- it reads what is new in the store and starts sending it -- on a
// small pool of threads: once when it is added, again whenever a commit
// writes its job (ChangeNotifier) or it asks (after sending what it read),
// and never twice at once. Every `recheck` each stream is asked whether it
// may go on (its token not revoked since it opened). An open stream with
// nothing to send holds no thread, only its state: the transport (gRPC's
// callback API, see FollowedStream's sink) writes and tells it when a write
// is done or the client went away.
//
// FollowedStream<M> is such a stream of messages M: what it reads comes
// from a `Read` function (JobWatcher's feeds), where it sends them is a
// StreamSink<M>. It holds at most one write in flight and ends once: with
// OK when the feed says the end was sent, with the feed's error, the
// check's (UNAUTHENTICATED), CANCELLED when the client went away, or
// UNAVAILABLE when the server shuts down.
//
// Thread-safe. Lock order: ChangeNotifier's lock, then LiveStreams', then a
// stream's; no sink call and no read happens under any of them.
#ifndef TRAINYARD_SERVER_LIVE_STREAMS_H_
#define TRAINYARD_SERVER_LIVE_STREAMS_H_

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/change_notifier.h"
#include "server/stream_check.h"

namespace trainyard::server {

// A stream LiveStreams runs.
class LiveStream {
 public:
  virtual ~LiveStream() = default;
  // Reads what is new and starts sending it, or ends the stream.
  virtual void Pump() = 0;
  // Ends the stream with `status` (once a write in flight is done) unless
  // it has ended.
  virtual void End(absl::Status status) = 0;
  // Ends it if it may no longer go on.
  virtual void Recheck() = 0;
};

struct LiveStreamsOptions {
  int threads = 4;  // pump threads
  absl::Duration recheck = absl::Milliseconds(500);
};

class LiveStreams {
 public:
  explicit LiveStreams(ChangeNotifier* notifier,
                       LiveStreamsOptions options = {});
  ~LiveStreams();  // Shutdown()

  // Runs `stream` until Remove: pumped now and whenever `key` changes.
  // After Shutdown it is ended (UNAVAILABLE) at once instead.
  void Add(std::shared_ptr<LiveStream> stream, const std::string& key);
  // Pumps `stream` again soon (once more if a pump is running).
  void Wake(LiveStream* stream);
  // Forgets `stream` (its call is done); a pump running keeps it alive.
  void Remove(LiveStream* stream);
  // Ends every stream (UNAVAILABLE) and stops the threads. Idempotent.
  void Shutdown();

  int size() const;

 private:
  struct Entry {
    std::shared_ptr<LiveStream> stream;
    std::optional<ChangeNotifier::Watch> watch;
    bool queued = false;   // in queue_
    bool running = false;  // a pump thread has it
    bool again = false;    // woken while running
  };
  void PumpLoop();
  void RecheckLoop();
  std::vector<std::shared_ptr<LiveStream>> All() const;

  ChangeNotifier* const notifier_;
  const LiveStreamsOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<LiveStream*, Entry> streams_ ABSL_GUARDED_BY(mu_);
  std::deque<LiveStream*> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// Where a FollowedStream sends: a write completes with OnWriteDone.
template <typename M>
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  // Sends `*message`, which stays valid until OnWriteDone.
  virtual void Write(const M* message) = 0;
  // Ends the call with `status`; called once, with no write in flight.
  virtual void Close(const absl::Status& status) = 0;
};

// What a feed read: messages to send in order; `more` when more can be
// read at once (a full page), `end` when the stream ends after them.
template <typename M>
struct FeedStep {
  std::vector<M> messages;
  bool more = false;
  bool end = false;
};

template <typename M>
class FollowedStream final : public LiveStream {
 public:
  using Read = std::function<absl::StatusOr<FeedStep<M>>()>;

  // `check` is asked before each read and at each recheck.
  FollowedStream(StreamSink<M>* sink, LiveStreams* streams, Read read,
                 StreamCheck check)
      : sink_(sink),
        streams_(streams),
        read_(std::move(read)),
        check_(std::move(check)) {}

  void Pump() override {
    {
      absl::MutexLock lock(&mu_);
      if (finished_ || ending_.has_value()) return;
      if (writing_) {  // OnWriteDone reads again
        read_again_ = true;
        return;
      }
    }
    if (absl::Status may = check_(); !may.ok()) return End(std::move(may));
    absl::StatusOr<FeedStep<M>> step = read_();  // reads run one at a time
    if (!step.ok()) return End(step.status());
    const M* first = nullptr;
    bool close = false;
    {
      absl::MutexLock lock(&mu_);
      if (finished_ || ending_.has_value()) return;
      read_again_ = step->more;
      end_when_sent_ = step->end;
      for (M& m : step->messages) pending_.push_back(std::move(m));
      if (!pending_.empty()) {
        writing_ = true;
        first = &pending_.front();
      } else if (!end_when_sent_) {
        if (!read_again_) return;  // caught up: the next commit wakes it
        read_again_ = false;
      } else {
        finished_ = close = true;
      }
    }
    if (first != nullptr) return sink_->Write(first);
    if (close) return sink_->Close(absl::OkStatus());
    streams_->Wake(this);
  }

  void End(absl::Status status) override {
    {
      absl::MutexLock lock(&mu_);
      if (finished_ || ending_.has_value()) return;
      if (writing_) {  // OnWriteDone closes
        ending_ = std::move(status);
        return;
      }
      finished_ = true;
    }
    sink_->Close(status);
  }

  void Recheck() override {
    {
      absl::MutexLock lock(&mu_);
      if (finished_ || ending_.has_value()) return;
    }
    if (absl::Status may = check_(); !may.ok()) End(std::move(may));
  }

  // The transport's reactions: the write in flight is done (`ok` false:
  // the client is gone), or the client went away.
  void OnWriteDone(bool ok) {
    enum { kNothing, kWrite, kClose, kRead } next = kNothing;
    absl::Status close;
    const M* message = nullptr;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      pending_.pop_front();
      if (!ok || ending_.has_value()) {
        close = ok ? *std::move(ending_) : GoneError();
        next = kClose;
      } else if (!pending_.empty()) {
        writing_ = true;
        message = &pending_.front();
        next = kWrite;
      } else if (end_when_sent_) {
        next = kClose;
      } else if (read_again_) {
        read_again_ = false;
        next = kRead;
      }
      if (next == kClose) finished_ = true;
    }
    switch (next) {
      case kWrite:
        return sink_->Write(message);
      case kClose:
        return sink_->Close(close);
      case kRead:
        return streams_->Wake(this);
      case kNothing:
        return;
    }
  }
  void OnCancel() { End(GoneError()); }

 private:
  static absl::Status GoneError() {
    return absl::CancelledError("the client went away");
  }

  StreamSink<M>* const sink_;  // not used once finished_
  LiveStreams* const streams_;
  const Read read_;
  const StreamCheck check_;
  absl::Mutex mu_;
  std::deque<M> pending_ ABSL_GUARDED_BY(mu_);  // front: in flight
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // Read again once the writes are done: the feed has more, or the job
  // changed while they were in flight.
  bool read_again_ ABSL_GUARDED_BY(mu_) = false;
  bool end_when_sent_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::Status> ending_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // Close called or calling
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_LIVE_STREAMS_H_
