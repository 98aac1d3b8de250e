// CudaBackend: creation, the arena, copies, error keeping and the two
// reductions that return host values. The ops are in cuda_backend_ops.cc.
// See cuda_backend.h.
#include "engine/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "engine/core/memory_estimate.h"
#include "engine/core/short_of_memory.h"
#include "engine/cuda/cuda_status.h"
#include "engine/cuda/device_query.h"
#include "engine/cuda/reduce_kernels.h"

#define YARD_CUDA_RECORD(expr) RecordCuda((expr), #expr, __FILE__, __LINE__)
#define YARD_CUDA_LAUNCH(expr) Launched((expr), #expr, __FILE__, __LINE__)

namespace trainyard::engine {
namespace {

constexpr int64_t kArenaAlignment = 256;
// The backend's own share at the start of the arena: reduction scratch
// (64 KiB for the sums of squares on their way to the host, then 2,496 KiB
// of partials for the column sums, the LayerNorm backward's and the sums
// of squares, which never overlap: one stream; the LayerNorm backward's
// 264 blocks of d_model 768 with three sums take 2,376 KiB), then cuBLASLt's
// workspace (kLtGemmWorkspaceBytes, 32 MiB, NVIDIA's advice for Hopper), then
// the embedding backward's sort keys (2^20 of 8 bytes: a batch of up to 1M
// tokens sorts; a larger one takes the slow scan).
// What is left of kCudaWorkspaceBytes covers the rounding of Allocate's blocks.
constexpr int64_t kReductionBytes = int64_t{64} << 10;
constexpr int64_t kScratchBytes = int64_t{5} << 19;  // 2.5 MiB
constexpr int64_t kSortKeys = int64_t{1} << 20;
constexpr int64_t kReservedBytes =
    kScratchBytes + cuda::kLtGemmWorkspaceBytes + kSortKeys * 8;
static_assert(kReservedBytes + (int64_t{512} << 10) <= kCudaWorkspaceBytes);
// Sums of squares copied back at once, and their partials' room.
constexpr int64_t kSumResults = kReductionBytes / 8;
constexpr int64_t kSumPartials = (kScratchBytes - kReductionBytes) / 8;
static_assert(kSumPartials >= cuda::kSumSquaresMaxBlocks,
              "the largest tensor's partials fit");

}  // namespace

// A block of the arena; gives its offset back on destruction.
class CudaBuffer : public DeviceBuffer {
 public:
  CudaBuffer(void* data, int64_t bytes, int64_t offset, CudaBackend* owner)
      : data_(data), bytes_(bytes), offset_(offset), owner_(owner) {}
  ~CudaBuffer() override { owner_->Release(offset_, bytes_); }
  void* data() override { return data_; }
  int64_t bytes() const override { return bytes_; }

 private:
  void* data_;
  int64_t bytes_;
  int64_t offset_;
  CudaBackend* owner_;
};

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const CudaBackendOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend,
                   CudaBackend::Create(options));
  return std::unique_ptr<Backend>(std::move(backend));
}

CudaBackend::CudaBackend(const CudaBackendOptions& options, cudaStream_t stream,
                         char* base)
    : options_(options),
      stream_(stream),
      base_(base),
      blocks_(base + kReservedBytes),
      arena_(options.arena_bytes - kReservedBytes, kArenaAlignment),
      tilings_{options.attention_tiling, options.attention_backward_tiling} {}

namespace {

std::string TilingChoices() {
  std::vector<std::string> names;
  for (const cuda::AttentionTcTiling& t : cuda::kAttentionTcTilings) {
    names.push_back(cuda::AttentionTcTilingName(t));
  }
  return absl::StrJoin(names, ", ");
}

}  // namespace

absl::StatusOr<cuda::AttentionTcTiling> ParseAttentionTiling(
    absl::string_view text) {
  for (const cuda::AttentionTcTiling& t : cuda::kAttentionTcTilings) {
    if (text == cuda::AttentionTcTilingName(t)) return t;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "attention tiling '", text, "' is not one of ", TilingChoices(),
      " (rows a warp x warps a block; wgmma: 16x4 as warpgroup products; "
      "-swizzled: with swizzled shared-memory tiles)"));
}

