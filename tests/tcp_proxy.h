// TcpProxy: a TCP proxy on a loopback port, put between two processes of a
// test so that it can break the network between them: Cut() closes every
// connection and refuses new ones (as a dropped link that the peers notice),
// Blackhole() stops forwarding without closing anything (as a partition that
// nobody notices: bytes wait in the kernel's buffers, new connections wait in
// the listen backlog), and Heal() forwards again, including what waited.
//
// One thread forwards with poll(); the controls are safe to call from any
// thread and return once the proxy thread has applied them.
#ifndef TRAINYARD_TESTS_TCP_PROXY_H_
#define TRAINYARD_TESTS_TCP_PROXY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace trainyard::itest {

class TcpProxy {
 public:
  enum class Mode { kForward, kCut, kBlackhole };

  // Listens on 127.0.0.1 (a free port) and forwards every connection to
  // `target` ("127.0.0.1:PORT").
  static absl::StatusOr<std::unique_ptr<TcpProxy>> Start(
      const std::string& target);
  // Closes every connection and stops the thread.
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  const std::string& address() const { return address_; }

  void Cut() { SetMode(Mode::kCut); }
  void Blackhole() { SetMode(Mode::kBlackhole); }
  void Heal() { SetMode(Mode::kForward); }

  // Connections accepted so far (forwarded or refused).
  int64_t accepted() const;

 private:
  class Loop;
  TcpProxy(int listen_fd, int wake_fd, int target_port, std::string address);
  void SetMode(Mode mode);

  const std::string address_;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace trainyard::itest

#endif  // TRAINYARD_TESTS_TCP_PROXY_H_
