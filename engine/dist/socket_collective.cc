#include "engine/dist/socket_collective.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/read_file.h"
#include "common/replace_file.h"
#include "common/status_macros.h"

namespace trainyard::engine {
namespace {

constexpr char kHelloMagic[4] = {'Y', 'R', 'D', '1'};
constexpr uint32_t kReduceMagic = 0x59415231;  // "YAR1"
constexpr size_t kNonceChars = 32;
constexpr absl::Duration kRetryPeriod = absl::Milliseconds(20);

absl::Status StopRequested(const SocketCollectiveOptions& options) {
  if (options.stop == nullptr || !options.stop->load()) {
    return absl::OkStatus();
  }
  return absl::CancelledError(
      "stopped while waiting for the other ranks to meet");
}

struct Hello {
  char magic[4];
  char nonce[kNonceChars];
  int32_t rank;
  int32_t world_size;
};

struct ReduceHeader {
  uint32_t magic;
  uint32_t reserved;
  uint64_t call;
  int64_t floats;
};

std::string Errno(absl::string_view what) {
  return absl::StrCat(what, ": ", strerror(errno));
}

std::string NewNonce() {
  std::random_device random;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string nonce(kNonceChars, '0');
  for (char& c : nonce) c = kHex[random() % 16];
  return nonce;
}

void SetTimeouts(int fd, absl::Duration timeout) {
  const timeval tv = absl::ToTimeval(timeout);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// A peer's process exited or died: its end closed (or reset) the socket.
absl::Status PeerGone(absl::string_view peer) {
  return absl::UnavailableError(
      absl::StrCat(peer, " closed its connection (it exited or died)"));
}

// Sends or receives exactly `bytes`; `peer` names the other side in errors.
absl::Status SendAll(int fd, const void* data, size_t bytes,
                     absl::string_view peer) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = send(fd, p, bytes, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return absl::UnavailableError(
          absl::StrCat("timed out sending to ", peer));
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      return PeerGone(peer);
    }
    if (n <= 0) {
      return absl::UnavailableError(Errno(absl::StrCat("sending to ", peer)));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status RecvAll(int fd, void* data, size_t bytes, absl::string_view peer) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = recv(fd, p, bytes, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return absl::UnavailableError(
          absl::StrCat("timed out waiting for ", peer));
    }
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return PeerGone(peer);
    if (n < 0) {
      return absl::UnavailableError(
          Errno(absl::StrCat("receiving from ", peer)));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

std::string RankName(int rank) { return absl::StrCat("rank ", rank); }

// The tensors one after another in `out` (`total` floats), and back.
void Pack(std::span<const FloatSpan> tensors, int64_t total,
          std::vector<float>* out) {
  out->resize(total);
  float* at = out->data();
  for (const FloatSpan& t : tensors) at = std::copy_n(t.data, t.size, at);
}

void Unpack(const std::vector<float>& packed,
            std::span<const FloatSpan> tensors) {
  const float* at = packed.data();
  for (const FloatSpan& t : tensors) {
    std::copy_n(at, t.size, t.data);
    at += t.size;
  }
}

// The published rendezvous: where rank 0 listens and the job's nonce.
struct Address {
  std::string host;
  int port = 0;
  std::string nonce;
};

// "10.0.0.5:4000", "[fd00::5]:4000".
std::string HostPort(const Address& a) {
  return a.host.find(':') == std::string::npos
             ? absl::StrCat(a.host, ":", a.port)
             : absl::StrCat("[", a.host, "]:", a.port);
}

std::optional<Address> ReadAddress(const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile(path, 4096);
  if (!text.ok()) return std::nullopt;
  std::vector<std::string> parts =
      absl::StrSplit(absl::StripAsciiWhitespace(*text), ' ');
  Address a;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[1], &a.port) ||
      parts[2].size() != kNonceChars) {
    return std::nullopt;
  }
  a.host = parts[0];
  a.nonce = parts[2];
  return a;
}

// A connected socket to host:port, or -1.
int Dial(const Address& a) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(a.host.c_str(), std::to_string(a.port).c_str(), &hints,
                  &found) != 0) {
    return -1;
  }
  int fd = -1;
  for (addrinfo* ai = found; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SocketCollective>> SocketCollective::Connect(
    const SocketCollectiveOptions& options) {
  if (options.world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "world size must be at least 1, got ", options.world_size));
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is outside the world of ",
                     options.world_size, " ranks"));
  }
  if (options.world_size > 1 && options.rendezvous_file.empty()) {
    return absl::InvalidArgumentError(
        "a job of several ranks needs a rendezvous file");
  }
  std::unique_ptr<SocketCollective> c(new SocketCollective(
      options.rank, options.world_size, options.io_timeout));
  if (options.world_size == 1) return c;
  if (options.rank == 0) {
    RETURN_IF_ERROR(c->ServeRendezvous(options));
  } else {
    RETURN_IF_ERROR(c->JoinRendezvous(options));
  }
  return c;
}