absl::StatusOr<AttentionTilings> ParseAttentionTilings(absl::string_view text) {
  const size_t comma = text.find(',');
  ASSIGN_OR_RETURN(const cuda::AttentionTcTiling forward,
                   ParseAttentionTiling(text.substr(0, comma)));
  if (comma == absl::string_view::npos)
    return AttentionTilings{forward, forward};
  absl::StatusOr<cuda::AttentionTcTiling> backward =
      ParseAttentionTiling(text.substr(comma + 1));
  if (!backward.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the backward's ", backward.status().message()));
  }
  return AttentionTilings{forward, *backward};
}

std::string AttentionTilingsText(const AttentionTilings& tilings) {
  const std::string forward = cuda::AttentionTcTilingName(tilings.forward);
  const std::string backward = cuda::AttentionTcTilingName(tilings.backward);
  return forward == backward ? forward : absl::StrCat(forward, ",", backward);
}

absl::StatusOr<cuda::AttentionTcBackward> ParseAttentionBackward(
    absl::string_view text) {
  if (text == "two-kernel") return cuda::AttentionTcBackward::kTwoKernels;
  if (text == "ordered-dq") return cuda::AttentionTcBackward::kOrderedDq;
  return absl::InvalidArgumentError(absl::StrCat(
      "attention backward '", text, "' is not one of two-kernel, ordered-dq"));
}

absl::StatusOr<BiasGradient> ParseBiasGradient(absl::string_view text) {
  if (text == "column-sums") return BiasGradient::kColumnSums;
  if (text == "epilogue") return BiasGradient::kEpilogue;
  return absl::InvalidArgumentError(absl::StrCat(
      "bias gradient '", text, "' is not one of column-sums, epilogue"));
}

AttentionState CudaAttentionState(cuda::AttentionTcBackward backward) {
  return backward == cuda::AttentionTcBackward::kOrderedDq
             ? AttentionState::kLogSumExpWithDqSums
             : AttentionState::kLogSumExp;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    const CudaBackendOptions& options) {
  for (const cuda::AttentionTcTiling& t :
       {options.attention_tiling, options.attention_backward_tiling}) {
    if (!cuda::IsAttentionTcTiling(t)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda backend: attention tiling ", cuda::AttentionTcTilingName(t),
          " is not one of ", TilingChoices()));
    }
  }
  if ((options.attention_tiling.warpgroup ||
       options.attention_backward_tiling.warpgroup) &&
      !cuda::AttentionTcWarpgroupBuilt()) {
    return absl::FailedPreconditionError(
        "cuda backend: attention tiling wgmma needs the sm_90a kernels, and "
        "this build has none (configure with YARD_CUDA_ARCHITECTURES=90a)");
  }
  if (absl::Status s = cuda::LtGemm::CheckChoices(options.gemm_choices);
      !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda backend: ", s.message()));
  }
  if (options.arena_bytes < kCudaWorkspaceBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda backend: an arena of ", options.arena_bytes,
                     " bytes is smaller than the backend's own workspace of ",
                     kCudaWorkspaceBytes, " bytes"));
  }
  ASSIGN_OR_RETURN(const std::vector<cuda::CudaDeviceInfo> devices,
                   cuda::ListCudaDevices());
  if (devices.empty()) {
    return absl::UnavailableError(
        "cuda backend: no CUDA device or driver on this machine");
  }
  if (options.device < 0 ||
      options.device >= static_cast<int>(devices.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda backend: device ", options.device,
                     " does not exist; this machine shows ", devices.size()));
  }
  const cuda::CudaDeviceInfo& info = devices[options.device];
  YARD_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  size_t free_bytes = 0, total_bytes = 0;
  YARD_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  const std::string grant = absl::StrCat(
      "cuda device ", options.device, " (", info.name, "): the job's grant of ",
      options.arena_bytes, " bytes does not fit in the ", free_bytes,
      " bytes free of ", total_bytes);
  if (static_cast<uint64_t>(options.arena_bytes) > free_bytes) {
    return ShortOfMemoryError(grant);
  }
  cudaStream_t stream = nullptr;
  YARD_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* base = nullptr;
  const cudaError_t e =
      cudaMalloc(&base, static_cast<size_t>(options.arena_bytes));
  if (e != cudaSuccess) {
    cudaStreamDestroy(stream);
    cudaGetLastError();  // an allocation failure is not sticky; clear it
    return ShortOfMemoryError(absl::StrCat(
        grant, ": ",
        cuda::CudaStatus(e, "cudaMalloc", __FILE__, __LINE__).message()));
  }
  std::unique_ptr<CudaBackend> backend(
      new CudaBackend(options, stream, static_cast<char*>(base)));
  RETURN_IF_ERROR(backend->Init());
  return backend;
}

