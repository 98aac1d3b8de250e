#include "tests/tcp_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace trainyard::itest {
namespace {

constexpr size_t kBufferLimit = 256 * 1024;  // per direction

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

void SetNoDelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// A new connection to the target, non-blocking once connected; -1 if the
// target refuses (a test's server that is down).
int ConnectTo(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const sockaddr_in addr = Loopback(port);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) !=
      0) {
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  SetNoDelay(fd);
  return fd;
}

// One proxied connection: fd[0] the client's, fd[1] the target's. Bytes
// read from fd[d] wait in buf[d] until written to fd[1 - d].
struct Pair {
  int fd[2] = {-1, -1};
  std::string buf[2];
  bool eof[2] = {false, false};   // fd[d] reached end of stream
  bool shut[2] = {false, false};  // that end was passed on to fd[1 - d]
  bool dead = false;

  bool done() const { return dead || (shut[0] && shut[1]); }
  short Events(int side) const {
    short events = 0;
    if (!eof[side] && buf[side].size() < kBufferLimit) events |= POLLIN;
    if (!buf[1 - side].empty()) events |= POLLOUT;
    return events;
  }
  void Read(int d) {
    char chunk[64 * 1024];
    const ssize_t n = recv(fd[d], chunk, sizeof(chunk), MSG_DONTWAIT);
    if (n > 0) {
      buf[d].append(chunk, static_cast<size_t>(n));
    } else if (n == 0) {
      eof[d] = true;
    } else if (errno != EAGAIN && errno != EINTR) {
      dead = true;
    }
  }
  void Write(int d) {  // buf[d] to fd[1 - d]
    if (buf[d].empty()) return;
    const ssize_t n = send(fd[1 - d], buf[d].data(), buf[d].size(),
                           MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      buf[d].erase(0, static_cast<size_t>(n));
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      dead = true;
    }
  }
  void PassOnEnds() {
    for (int d = 0; d < 2; ++d) {
      if (eof[d] && buf[d].empty() && !shut[d]) {
        shutdown(fd[1 - d], SHUT_WR);
        shut[d] = true;
      }
    }
  }
  void Close() {
    for (int& f : fd) {
      if (f >= 0) close(f);
      f = -1;
    }
  }
};

}  // namespace

// The proxy thread's state. Mode changes are numbered; the thread records
// the last one it applied so SetMode can wait for it.
class TcpProxy::Loop {
 public:
  Loop(int listen_fd, int wake_fd, int target_port)
      : listen_fd_(listen_fd), wake_fd_(wake_fd), target_port_(target_port) {}

  ~Loop() {
    for (Pair& p : pairs_) p.Close();
    close(listen_fd_);
    close(wake_fd_);
  }

