// Which GPU models a job may run on (PendingJob::gpu_models, the spec's
// resources.gpu_models). An entry matches a GPU when it is a substring of
// the name the GPU's worker reports (NVML's, e.g. "NVIDIA H100 80GB HBM3"),
// ASCII case ignored: "h100" matches that GPU, "A100" every A100. A GPU of
// unknown name ("") matches no entry. ClusterSnapshot::Create turns the
// entries into a bit mask once per pass, so policies test one AND per GPU
// (GpuFits). Free functions; thread-safe.
#ifndef TRAINYARD_SCHEDULER_GPU_MODELS_H_
#define TRAINYARD_SCHEDULER_GPU_MODELS_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace trainyard::scheduler {

bool GpuModelMatches(absl::string_view model, absl::string_view gpu_name);

// Whether a job asking `models` may use a GPU named `gpu_name`: empty
// `models` allows every GPU.
bool AllowsGpu(const std::vector<std::string>& models,
               absl::string_view gpu_name);

// For people: "\"H100\"", "\"H100\" or \"A100\"", "\"H100\", \"A100\" or
// \"L40S\"".
std::string DescribeGpuModels(const std::vector<std::string>& models);

}  // namespace trainyard::scheduler

#endif  // TRAINYARD_SCHEDULER_GPU_MODELS_H_
