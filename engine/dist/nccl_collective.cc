// NCCL all-reduce for GPU ranks. See nccl_collective.h.
#include "engine/dist/nccl_collective.h"

#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/cuda/cuda_status.h"

namespace trainyard::engine {
namespace {

constexpr absl::Duration kPollPeriod = absl::Microseconds(100);
// Long enough for NCCL's own teardown; a peer gone then must not hold up
// the exit.
constexpr absl::Duration kFinalizeTimeout = absl::Seconds(10);

bool Pending(ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; }

// Rank 0's id to every rank, as a sum: the others add zeros, and bytes are
// exact in floats.
absl::Status ShareId(SocketCollective* ranks, ncclUniqueId* id) {
  std::vector<float> bytes(NCCL_UNIQUE_ID_BYTES, 0.0f);
  if (ranks->rank() == 0) {
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) {
      bytes[i] = static_cast<unsigned char>(id->internal[i]);
    }
  }
  const FloatSpan span{bytes.data(), NCCL_UNIQUE_ID_BYTES};
  absl::Status s = ranks->AllReduceSum({&span, 1});
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("sharing the NCCL id: ", s.message()));
  }
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) {
    id->internal[i] = static_cast<char>(static_cast<unsigned char>(bytes[i]));
  }
  return absl::OkStatus();
}

}  // namespace

#define YARD_NCCL_ERROR(result, what) \
  NcclError(result, what, __FILE__, __LINE__)

absl::StatusOr<std::unique_ptr<NcclCollective>> NcclCollective::Create(
    SocketCollective* ranks, const NcclCollectiveOptions& options) {
  if (ranks == nullptr || options.compute_stream == nullptr) {
    return absl::InvalidArgumentError(
        "nccl: needs the ranks' socket collective and the compute stream");
  }
  std::unique_ptr<NcclCollective> c(new NcclCollective(ranks, options));
  RETURN_IF_ERROR(c->Init());
  return c;
}

absl::Status NcclCollective::Init() {
  const Deadline deadline = DeadlineIn(options_.connect_timeout);
  YARD_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  YARD_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  YARD_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  YARD_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  ncclUniqueId id{};
  if (rank() == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return YARD_NCCL_ERROR(r, "ncclGetUniqueId");
  }
  RETURN_IF_ERROR(ShareId(ranks_, &id));
  // Non-blocking, so that forming the ring (and every later call) can be
  // given up on when a peer never comes.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t r =
      ncclCommInitRankConfig(&comm_, world_size(), id, rank(), &config);
  if (!Pending(r)) {
    return Fail(YARD_NCCL_ERROR(r, "ncclCommInitRankConfig"));
  }
  return AwaitComm("forming the NCCL communicator", deadline);
}

