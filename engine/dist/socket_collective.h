// SocketCollective: the Collective of CPU ranks, over TCP. Rank 0 listens,
// publishes "host port nonce" in a rendezvous file (written whole, then
// renamed into place), and accepts one connection from each other rank; a
// rank that reads the file connects and proves it belongs to this job with
// the nonce. AllReduceSum is a star: every rank sends its tensors to rank 0,
// which sums them in rank order and sends the sum back, so every rank gets
// bitwise the same result. For the few ranks a CPU job has this is as fast
// as a ring and much simpler; GPU jobs use NCCL for their gradients and this
// collective only to meet (NcclCollective takes its id through it) and to
// notice a peer gone (PeersAlive).
//
// All the socket work runs on one thread of the collective's own, in the
// order the all-reduces were started, so StartAllReduceSum returns at once
// and the caller goes on computing.
//
// A peer that dies closes its socket and the others fail at once with
// UNAVAILABLE naming the rank; a peer that hangs fails them after
// io_timeout. A rank whose all-reduce fails shuts its sockets down, so the
// ranks waiting on it fail at once too rather than after io_timeout.
// Tensors are host memory (the CPU backend's device memory).
//
// Thread-safety: see Collective. Connect() blocks until all ranks are there.
#ifndef TRAINYARD_ENGINE_DIST_SOCKET_COLLECTIVE_H_
#define TRAINYARD_ENGINE_DIST_SOCKET_COLLECTIVE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/core/collective.h"

namespace trainyard::engine {

struct SocketCollectiveOptions {
  int rank = 0;
  int world_size = 1;
  // A path every rank can read and rank 0 can write: the same file on a
  // shared directory when ranks run on several machines.
  std::string rendezvous_file;
  // The address rank 0 listens on and publishes, an IPv4 or IPv6 literal
  // without brackets ("10.0.0.5", "fd00::5"); the other ranks connect to
  // it. Loopback suits ranks on one machine.
  std::string listen_host = "127.0.0.1";
  // How long Connect waits for every rank to be there.
  absl::Duration connect_timeout = absl::Minutes(2);
  // When set, Connect gives up (CANCELLED) soon after *stop turns true: a
  // stop request (SIGTERM) is honoured while the ranks meet.
  const std::atomic<bool>* stop = nullptr;
  // How long one send or receive may wait for a peer. Rank 0 evaluates and
  // writes checkpoints while the others wait, so this is generous.
  absl::Duration io_timeout = absl::Minutes(30);
};

class SocketCollective : public Collective {
 public:
  // INVALID_ARGUMENT for a bad rank, world size or empty rendezvous path;
  // DEADLINE_EXCEEDED when the ranks do not all meet in connect_timeout;
  // CANCELLED when options.stop turned true first.
  static absl::StatusOr<std::unique_ptr<SocketCollective>> Connect(
      const SocketCollectiveOptions& options);
  ~SocketCollective() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  absl::Status AllReduceSum(std::span<const FloatSpan> tensors) override;
  void StartAllReduceSum(std::vector<FloatSpan> tensors) override;
  absl::Status WaitAll() override;

  // OK while every peer this rank talks to (rank 0, or on rank 0 all the
  // others) still holds its connection open; UNAVAILABLE naming the first
  // that closed it (its process exited or died). Does not block.
  // REQUIRES: no all-reduce in flight (WaitAll returned).
  absl::Status PeersAlive() const;

 private:
  SocketCollective(int rank, int world_size, absl::Duration io_timeout)
      : rank_(rank), world_size_(world_size), io_timeout_(io_timeout) {}
  absl::Status ServeRendezvous(const SocketCollectiveOptions& options);
  absl::Status JoinRendezvous(const SocketCollectiveOptions& options);
  // The collective's thread: runs the queued all-reduces in order.
  void Serve();
  absl::Status Reduce(std::span<const FloatSpan> tensors);
  absl::Status ReduceAtRoot(std::span<const FloatSpan> tensors, int64_t total);
  absl::Status ReduceAtLeaf(std::span<const FloatSpan> tensors, int64_t total);
  // Unblocks every send and receive on the peers' sockets, for good.
  void ShutDownSockets();

  const int rank_;
  const int world_size_;
  const absl::Duration io_timeout_;
  // Rank 0: peers_[r] is the socket of rank r (peers_[0] unused). Other
  // ranks: peers_[0] is the socket to rank 0. Fixed once connected.
  std::vector<int> peers_;

  // Owned by the serving thread (and by the caller before it starts).
  uint64_t calls_ = 0;
  absl::Status broken_;  // the error that broke the collective
  std::vector<float> packed_, incoming_;

  absl::Mutex mu_;
  std::deque<std::vector<FloatSpan>> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // First error among the all-reduces started since the last WaitAll.
  absl::Status started_error_ ABSL_GUARDED_BY(mu_);
  std::thread server_;  // started with the first all-reduce
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_DIST_SOCKET_COLLECTIVE_H_