absl::Status CudaBackend::Init() {
  sum_results_ = reinterpret_cast<double*>(base_);
  sum_partials_ = reinterpret_cast<double*>(base_ + kReductionBytes);
  column_scratch_ = reinterpret_cast<float*>(base_ + kReductionBytes);
  column_scratch_floats_ = (kScratchBytes - kReductionBytes) / 4;
  ASSIGN_OR_RETURN(gemm_,
                   cuda::LtGemm::Create(base_ + kScratchBytes,
                                        cuda::kLtGemmWorkspaceBytes, stream_));
  RETURN_IF_ERROR(gemm_->SetChoices(options_.gemm_choices));  // Create checked
  sort_keys_ = reinterpret_cast<uint64_t*>(base_ + kScratchBytes +
                                           cuda::kLtGemmWorkspaceBytes);
  sort_key_capacity_ = kSortKeys;
  return absl::OkStatus();
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(options_.device);
  cudaStreamSynchronize(stream_);
  gemm_.reset();
  cudaFree(base_);
  cudaStreamDestroy(stream_);
}

void CudaBackend::UseDevice() {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != options_.device) {
    YARD_CUDA_RECORD(cudaSetDevice(options_.device));
  }
}

void CudaBackend::Record(absl::Status status) {
  if (first_error_.ok() && !status.ok()) first_error_ = std::move(status);
}

void CudaBackend::RecordCuda(cudaError_t error, const char* expr,
                             const char* file, int line) {
  if (error != cudaSuccess) Record(cuda::CudaStatus(error, expr, file, line));
}

void CudaBackend::Launched(cudaError_t launch, const char* expr,
                           const char* file, int line) {
  RecordCuda(launch, expr, file, line);
  if (options_.sync_after_each_op) {
    RecordCuda(cudaStreamSynchronize(stream_), expr, file, line);
  }
}

void CudaBackend::Launched(absl::Status launch) {
  Record(std::move(launch));
  if (options_.sync_after_each_op) {
    YARD_CUDA_RECORD(cudaStreamSynchronize(stream_));
  }
}

absl::Status CudaBackend::Synchronize() {
  UseDevice();
  YARD_CUDA_RECORD(cudaStreamSynchronize(stream_));
  // Whether the choices apply to this job's shapes shows in its log.
  if (const int taken = gemm_->choices_taken(); taken != choices_logged_) {
    YARD_LOG(INFO) << "cuda backend: " << taken << " products run a chosen "
                   << "algorithm (of " << gemm_->choices() << " gemm choices)";
    choices_logged_ = taken;
  }
  absl::Status first = std::move(first_error_);
  first_error_ = absl::OkStatus();
  return first;
}

absl::Status CudaBackend::StartGemmTuning(int candidates, int reps) {
  return gemm_->StartTuning(candidates, reps);
}

absl::StatusOr<CudaBackend::GemmTuning> CudaBackend::FinishGemmTuning() {
  const absl::Status ran = Synchronize();
  GemmTuning tuning;
  tuning.products = gemm_->tuned();
  tuning.candidates = gemm_->tuned_candidates();
  tuning.choices = gemm_->FinishTuning();
  RETURN_IF_ERROR(ran);
  return tuning;
}

absl::Status CudaBackend::StartAttentionTuning(int reps) {
  if (reps < 1 || reps > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention tuning: ", reps, " reps (1 to 100)"));
  }
  attention_reps_ = reps;
  attention_tuning_ = AttentionTuning();
  return absl::OkStatus();
}

absl::StatusOr<CudaBackend::AttentionTuning>
CudaBackend::FinishAttentionTuning() {
  const absl::Status ran = Synchronize();
  AttentionTuning tuning = std::move(attention_tuning_);
  tuning.tilings = tilings_;
  attention_tuning_ = AttentionTuning();
  attention_reps_ = 0;
  RETURN_IF_ERROR(ran);
  return tuning;
}

