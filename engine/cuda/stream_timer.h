// Times work on a CUDA stream with a pair of events, for the choices a job
// makes by timing its own candidates (LtGemm's cuBLASLt algorithms, the
// backend's attention tilings). Each timing waits for the stream. Plain
// CUDA runtime; not thread-safe (one stream's caller at a time).
#ifndef TRAINYARD_ENGINE_CUDA_STREAM_TIMER_H_
#define TRAINYARD_ENGINE_CUDA_STREAM_TIMER_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "engine/cuda/cuda_status.h"

namespace trainyard::engine::cuda {

class StreamTimer {
 public:
  StreamTimer() = default;
  StreamTimer(const StreamTimer&) = delete;
  StreamTimer& operator=(const StreamTimer&) = delete;
  ~StreamTimer() {
    if (end_ != nullptr) cudaEventDestroy(end_);
    if (start_ != nullptr) cudaEventDestroy(start_);
  }

  absl::Status Create() {
    YARD_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start_));
    YARD_CUDA_RETURN_IF_ERROR(cudaEventCreate(&end_));
    return absl::OkStatus();
  }

  // Milliseconds `work` (enqueueing on `stream`, returning an absl::Status)
  // takes there; its error if it fails.
  template <typename Work>
  absl::StatusOr<float> Time(cudaStream_t stream, const Work& work) {
    YARD_CUDA_RETURN_IF_ERROR(cudaEventRecord(start_, stream));
    RETURN_IF_ERROR(work());
    YARD_CUDA_RETURN_IF_ERROR(cudaEventRecord(end_, stream));
    YARD_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(end_));
    float ms = 0;
    YARD_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start_, end_));
    return ms;
  }

  // The median of `reps` (>= 1) such timings, one run after another.
  template <typename Work>
  absl::StatusOr<float> Median(int reps, cudaStream_t stream,
                               const Work& work) {
    std::vector<float> ms;
    for (int r = 0; r < reps; ++r) {
      ASSIGN_OR_RETURN(const float t, Time(stream, work));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }

 private:
  cudaEvent_t start_ = nullptr, end_ = nullptr;
};

}  // namespace trainyard::engine::cuda

#endif  // TRAINYARD_ENGINE_CUDA_STREAM_TIMER_H_
