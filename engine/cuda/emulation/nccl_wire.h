// TCP on the loopback for the NCCL stand-in (nccl_host.cc): listening,
// connecting, and sending or receiving exactly n bytes, where every wait
// ends by a deadline or as soon as the communicator is aborted (its abort
// eventfd turns readable). Failures come back as the NCCL result the
// stand-in reports: ncclRemoteError for a peer that closed or reset its
// socket, ncclSystemError for a timeout or another system error.
//
// Thread-safety: stateless; one socket is used by one thread at a time.
#ifndef TRAINYARD_ENGINE_CUDA_EMULATION_NCCL_WIRE_H_
#define TRAINYARD_ENGINE_CUDA_EMULATION_NCCL_WIRE_H_

#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace trainyard::cuda_emulation::nccl {

using Clock = std::chrono::steady_clock;

// An NCCL result and, for an error, what went wrong.
struct Outcome {
  ncclResult_t result = ncclSuccess;
  std::string message;
  bool ok() const { return result == ncclSuccess; }
};

// What ends a wait: `abort_fd` turning readable, or `deadline`.
struct Watch {
  int abort_fd;
  Clock::time_point deadline;
};

// A socket listening on 127.0.0.1 at an ephemeral port, or -1 with
// `*error` set.
int ListenOnLoopback(uint16_t* port, std::string* error);

// The next connection on `listen_fd`.
Outcome AcceptOne(int listen_fd, const Watch& watch, int* fd);

// A connection to 127.0.0.1:`port`; a refused attempt is retried until the
// deadline, as the listener may not be there yet.
Outcome ConnectToLoopback(uint16_t port, const Watch& watch, int* fd);

// Exactly `bytes` to or from `fd`; `peer` ("rank 2") names the other side
// in the message of a failure.
Outcome SendAll(int fd, const void* data, size_t bytes, const Watch& watch,
                const std::string& peer);
Outcome RecvAll(int fd, void* data, size_t bytes, const Watch& watch,
                const std::string& peer);

// Ends every send and receive on `fd`, from any thread; the peer sees EOF.
void ShutDown(int fd);

}  // namespace trainyard::cuda_emulation::nccl

#endif  // TRAINYARD_ENGINE_CUDA_EMULATION_NCCL_WIRE_H_
