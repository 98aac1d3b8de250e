// Device listing and probing over the CUDA runtime. See device_query.h.
#include "engine/cuda/device_query.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/cuda/cuda_status.h"
#include "engine/cuda/probe_kernel.h"

namespace trainyard::engine::cuda {
namespace {

// What cudaGetDeviceCount says on a machine without a GPU or driver. No
// driver at all reads as cudaErrorInsufficientDriver too, but so does a
// driver older than this build's runtime: cudaDriverGetVersion tells the
// two apart (0: "no driver is installed", cuda_runtime_api.h).
bool MeansNoDevice(cudaError_t e) {
  if (e == cudaErrorNoDevice || e == cudaErrorStubLibrary) return true;
  if (e != cudaErrorInsufficientDriver) return false;
  int driver = 0;
  return cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0;
}

std::string CudaVersion(int v) {
  return absl::StrCat(v / 1000, ".", v % 1000 / 10);
}

}  // namespace

std::string FormatGpuUuid(const unsigned char b[16]) {
  return absl::StrFormat(
      "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%"
      "02x",
      b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
      b[12], b[13], b[14], b[15]);
}

absl::StatusOr<std::vector<CudaDeviceInfo>> ListCudaDevices() {
  std::vector<CudaDeviceInfo> devices;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (MeansNoDevice(e)) {
    cudaGetLastError();  // clear it, so later calls do not report it again
    return devices;
  }
  if (e == cudaErrorInsufficientDriver) {
    int driver = 0;
    cudaDriverGetVersion(&driver);
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "the NVIDIA driver supports CUDA up to ", CudaVersion(driver),
        ", older than the CUDA ", CudaVersion(CUDART_VERSION),
        " runtime this program was built with: update the driver"));
  }
  YARD_CUDA_RETURN_IF_ERROR(e);
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    YARD_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, i));
    CudaDeviceInfo d;
    d.ordinal = i;
    d.name = prop.name;
    d.uuid =
        FormatGpuUuid(reinterpret_cast<const unsigned char*>(prop.uuid.bytes));
    d.total_memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    d.compute_major = prop.major;
    d.compute_minor = prop.minor;
    d.multiprocessors = prop.multiProcessorCount;
    devices.push_back(std::move(d));
  }
  return devices;
}

absl::Status ProbeCudaDevice(int ordinal) {
  constexpr int kN = 1000;
  YARD_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  int* device_out = nullptr;
  YARD_CUDA_RETURN_IF_ERROR(
      cudaMalloc(reinterpret_cast<void**>(&device_out), kN * sizeof(int)));
  std::vector<int> host(kN, 0);
  cudaError_t e = LaunchProbeKernel(device_out, kN);
  if (e == cudaSuccess) {
    e = cudaMemcpy(host.data(), device_out, kN * sizeof(int),
                   cudaMemcpyDeviceToHost);
  }
  cudaFree(device_out);
  YARD_CUDA_RETURN_IF_ERROR(e);
  for (int i = 0; i < kN; ++i) {
    if (host[i] != i * i + 1) {
      return absl::InternalError(
          absl::StrCat("cuda device ", ordinal, ": probe kernel wrote ",
                       host[i], " at ", i, ", expected ", i * i + 1));
    }
  }
  return absl::OkStatus();
}

}  // namespace trainyard::engine::cuda
