// Loopback TCP for the NCCL stand-in. See nccl_wire.h.
#include "engine/cuda/emulation/nccl_wire.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace trainyard::cuda_emulation::nccl {
namespace {

constexpr int kSocketFlags = SOCK_CLOEXEC | SOCK_NONBLOCK;

Outcome SystemError(const std::string& what) {
  return {ncclSystemError, what + ": " + std::strerror(errno)};
}

Outcome Aborted() {
  return {ncclSystemError, "the communicator was aborted (ncclCommAbort)"};
}

// Milliseconds to the deadline, rounded up; 0 once it has passed.
int MillisecondsLeft(const Watch& watch) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(
      watch.deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, INT_MAX));
}

// Waits until `fd` has one of `events` (or an error to report), the
// deadline passes or the communicator is aborted. `fd` -1 waits for the
// deadline or the abort alone.
Outcome Await(int fd, short events, const Watch& watch,
              const std::string& what) {
  while (true) {
    const int ms = MillisecondsLeft(watch);
    if (ms == 0 && fd >= 0) {
      return {ncclSystemError, what + ": timed out"};
    }
    pollfd fds[2] = {{watch.abort_fd, POLLIN, 0}, {fd, events, 0}};
    const int n = poll(fds, fd >= 0 ? 2 : 1, ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return SystemError(what + ": poll");
    if (fds[0].revents != 0) return Aborted();
    if (fd < 0 || fds[1].revents != 0) return {};
  }
}

void SetNoDelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

sockaddr_in Loopback(uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// One attempt: OK with `*fd` connected, ncclRemoteError when refused.
Outcome TryConnect(uint16_t port, const Watch& watch, int* fd) {
  const std::string what = "connecting to 127.0.0.1:" + std::to_string(port);
  const int s = socket(AF_INET, SOCK_STREAM | kSocketFlags, 0);
  if (s < 0) return SystemError(what);
  const sockaddr_in addr = Loopback(port);
  if (connect(s, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) < 0) {
    if (errno != EINPROGRESS) {
      const int e = errno;
      close(s);
      errno = e;
      return e == ECONNREFUSED ? Outcome{ncclRemoteError, "refused"}
                               : SystemError(what);
    }
    if (Outcome o = Await(s, POLLOUT, watch, what); !o.ok()) {
      close(s);
      return o;
    }
    int error = 0;
    socklen_t len = sizeof(error);
    getsockopt(s, SOL_SOCKET, SO_ERROR, &error, &len);
    if (error != 0) {
      close(s);
      errno = error;
      return error == ECONNREFUSED ? Outcome{ncclRemoteError, "refused"}
                                   : SystemError(what);
    }
  }
  SetNoDelay(s);
  *fd = s;
  return {};
}

}  // namespace

int ListenOnLoopback(uint16_t* port, std::string* error) {
  const int s = socket(AF_INET, SOCK_STREAM | kSocketFlags, 0);
  sockaddr_in addr = Loopback(0);
  socklen_t len = sizeof(addr);
  if (s < 0 ||
      bind(s, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) < 0 ||
      listen(s, SOMAXCONN) < 0 ||
      getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) < 0) {
    *error = std::string("listening on 127.0.0.1: ") + std::strerror(errno);
    if (s >= 0) close(s);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return s;
}

Outcome AcceptOne(int listen_fd, const Watch& watch, int* fd) {
  while (true) {
    const int s = accept4(listen_fd, nullptr, nullptr, kSocketFlags);
    if (s >= 0) {
      SetNoDelay(s);
      *fd = s;
      return {};
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return SystemError("accepting a rank");
    }
    if (Outcome o = Await(listen_fd, POLLIN, watch, "waiting for the ranks");
        !o.ok()) {
      return o;
    }
  }
}

Outcome ConnectToLoopback(uint16_t port, const Watch& watch, int* fd) {
  auto backoff = std::chrono::milliseconds(5);
  while (true) {
    Outcome o = TryConnect(port, watch, fd);
    if (o.result != ncclRemoteError) return o;
    if (Clock::now() >= watch.deadline) {
      return {ncclSystemError,
              "nothing listens on 127.0.0.1:" + std::to_string(port) +
                  " (is rank 0 there?)"};
    }
    // Rank 0 may not listen yet: wait a little (or for an abort), retry.
    const Watch pause{watch.abort_fd,
                      std::min(watch.deadline, Clock::now() + backoff)};
    if (Outcome a = Await(-1, 0, pause, ""); !a.ok()) return a;
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
}

Outcome SendAll(int fd, const void* data, size_t bytes, const Watch& watch,
                const std::string& peer) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = send(fd, p, bytes, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      return {ncclRemoteError,
              peer + " closed its connection (it exited, failed or aborted)"};
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return SystemError("sending to " + peer);
    }
    if (Outcome o = Await(fd, POLLOUT, watch, "sending to " + peer); !o.ok()) {
      return o;
    }
  }
  return {};
}

Outcome RecvAll(int fd, void* data, size_t bytes, const Watch& watch,
                const std::string& peer) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = recv(fd, p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0 || errno == ECONNRESET) {
      return {ncclRemoteError,
              peer + " closed its connection (it exited, failed or aborted)"};
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return SystemError("receiving from " + peer);
    }
    if (Outcome o = Await(fd, POLLIN, watch, "receiving from " + peer);
        !o.ok()) {
      return o;
    }
  }
  return {};
}

void ShutDown(int fd) {
  if (fd >= 0) shutdown(fd, SHUT_RDWR);
}

}  // namespace trainyard::cuda_emulation::nccl
