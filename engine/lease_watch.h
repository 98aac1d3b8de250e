// LeaseWatch: yard-train's end of its worker's lease (--lease-fd). The
// worker writes a line each time the server renews its lease: how many
// milliseconds it still runs ("-1": no lease, nothing to watch). A thread
// reads the lines; when the time last told has passed with no new line,
// `expired` runs. A worker that stops renewing (frozen, hung, swapping,
// gone) is soon declared lost by the server, which starts the job again
// elsewhere: the process must stop first, so that the job never runs in
// two places. The worker's margin puts the time told before the server's
// own deadline.
//
// A line that is not a number is ignored (with a message on stderr); end
// of file stops the reading, not the watch: the time last told still
// holds. Thread-safe; the destructor stops the thread.
#ifndef TRAINYARD_ENGINE_LEASE_WATCH_H_
#define TRAINYARD_ENGINE_LEASE_WATCH_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trainyard::engine {

class LeaseWatch {
 public:
  // Called once, on the watch's thread, with how long past the time told
  // the watch noticed.
  using ExpiredFn = std::function<void(absl::Duration overdue)>;

  // Watches `fd` (not owned; left open). INVALID_ARGUMENT for a negative
  // fd; INTERNAL when the thread's wake-up cannot be made.
  static absl::StatusOr<std::unique_ptr<LeaseWatch>> Start(int fd,
                                                           ExpiredFn expired);
  ~LeaseWatch();
  LeaseWatch(const LeaseWatch&) = delete;
  LeaseWatch& operator=(const LeaseWatch&) = delete;

 private:
  LeaseWatch(int fd, int stop_fd, ExpiredFn expired);
  void Run();
  // Takes the complete lines of `pending_`.
  void TakeLines();

  const int fd_;
  const int stop_fd_;  // an eventfd the destructor writes
  const ExpiredFn expired_;
  std::string pending_;  // a line not yet ended
  // When the lease runs out, on the monotonic clock (ms); -1: none.
  int64_t deadline_ms_ = -1;
  std::thread thread_;  // last: starts after the members it uses
};

// Milliseconds on the monotonic clock (CLOCK_MONOTONIC), which wall-clock
// changes do not move.
int64_t MonotonicMillis();

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_LEASE_WATCH_H_