SocketCollective::~SocketCollective() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (server_.joinable()) {
    // An all-reduce still in flight (its caller gave up) must not keep the
    // thread in a receive for io_timeout.
    ShutDownSockets();
    server_.join();
  }
  for (int fd : peers_) {
    if (fd >= 0) close(fd);
  }
}

void SocketCollective::ShutDownSockets() {
  for (int fd : peers_) {
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
  }
}

absl::Status SocketCollective::ServeRendezvous(
    const SocketCollectiveOptions& options) {
  peers_.assign(world_size_, -1);
  // An IPv4 or IPv6 literal (no hostname: rank 0 binds to it, so it must
  // name one address of this node).
  sockaddr_storage addr{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  socklen_t len = 0;
  if (inet_pton(AF_INET, options.listen_host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    len = sizeof(*v4);
  } else if (inet_pton(AF_INET6, options.listen_host.c_str(), &v6->sin6_addr) ==
             1) {
    v6->sin6_family = AF_INET6;
    len = sizeof(*v6);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous host \"", options.listen_host,
                     "\" is not an IPv4 or IPv6 address"));
  }
  const int listener = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) return absl::InternalError(Errno("socket"));
  absl::Cleanup close_listener = [listener] { close(listener); };
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      listen(listener, world_size_) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::UnavailableError(
        Errno(absl::StrCat("listening on ", options.listen_host)));
  }
  const int port =
      ntohs(addr.ss_family == AF_INET ? v4->sin_port : v6->sin6_port);
  const std::string nonce = NewNonce();
  // "host port nonce": the host needs no brackets, the port is its own word.
  RETURN_IF_ERROR(ReplaceFileDurably(
      options.rendezvous_file,
      absl::StrCat(options.listen_host, " ", port, " ", nonce, "\n")));

  const absl::Time deadline = absl::Now() + options.connect_timeout;
  int joined = 1;
  while (joined < world_size_) {
    RETURN_IF_ERROR(StopRequested(options));
    const absl::Duration left = deadline - absl::Now();
    pollfd pfd{listener, POLLIN, 0};
    const int ready =
        left <= absl::ZeroDuration()
            ? 0
            : poll(&pfd, 1,
                   absl::ToInt64Milliseconds(std::min(left, kRetryPeriod)) + 1);
    if (ready == 0 && absl::Now() < deadline) continue;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      return absl::DeadlineExceededError(absl::StrCat(
          "only ", joined, " of ", world_size_, " ranks met within ",
          absl::FormatDuration(options.connect_timeout), " at ",
          options.rendezvous_file));
    }
    const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    SetTimeouts(fd, absl::Seconds(5));
    Hello hello;
    const bool valid =
        RecvAll(fd, &hello, sizeof(hello), "a joining rank").ok() &&
        memcmp(hello.magic, kHelloMagic, 4) == 0 &&
        std::string(hello.nonce, kNonceChars) == nonce &&
        hello.world_size == world_size_ && hello.rank > 0 &&
        hello.rank < world_size_ && peers_[hello.rank] < 0;
    // Anything else (a stray connection, a rank of an older attempt) is
    // turned away without an answer; it retries or gives up on its own.
    if (!valid || !SendAll(fd, kHelloMagic, 4, "a joining rank").ok()) {
      close(fd);
      continue;
    }
    SetTimeouts(fd, io_timeout_);
    peers_[hello.rank] = fd;
    ++joined;
  }
  return absl::OkStatus();
}

absl::Status SocketCollective::JoinRendezvous(
    const SocketCollectiveOptions& options) {
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  // The file may be missing (rank 0 not up yet) or left by an earlier
  // attempt, so each failure is retried until the deadline.
  std::string last_problem = "no rendezvous file yet";
  while (absl::Now() < deadline) {
    RETURN_IF_ERROR(StopRequested(options));
    std::optional<Address> address = ReadAddress(options.rendezvous_file);
    const int fd = address ? Dial(*address) : -1;
    if (fd >= 0) {
      SetTimeouts(fd, absl::Seconds(5));
      Hello hello{};
      memcpy(hello.magic, kHelloMagic, 4);
      memcpy(hello.nonce, address->nonce.data(), kNonceChars);
      hello.rank = rank_;
      hello.world_size = world_size_;
      char answer[4];
      if (SendAll(fd, &hello, sizeof(hello), RankName(0)).ok() &&
          RecvAll(fd, answer, 4, RankName(0)).ok() &&
          memcmp(answer, kHelloMagic, 4) == 0) {
        SetTimeouts(fd, io_timeout_);
        peers_ = {fd};
        return absl::OkStatus();
      }
      close(fd);
      last_problem = absl::StrCat("rank 0 at ", HostPort(*address),
                                  " turned this rank away");
    } else if (address) {
      last_problem =
          absl::StrCat("cannot connect to rank 0 at ", HostPort(*address));
    }
    std::this_thread::sleep_for(absl::ToChronoNanoseconds(kRetryPeriod));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("rank ", rank_, " could not join rank 0 within ",
                   absl::FormatDuration(options.connect_timeout), " via ",
                   options.rendezvous_file, ": ", last_problem));
}

