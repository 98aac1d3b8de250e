// Kernel launches in the host emulation of CUDA. rewrite_kernels.py turns
// `kernel<<<grid, block, smem, stream>>>(args)` into
//   Launch({__FILE__, __LINE__, "kernel"}, Config(grid, block, smem, stream),
//          TRAINYARD_EMULATION_KERNEL(kernel), args)
// which runs the kernel to completion before returning (every stream is
// synchronous): blocks are spread over a few OS threads, each block's
// threads run as fibers (block_runner.h). A launch checks its shape as
// CUDA does (cudaErrorInvalidConfiguration) and dynamic shared memory over
// 48 KB against the kernel's cudaFuncSetAttribute opt-in
// (cudaErrorInvalidValue); that needs the kernel's address, found when the
// arguments have exactly its parameter types or the kernel is not a
// template (else the launch is trusted up to the 227 KB maximum). A kernel that
// fails a check at run time (block_runner.h, or __trap) makes the launch error
// cudaErrorLaunchFailure (not sticky, unlike CUDA's) and its message goes
// to the failure handler (default: stderr).
//
// The order of each block's threads rotates from launch to launch
// (ascending, descending, shuffled) unless fixed by SetThreadOrder or the
// environment variable YARD_EMULATION_ORDER (ascending, descending,
// shuffled, rotate); YARD_EMULATION_WORKERS sets the OS threads (default:
// the hardware's, at most 4).
//
// Thread-safety: launches and the settings below may come from any host
// thread; kernels run one at a time. Last errors are per host thread, as
// in CUDA.
#ifndef TRAINYARD_ENGINE_CUDA_EMULATION_LAUNCH_H_
#define TRAINYARD_ENGINE_CUDA_EMULATION_LAUNCH_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "engine/cuda/emulation/cuda_types.h"

namespace trainyard::cuda_emulation {

struct LaunchSite {
  const char* file;
  int line;
  const char* kernel;  // the kernel expression as written
};

struct LaunchConfig {
  dim3 grid, block;
  size_t dynamic_smem;
  cudaStream_t stream;
};

inline LaunchConfig Config(dim3 grid, dim3 block, size_t dynamic_smem = 0,
                           cudaStream_t stream = nullptr) {
  return {grid, block, dynamic_smem, stream};
}

// A kernel call every emulated thread makes, and how to find the kernel's
// address (for its attributes) from the argument types.
template <typename Body, typename Address>
struct KernelRef {
  Body body;
  Address address;
};
template <typename Body, typename Address>
KernelRef(Body, Address) -> KernelRef<Body, Address>;

// The address of a kernel called with arguments of types A: exact when
// its parameters are A (a template kernel deduces its arguments from
// them), else through a pointer to a non-template kernel.
template <typename... A>
struct KernelAddressOf {
  static const void* Exact(void (*f)(A...)) {
    return reinterpret_cast<const void*>(f);
  }
  template <typename F>
  static const void* Pointer(F* f) {
    return reinterpret_cast<const void*>(f);
  }
};

// Runs body(body_arg) as every thread of every block. `kernel` identifies
// the kernel for its attributes; nullptr if unknown.
void RunKernel(const LaunchSite& site, const LaunchConfig& config,
               const void* kernel, void (*body)(const void*),
               const void* body_arg);

template <typename Body, typename Address, typename... Args>
void Launch(const LaunchSite& site, const LaunchConfig& config,
            KernelRef<Body, Address> kernel, Args... args) {
  const void* address = kernel.address(args...);
  const auto call = [&] { kernel.body(args...); };
  using Call = decltype(call);
  RunKernel(
      site, config, address,
      [](const void* c) { (*static_cast<const Call*>(c))(); }, &call);
}

// Records the kernel's attribute; cudaErrorInvalidValue for an unknown
// attribute or a value over the device's limit.
cudaError_t SetKernelAttribute(const void* kernel, cudaFuncAttribute attr,
                               int value);

// The calling host thread's last error (cleared when taken, as CUDA's).
cudaError_t TakeLastError();
cudaError_t PeekLastError();

enum class OrderPolicy { kRotate, kAscending, kDescending, kShuffled };
void SetThreadOrder(OrderPolicy policy);

// Called with each kernel failure's message, on the launching thread.
// An empty handler restores the default (stderr).
void SetFailureHandler(std::function<void(const std::string&)> handler);

// Kernel failures since the process started.
int64_t FailureCount();

// Called with each launch that passes its checks, before it runs, on the
// launching thread while the device is held (so it must not launch or
// set the emulation); for tests that check which kernel shape a launcher
// picked. An empty observer removes it.
void SetLaunchObserver(
    std::function<void(const LaunchSite&, const LaunchConfig&)> observer);

}  // namespace trainyard::cuda_emulation

// The KernelRef for a kernel expression (it may hold commas, as in
// `Kernel<T, 64>`): a call forwarding the arguments and the address lookup.
#define TRAINYARD_EMULATION_KERNEL(...)                                    \
  ::trainyard::cuda_emulation::KernelRef {                                 \
    [&](auto... a) { __VA_ARGS__(a...); }, [&](auto... a) -> const void* { \
      using Find =                                                         \
          ::trainyard::cuda_emulation::KernelAddressOf<decltype(a)...>;    \
      if constexpr (requires { Find::Exact(__VA_ARGS__); }) {              \
        return Find::Exact(__VA_ARGS__);                                   \
      } else if constexpr (requires { Find::Pointer(__VA_ARGS__); }) {     \
        return Find::Pointer(__VA_ARGS__);                                 \
      } else {                                                             \
        return nullptr;                                                    \
      }                                                                    \
    }                                                                      \
  }

#endif  // TRAINYARD_ENGINE_CUDA_EMULATION_LAUNCH_H_
