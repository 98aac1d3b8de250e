// NcclCollective: the Collective of GPU ranks, one process (or thread) per
// GPU, summing fp32 gradients in device memory with ncclAllReduce. Rank 0
// makes the communicator's id; the ranks' SocketCollective (which already
// met them through the rendezvous file) carries it to the others, and stays
// open to tell when a peer's process is gone.
//
// Streams: the all-reduces run on a stream of their own. StartAllReduceSum
// records an event on the backend's compute stream and makes the NCCL
// stream wait for it, so a bucket is summed once the backward ops that
// produced it are done while the compute stream goes on with the layers
// before it. WaitAll makes the compute stream wait for the NCCL stream, and
// also waits on the host, so errors surface there. NCCL's ring sums in an
// order of its own (not rank order), but every rank gets the same bits.
//
// Failures never hang: the communicator is non-blocking, and every wait
// polls ncclCommGetAsyncError, the peers' sockets (a dead process closes
// them) and a deadline; on any of them the communicator is aborted and the
// call returns UNAVAILABLE (peer gone, NCCL system or remote errors),
// DEADLINE_EXCEEDED (a peer alive but stuck past the timeout) or INTERNAL
// (NCCL or CUDA misuse), naming this rank and NCCL's own error string.
// After an error the collective is broken for good.
//
// Thread-safety: see Collective. The calls make `device` current on the
// calling thread.
#ifndef TRAINYARD_ENGINE_DIST_NCCL_COLLECTIVE_H_
#define TRAINYARD_ENGINE_DIST_NCCL_COLLECTIVE_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/core/collective.h"
#include "engine/dist/socket_collective.h"

namespace trainyard::engine {

struct NcclCollectiveOptions {
  int device = 0;  // CUDA ordinal, after CUDA_VISIBLE_DEVICES
  // The stream the backend queues its work on (CudaBackend::stream()).
  cudaStream_t compute_stream = nullptr;
  // How long the communicator may take to form.
  absl::Duration connect_timeout = absl::Minutes(2);
  // How long one WaitAll may wait for peers that are alive. Rank 0
  // evaluates and writes checkpoints while the others wait in their next
  // step, so this is generous; a dead peer is noticed at once.
  absl::Duration io_timeout = absl::Minutes(30);
};

class NcclCollective : public Collective {
 public:
  // `ranks` (which must outlive the collective) names this rank and the
  // world, and carries the NCCL id. INVALID_ARGUMENT for a missing stream;
  // UNAVAILABLE or DEADLINE_EXCEEDED when the ranks do not form a
  // communicator.
  static absl::StatusOr<std::unique_ptr<NcclCollective>> Create(
      SocketCollective* ranks, const NcclCollectiveOptions& options);
  ~NcclCollective() override;

  int rank() const override { return ranks_->rank(); }
  int world_size() const override { return ranks_->world_size(); }
  absl::Status AllReduceSum(std::span<const FloatSpan> tensors) override;
  void StartAllReduceSum(std::vector<FloatSpan> tensors) override;
  absl::Status WaitAll() override;

 private:
  NcclCollective(SocketCollective* ranks, const NcclCollectiveOptions& options)
      : ranks_(ranks), options_(options) {}
  // When a wait gives up, and the bound it was given (for the message).
  struct Deadline {
    absl::Time at;
    absl::Duration bound;
  };
  static Deadline DeadlineIn(absl::Duration bound) {
    return {absl::Now() + bound, bound};
  }

  absl::Status Init();
  absl::Status Launch(const std::vector<FloatSpan>& tensors);
  // Polls until the communicator has no operation in progress.
  absl::Status AwaitComm(const char* what, Deadline deadline);
  // Polls until `event` has happened on the NCCL stream.
  absl::Status AwaitEvent(cudaEvent_t event, Deadline deadline);
  // OK while the peers' processes live and `deadline` is ahead; else the
  // error (the communicator aborted).
  absl::Status WorthWaiting(const char* what, Deadline deadline);
  // Aborts the communicator, breaks the collective and returns `status`.
  absl::Status Fail(absl::Status status);
  // NCCL's error string and last message, naming the rank and call site.
  absl::Status NcclError(ncclResult_t result, const char* what,
                         const char* file, int line) const;

  SocketCollective* const ranks_;
  const NcclCollectiveOptions options_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;  // compute stream -> NCCL stream
  cudaEvent_t done_ = nullptr;   // NCCL stream -> compute stream
  absl::Status broken_;          // the error that broke the collective
  absl::Status started_error_;   // first error since the last WaitAll
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_DIST_NCCL_COLLECTIVE_H_