  void Run() {
    while (true) {
      Mode mode;
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
        mode = mode_;
        if (mode == Mode::kCut) CloseAll();
        applied_ = requested_;
      }
      Step(mode);
    }
  }

  // Returns once the thread applied `mode` (or stopped).
  void Set(Mode mode, bool stop) {
    absl::MutexLock lock(&mu_);
    mode_ = mode;
    stopping_ = stopping_ || stop;
    const uint64_t wanted = ++requested_;
    const uint64_t one = 1;
    ssize_t unused = write(wake_fd_, &one, sizeof(one));
    (void)unused;
    if (stop) return;
    auto applied = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return applied_ >= wanted || stopping_;
    };
    mu_.Await(absl::Condition(&applied));
  }

  int64_t accepted() const {
    absl::MutexLock lock(&mu_);
    return accepted_;
  }

 private:
  void CloseAll() {
    for (Pair& p : pairs_) p.Close();
    pairs_.clear();
  }

  // One poll() and what it found. A blackhole polls nothing but the wake
  // fd: bytes and connections wait in the kernel.
  void Step(Mode mode) {
    std::vector<pollfd> fds = {{wake_fd_, POLLIN, 0}};
    if (mode != Mode::kBlackhole) fds.push_back({listen_fd_, POLLIN, 0});
    if (mode == Mode::kForward) {
      for (const Pair& p : pairs_) {
        fds.push_back({p.fd[0], p.Events(0), 0});
        fds.push_back({p.fd[1], p.Events(1), 0});
      }
    }
    if (poll(fds.data(), fds.size(), -1) < 0) return;  // EINTR: again
    if (fds[0].revents != 0) {
      uint64_t count;
      ssize_t unused = read(wake_fd_, &count, sizeof(count));
      (void)unused;
    }
    if (mode == Mode::kBlackhole) return;
    if (fds[1].revents != 0) Accept(mode);
    if (mode != Mode::kForward) return;
    // pairs_ may have grown in Accept; only the polled ones have results.
    for (size_t i = 0; 2 + 2 * i + 1 < fds.size(); ++i) {
      Pair& p = pairs_[i];
      for (int side = 0; side < 2; ++side) {
        const short revents = fds[2 + 2 * i + side].revents;
        if (revents & (POLLIN | POLLHUP | POLLERR)) p.Read(side);
        if (revents & POLLOUT) p.Write(1 - side);
      }
      p.PassOnEnds();
    }
    for (auto it = pairs_.begin(); it != pairs_.end();) {
      if (it->done()) {
        it->Close();
        it = pairs_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void Accept(Mode mode) {
    const int client =
        accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (client < 0) return;
    {
      absl::MutexLock lock(&mu_);
      ++accepted_;
    }
    const int upstream = mode == Mode::kForward ? ConnectTo(target_port_) : -1;
    if (upstream < 0) {  // cut, or the target is down: refuse
      close(client);
      return;
    }
    SetNoDelay(client);
    Pair& p = pairs_.emplace_back();
    p.fd[0] = client;
    p.fd[1] = upstream;
  }

  const int listen_fd_;
  const int wake_fd_;
  const int target_port_;
  std::vector<Pair> pairs_;  // the proxy thread's alone

  mutable absl::Mutex mu_;
  Mode mode_ ABSL_GUARDED_BY(mu_) = Mode::kForward;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t requested_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t applied_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t accepted_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::StatusOr<std::unique_ptr<TcpProxy>> TcpProxy::Start(
    const std::string& target) {
  const size_t colon = target.rfind(':');
  int port = 0;
  const absl::string_view host =
      colon == std::string::npos ? ""
                                 : absl::string_view(target).substr(0, colon);
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(absl::string_view(target).substr(colon + 1), &port) ||
      port <= 0 || port > 65535 ||
      (host != "127.0.0.1" && host != "localhost")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TcpProxy target must be 127.0.0.1:PORT, got \"", target, "\""));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in addr = Loopback(0);
  socklen_t len = sizeof(addr);
  if (fd < 0 ||
      bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 128) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string error = strerror(errno);
    if (fd >= 0) close(fd);
    return absl::InternalError(absl::StrCat("TcpProxy listen: ", error));
  }
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("eventfd: ", strerror(errno)));
  }
  return std::unique_ptr<TcpProxy>(new TcpProxy(
      fd, wake, port, absl::StrCat("127.0.0.1:", ntohs(addr.sin_port))));
}

TcpProxy::TcpProxy(int listen_fd, int wake_fd, int target_port,
                   std::string address)
    : address_(std::move(address)),
      loop_(std::make_unique<Loop>(listen_fd, wake_fd, target_port)),
      thread_([this] { loop_->Run(); }) {}

TcpProxy::~TcpProxy() {
  loop_->Set(Mode::kCut, /*stop=*/true);
  thread_.join();
}

void TcpProxy::SetMode(Mode mode) { loop_->Set(mode, /*stop=*/false); }

int64_t TcpProxy::accepted() const { return loop_->accepted(); }

}  // namespace trainyard::itest