NcclCollective::~NcclCollective() {
  cudaSetDevice(options_.device);
  if (comm_ != nullptr) {
    if (!Pending(ncclCommFinalize(comm_))) {
      Fail(absl::InternalError("ncclCommFinalize failed")).IgnoreError();
    } else {
      // On failure this aborts the communicator (comm_ becomes null).
      AwaitComm("finalizing the NCCL communicator",
                DeadlineIn(kFinalizeTimeout))
          .IgnoreError();
    }
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  if (done_ != nullptr) cudaEventDestroy(done_);
  if (ready_ != nullptr) cudaEventDestroy(ready_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status NcclCollective::AllReduceSum(std::span<const FloatSpan> tensors) {
  StartAllReduceSum({tensors.begin(), tensors.end()});
  return WaitAll();
}

void NcclCollective::StartAllReduceSum(std::vector<FloatSpan> tensors) {
  if (!started_error_.ok()) return;
  if (!broken_.ok()) {
    started_error_ = absl::FailedPreconditionError(absl::StrCat(
        "the collective broke on an earlier error: ", broken_.message()));
    return;
  }
  absl::Status s = Launch(tensors);
  if (!s.ok()) started_error_ = broken_.ok() ? Fail(s) : s;
}

absl::Status NcclCollective::Launch(const std::vector<FloatSpan>& tensors) {
  YARD_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  YARD_CUDA_RETURN_IF_ERROR(cudaEventRecord(ready_, options_.compute_stream));
  YARD_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, ready_, 0));
  ncclResult_t r = ncclGroupStart();
  if (!Pending(r)) return YARD_NCCL_ERROR(r, "ncclGroupStart");
  for (const FloatSpan& t : tensors) {
    r = ncclAllReduce(t.data, t.data, static_cast<size_t>(t.size), ncclFloat32,
                      ncclSum, comm_, stream_);
    if (!Pending(r)) {
      ncclGroupEnd();
      return YARD_NCCL_ERROR(r, "ncclAllReduce");
    }
  }
  r = ncclGroupEnd();
  if (!Pending(r)) return YARD_NCCL_ERROR(r, "ncclGroupEnd");
  // Waits for the launch only, not for the sum.
  return AwaitComm("launching ncclAllReduce", DeadlineIn(options_.io_timeout));
}

absl::Status NcclCollective::WaitAll() {
  absl::Status status = std::exchange(started_error_, absl::OkStatus());
  if (!status.ok()) return status;
  if (!broken_.ok()) return absl::OkStatus();  // nothing was started
  const Deadline deadline = DeadlineIn(options_.io_timeout);
  YARD_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  if (cudaError_t e = cudaEventRecord(done_, stream_); e != cudaSuccess) {
    return Fail(cuda::CudaStatus(e, "cudaEventRecord", __FILE__, __LINE__));
  }
  RETURN_IF_ERROR(AwaitEvent(done_, deadline));
  if (cudaError_t e = cudaStreamWaitEvent(options_.compute_stream, done_, 0);
      e != cudaSuccess) {
    return Fail(cuda::CudaStatus(e, "cudaStreamWaitEvent", __FILE__, __LINE__));
  }
  return absl::OkStatus();
}

absl::Status NcclCollective::AwaitComm(const char* what, Deadline deadline) {
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) {
      return Fail(YARD_NCCL_ERROR(r, "ncclCommGetAsyncError"));
    }
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return Fail(YARD_NCCL_ERROR(state, what));
    RETURN_IF_ERROR(WorthWaiting(what, deadline));
    std::this_thread::sleep_for(absl::ToChronoMicroseconds(kPollPeriod));
  }
}

absl::Status NcclCollective::AwaitEvent(cudaEvent_t event, Deadline deadline) {
  const char* what = "waiting for ncclAllReduce";
  while (true) {
    const cudaError_t e = cudaEventQuery(event);
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) {
      return Fail(cuda::CudaStatus(e, "cudaEventQuery", __FILE__, __LINE__));
    }
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) {
      return Fail(YARD_NCCL_ERROR(r, "ncclCommGetAsyncError"));
    }
    if (!Pending(state)) return Fail(YARD_NCCL_ERROR(state, what));
    RETURN_IF_ERROR(WorthWaiting(what, deadline));
    std::this_thread::sleep_for(absl::ToChronoMicroseconds(kPollPeriod));
  }
}

absl::Status NcclCollective::WorthWaiting(const char* what, Deadline deadline) {
  if (absl::Status peers = ranks_->PeersAlive(); !peers.ok()) {
    return Fail(absl::UnavailableError(
        absl::StrCat("rank ", rank(), ": ", what, ": ", peers.message())));
  }
  if (absl::Now() > deadline.at) {
    return Fail(absl::DeadlineExceededError(absl::StrCat(
        "rank ", rank(), ": ", what, ": no progress within ",
        absl::FormatDuration(deadline.bound), "; a peer is alive but stuck")));
  }
  return absl::OkStatus();
}

absl::Status NcclCollective::Fail(absl::Status status) {
  if (comm_ != nullptr) {
    // Abort ends the kernels and proxy threads still waiting on peers.
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  if (broken_.ok()) broken_ = status;
  return status;
}

absl::Status NcclCollective::NcclError(ncclResult_t result, const char* what,
                                       const char* file, int line) const {
  const char* detail = comm_ != nullptr ? ncclGetLastError(comm_) : nullptr;
  const std::string message = absl::StrCat(
      "rank ", rank(), ": ", file, ":", line, ": ", what, ": ",
      ncclGetErrorString(result),
      detail != nullptr && *detail != '\0' ? absl::StrCat(" (", detail, ")")
                                           : "");
  switch (result) {
    case ncclSystemError:
    case ncclRemoteError:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace trainyard::engine