absl::StatusOr<std::unique_ptr<DeviceBuffer>> CudaBackend::Allocate(
    int64_t bytes) {
  UseDevice();
  absl::StatusOr<int64_t> offset = arena_.Take(bytes);
  if (!offset.ok()) {
    if (offset.status().code() != absl::StatusCode::kResourceExhausted) {
      return offset.status();
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "cuda backend: ", offset.status().message(), " (", allocated_bytes_,
        " bytes already allocated); the job's memory grant of ",
        options_.arena_bytes, " bytes is too small for this model and batch"));
  }
  char* data = blocks_ + *offset;
  const cudaError_t e = cudaMemsetAsync(
      data, 0, static_cast<size_t>(arena_.RoundUp(bytes)), stream_);
  if (e != cudaSuccess) {
    arena_.Give(*offset);
    return cuda::CudaStatus(e, "cudaMemsetAsync", __FILE__, __LINE__);
  }
  allocated_bytes_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, allocated_bytes_);
  return std::unique_ptr<DeviceBuffer>(
      new CudaBuffer(data, bytes, *offset, this));
}

void CudaBackend::Release(int64_t offset, int64_t bytes) {
  // Work queued on the stream may still use the block; anything allocated
  // in it later is queued behind that work on the same stream.
  arena_.Give(offset);
  allocated_bytes_ -= bytes;
}

void CudaBackend::CopyToDevice(void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  UseDevice();
  YARD_CUDA_RECORD(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                   cudaMemcpyHostToDevice, stream_));
  // The caller may free or reuse `src` as soon as this returns.
  YARD_CUDA_RECORD(cudaStreamSynchronize(stream_));
}

void CudaBackend::CopyToHost(void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  UseDevice();
  YARD_CUDA_RECORD(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                   cudaMemcpyDeviceToHost, stream_));
  // The caller reads `dst` as soon as this returns.
  YARD_CUDA_RECORD(cudaStreamSynchronize(stream_));
}

double CudaBackend::SumSquares(const float* x, int64_t n) {
  const FloatTensor one[] = {{x, n}};
  return SumSquaresEach(one)[0];
}

// Each tensor's sum lands in its own slot; up to 64 tensors share a pair
// of launches while their partials fit; one copy back and one wait per
// kSumResults tensors.
std::vector<double> CudaBackend::SumSquaresEach(
    std::span<const FloatTensor> tensors) {
  UseDevice();
  std::vector<double> sums(tensors.size(),
                           std::numeric_limits<double>::quiet_NaN());
  for (size_t begin = 0; begin < tensors.size(); begin += kSumResults) {
    const size_t end =
        std::min(tensors.size(), begin + static_cast<size_t>(kSumResults));
    cuda::SumSquaresBatch batch;
    size_t first = begin;  // the batch's first tensor
    int64_t partials = 0;
    for (size_t i = begin; i <= end; ++i) {
      const int64_t blocks = i < end ? cuda::SumSquaresBlocks(tensors[i].n) : 0;
      if (batch.count > 0 &&
          (i == end || batch.count == cuda::kSumSquaresBatchTensors ||
           partials + blocks > kSumPartials)) {
        YARD_CUDA_LAUNCH(cuda::LaunchSumSquaresBatch(
            sum_results_ + (first - begin), sum_partials_, kSumPartials, batch,
            stream_));
        batch.count = 0;
        partials = 0;
        first = i;
      }
      if (i == end) break;
      batch.x[batch.count] = tensors[i].data;
      batch.n[batch.count] = tensors[i].n;
      ++batch.count;
      partials += blocks;
    }
    YARD_CUDA_RECORD(cudaMemcpyAsync(sums.data() + begin, sum_results_,
                                     (end - begin) * sizeof(double),
                                     cudaMemcpyDeviceToHost, stream_));
    YARD_CUDA_RECORD(cudaStreamSynchronize(stream_));
  }
  // After any failure the values mean nothing: NaN fails the norm check.
  if (!first_error_.ok()) {
    std::fill(sums.begin(), sums.end(),
              std::numeric_limits<double>::quiet_NaN());
  }
  return sums;
}

}  // namespace trainyard::engine