absl::Status SocketCollective::AllReduceSum(
    std::span<const FloatSpan> tensors) {
  StartAllReduceSum({tensors.begin(), tensors.end()});
  return WaitAll();
}

void SocketCollective::StartAllReduceSum(std::vector<FloatSpan> tensors) {
  if (world_size_ == 1) return;
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(tensors));
  if (!server_.joinable()) server_ = std::thread([this] { Serve(); });
}

absl::Status SocketCollective::WaitAll() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](SocketCollective* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
        return c->queue_.empty() && !c->busy_;
      },
      this));
  absl::Status status = started_error_;
  started_error_ = absl::OkStatus();
  return status;
}

void SocketCollective::Serve() {
  while (true) {
    std::vector<FloatSpan> tensors;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](SocketCollective* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
            return !c->queue_.empty() || c->stopping_;
          },
          this));
      if (queue_.empty()) return;  // stopping, nothing left
      tensors = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    absl::Status status = Reduce(tensors);
    absl::MutexLock lock(&mu_);
    if (started_error_.ok()) started_error_ = status;
    busy_ = false;
  }
}

absl::Status SocketCollective::Reduce(std::span<const FloatSpan> tensors) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the collective broke on an earlier error: ", broken_.message()));
  }
  int64_t total = 0;
  for (const FloatSpan& t : tensors) total += t.size;
  ++calls_;
  absl::Status status =
      rank_ == 0 ? ReduceAtRoot(tensors, total) : ReduceAtLeaf(tensors, total);
  if (!status.ok()) {
    broken_ = status;
    // The ranks waiting on this one hear at once that it gave up.
    ShutDownSockets();
  }
  return status;
}

absl::Status SocketCollective::PeersAlive() const {
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (peers_[i] < 0) continue;
    char byte;
    const ssize_t n = recv(peers_[i], &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    const int peer = rank_ == 0 ? static_cast<int>(i) : 0;
    if (n == 0) {
      return absl::UnavailableError(absl::StrCat(
          RankName(peer), " closed its connection (it exited or died)"));
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return absl::UnavailableError(
          Errno(absl::StrCat("checking on ", RankName(peer))));
    }
  }
  return absl::OkStatus();
}

absl::Status SocketCollective::ReduceAtRoot(std::span<const FloatSpan> tensors,
                                            int64_t total) {
  // The running sum lives in packed_, starting from rank 0's own values;
  // each rank's tensors are added in rank order.
  Pack(tensors, total, &packed_);
  incoming_.resize(total);
  for (int r = 1; r < world_size_; ++r) {
    ReduceHeader h;
    RETURN_IF_ERROR(RecvAll(peers_[r], &h, sizeof(h), RankName(r)));
    if (h.magic != kReduceMagic || h.call != calls_ || h.floats != total) {
      return absl::FailedPreconditionError(absl::StrCat(
          RankName(r), " is out of step: its all-reduce #", h.call, " of ",
          h.floats, " floats met #", calls_, " of ", total, " on rank 0"));
    }
    RETURN_IF_ERROR(RecvAll(peers_[r], incoming_.data(), total * sizeof(float),
                            RankName(r)));
    for (int64_t i = 0; i < total; ++i) packed_[i] += incoming_[i];
  }
  const ReduceHeader h{kReduceMagic, 0, calls_, total};
  for (int r = 1; r < world_size_; ++r) {
    RETURN_IF_ERROR(SendAll(peers_[r], &h, sizeof(h), RankName(r)));
    RETURN_IF_ERROR(
        SendAll(peers_[r], packed_.data(), total * sizeof(float), RankName(r)));
  }
  Unpack(packed_, tensors);
  return absl::OkStatus();
}

absl::Status SocketCollective::ReduceAtLeaf(std::span<const FloatSpan> tensors,
                                            int64_t total) {
  Pack(tensors, total, &packed_);
  const int root = peers_[0];
  ReduceHeader h{kReduceMagic, 0, calls_, total};
  RETURN_IF_ERROR(SendAll(root, &h, sizeof(h), RankName(0)));
  RETURN_IF_ERROR(
      SendAll(root, packed_.data(), total * sizeof(float), RankName(0)));
  RETURN_IF_ERROR(RecvAll(root, &h, sizeof(h), RankName(0)));
  if (h.magic != kReduceMagic || h.call != calls_ || h.floats != total) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank 0 answered all-reduce #", h.call, " of ", h.floats,
                     " floats to #", calls_, " of ", total));
  }
  RETURN_IF_ERROR(
      RecvAll(root, packed_.data(), total * sizeof(float), RankName(0)));
  Unpack(packed_, tensors);
  return absl::OkStatus();
}

}  // namespace trainyard::engine
