#include "engine/lease_watch.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace trainyard::engine {

int64_t MonotonicMillis() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

absl::StatusOr<std::unique_ptr<LeaseWatch>> LeaseWatch::Start(
    int fd, ExpiredFn expired) {
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lease-fd: must be a file descriptor, got ", fd));
  }
  const int stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd < 0) {
    return absl::InternalError(
        absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  return std::unique_ptr<LeaseWatch>(
      new LeaseWatch(fd, stop_fd, std::move(expired)));
}

LeaseWatch::LeaseWatch(int fd, int stop_fd, ExpiredFn expired)
    : fd_(fd),
      stop_fd_(stop_fd),
      expired_(std::move(expired)),
      thread_([this] { Run(); }) {}

LeaseWatch::~LeaseWatch() {
  const uint64_t one = 1;
  ssize_t unused = write(stop_fd_, &one, sizeof(one));
  (void)unused;
  thread_.join();
  close(stop_fd_);
}

void LeaseWatch::TakeLines() {
  size_t start = 0;
  for (size_t nl = pending_.find('\n'); nl != std::string::npos;
       nl = pending_.find('\n', start)) {
    const absl::string_view line = absl::StripAsciiWhitespace(
        absl::string_view(pending_).substr(start, nl - start));
    start = nl + 1;
    int64_t ms = 0;
    if (!absl::SimpleAtoi(line, &ms) || ms < -1) {
      std::cerr << "yard-train: --lease-fd: ignoring \"" << line
                << "\" (expected milliseconds, or -1)" << std::endl;
      continue;
    }
    deadline_ms_ = ms < 0 ? -1 : MonotonicMillis() + ms;
  }
  pending_.erase(0, start);
  // A worker does not send lines this long; a stream that does is not one.
  if (pending_.size() > 4096) pending_.clear();
}

void LeaseWatch::Run() {
  bool reading = true;
  while (true) {
    pollfd fds[2] = {{stop_fd_, POLLIN, 0}, {reading ? fd_ : -1, POLLIN, 0}};
    int timeout = -1;
    if (deadline_ms_ >= 0) {
      timeout = static_cast<int>(
          std::max<int64_t>(0, deadline_ms_ - MonotonicMillis()));
    }
    const int n = poll(fds, 2, timeout);
    if (n < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;  // stopping
    if (fds[1].revents != 0) {
      char buf[512];
      const ssize_t got = read(fd_, buf, sizeof(buf));
      if (got > 0) {
        pending_.append(buf, static_cast<size_t>(got));
        TakeLines();
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        reading = false;  // the worker is gone: the time told still holds
      }
    }
    if (deadline_ms_ >= 0 && MonotonicMillis() >= deadline_ms_) {
      expired_(absl::Milliseconds(MonotonicMillis() - deadline_ms_));
      return;
    }
  }
}

}  // namespace trainyard::engine
