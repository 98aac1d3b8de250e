// See launch.h. A launch takes the device lock, checks its shape, then
// hands blocks out to the worker pool one at a time until all have run or
// one fails.
#include "engine/cuda/emulation/launch.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "engine/cuda/emulation/block_runner.h"

namespace trainyard::cuda_emulation {
namespace {

thread_local cudaError_t last_error = cudaSuccess;

// Runs a job on every worker: the calling thread is worker 0, the others
// wait on their own threads between jobs. Runners are kept, and with them
// their fibers' stacks.
class WorkerPool {
 public:
  explicit WorkerPool(int workers) : runners_(workers) {
    for (auto& r : runners_) r = std::make_unique<BlockRunner>();
    for (int w = 1; w < workers; ++w) {
      std::thread([this, w] { Serve(w); }).detach();  // lives with the process
    }
  }

  int size() const { return static_cast<int>(runners_.size()); }

  // Calls job(runner) once per worker and waits for all of them.
  void RunOnAll(const std::function<void(BlockRunner&)>& job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &job;
      pending_ = size() - 1;
      ++generation_;
    }
    wake_.notify_all();
    job(*runners_[0]);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void Serve(int w) {
    uint64_t seen = 0;
    while (true) {
      const std::function<void(BlockRunner&)>* job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        job = job_;
      }
      (*job)(*runners_[w]);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::vector<std::unique_ptr<BlockRunner>> runners_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(BlockRunner&)>* job_ = nullptr;  // guarded by mu_
  int pending_ = 0;                                         // guarded by mu_
  uint64_t generation_ = 0;                                 // guarded by mu_
};

int WorkersFromEnvironment() {
  if (const char* env = std::getenv("YARD_EMULATION_WORKERS")) {
    const int n = std::atoi(env);
    if (n >= 1 && n <= 64) return n;
    std::fprintf(stderr, "cuda emulation: ignoring YARD_EMULATION_WORKERS=%s\n",
                 env);
  }
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(hw, 1, 4);
}

OrderPolicy OrderFromEnvironment() {
  const char* env = std::getenv("YARD_EMULATION_ORDER");
  if (env == nullptr || std::strcmp(env, "rotate") == 0) {
    return OrderPolicy::kRotate;
  }
  if (std::strcmp(env, "ascending") == 0) return OrderPolicy::kAscending;
  if (std::strcmp(env, "descending") == 0) return OrderPolicy::kDescending;
  if (std::strcmp(env, "shuffled") == 0) return OrderPolicy::kShuffled;
  std::fprintf(stderr, "cuda emulation: ignoring YARD_EMULATION_ORDER=%s\n",
               env);
  return OrderPolicy::kRotate;
}

// The emulated device: one kernel at a time.
struct Device {
  std::mutex mu;
  std::unique_ptr<WorkerPool> pool;                    // guarded by mu
  std::map<const void*, int> max_dynamic_smem;         // guarded by mu
  OrderPolicy order = OrderFromEnvironment();          // guarded by mu
  std::function<void(const std::string&)> on_failure;  // guarded by mu
  std::function<void(const LaunchSite&, const LaunchConfig&)>
      on_launch;                                       // guarded by mu
  uint64_t launches = 0;                               // guarded by mu
  std::atomic<int64_t> failures{0};
};

Device& TheDevice() {
  static Device* device = new Device;  // never destroyed: workers use it
  return *device;
}

void SetError(cudaError_t e) { last_error = e; }

bool ValidShape(const LaunchConfig& c) {
  const dim3& g = c.grid;
  const dim3& b = c.block;
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0) {
    return false;
  }
  if (g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535) return false;
  if (b.x > 1024 || b.y > 1024 || b.z > 64) return false;
  return static_cast<uint64_t>(b.x) * b.y * b.z <= 1024;
}

ThreadOrder OrderFor(OrderPolicy policy, uint64_t launch) {
  switch (policy) {
    case OrderPolicy::kAscending:
      return ThreadOrder::kAscending;
    case OrderPolicy::kDescending:
      return ThreadOrder::kDescending;
    case OrderPolicy::kShuffled:
      return ThreadOrder::kShuffled;
    case OrderPolicy::kRotate:
      break;
  }
  const ThreadOrder rotation[] = {ThreadOrder::kAscending,
                                  ThreadOrder::kDescending,
                                  ThreadOrder::kShuffled};
  return rotation[launch % 3];
}

// Runs the blocks of `base` (block_idx and seed filled in per block) on the
// pool; returns the first failure, naming its block, or "".
std::string RunBlocks(WorkerPool& pool, const BlockJob& base) {
  const dim3 g = base.grid;
  const uint64_t blocks = static_cast<uint64_t>(g.x) * g.y * g.z;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::string failure;
  pool.RunOnAll([&](BlockRunner& runner) {
    BlockJob job = base;
    for (uint64_t b = next++; b < blocks && !failed; b = next++) {
      job.block_idx = {static_cast<unsigned>(b % g.x),
                       static_cast<unsigned>(b / g.x % g.y),
                       static_cast<unsigned>(b / (uint64_t{g.x} * g.y))};
      job.seed = base.seed * 0x100000001b3ull + b;
      std::string f = runner.Run(job);
      if (f.empty()) continue;
      failed = true;
      std::lock_guard<std::mutex> lock(mu);
      if (failure.empty()) {
        failure = "block (" + std::to_string(job.block_idx.x) + "," +
                  std::to_string(job.block_idx.y) + "," +
                  std::to_string(job.block_idx.z) + "), " + f;
      }
    }
  });
  return failure;
}

}  // namespace

void RunKernel(const LaunchSite& site, const LaunchConfig& config,
               const void* kernel, void (*body)(const void*),
               const void* body_arg) {
  if (InsideKernel()) {
    FailKernel(std::string("launches ") + site.kernel +
               " from inside a kernel, which the emulation does not do");
  }
  Device& d = TheDevice();
  std::lock_guard<std::mutex> lock(d.mu);
  if (!ValidShape(config)) return SetError(cudaErrorInvalidConfiguration);
  size_t limit = kStaticSharedLimit;
  if (kernel != nullptr) {
    const auto it = d.max_dynamic_smem.find(kernel);
    if (it != d.max_dynamic_smem.end()) {
      limit = std::max(limit, static_cast<size_t>(it->second));
    }
  } else if (config.dynamic_smem > kStaticSharedLimit) {
    // Its opt-in cannot be looked up: trust it rather than fail a launch
    // the GPU would run. (Launching with arguments of exactly the
    // kernel's parameter types lets the lookup work.)
    limit = kSharedOptInLimit;
  }
  if (config.dynamic_smem > limit) return SetError(cudaErrorInvalidValue);
  if (d.on_launch) d.on_launch(site, config);
  if (d.pool == nullptr) {
    d.pool = std::make_unique<WorkerPool>(WorkersFromEnvironment());
  }
  BlockJob job;
  job.grid = config.grid;
  job.block = config.block;
  job.dynamic_smem = config.dynamic_smem;
  job.smem_limit = limit;
  job.order = OrderFor(d.order, d.launches);
  job.seed = d.launches++;
  job.body = body;
  job.body_arg = body_arg;
  const std::string failure = RunBlocks(*d.pool, job);
  if (failure.empty()) return;
  ++d.failures;
  const std::string message = std::string(site.file) + ":" +
                              std::to_string(site.line) + ": kernel " +
                              site.kernel + " failed in " + failure;
  if (d.on_failure) {
    d.on_failure(message);
  } else {
    std::fprintf(stderr, "cuda emulation: %s\n", message.c_str());
  }
  SetError(cudaErrorLaunchFailure);
}

cudaError_t SetKernelAttribute(const void* kernel, cudaFuncAttribute attr,
                               int value) {
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) {
    // A hint on the GPU (how an SM splits L1 and shared memory); the
    // emulation has no L1 to split, so only the value is checked.
    return value >= -1 && value <= 100 ? cudaSuccess : cudaErrorInvalidValue;
  }
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      static_cast<size_t>(value) > kSharedOptInLimit) {
    return cudaErrorInvalidValue;
  }
  Device& d = TheDevice();
  std::lock_guard<std::mutex> lock(d.mu);
  d.max_dynamic_smem[kernel] = value;
  return cudaSuccess;
}

cudaError_t TakeLastError() { return std::exchange(last_error, cudaSuccess); }

cudaError_t PeekLastError() { return last_error; }

void SetThreadOrder(OrderPolicy policy) {
  Device& d = TheDevice();
  std::lock_guard<std::mutex> lock(d.mu);
  d.order = policy;
}

void SetFailureHandler(std::function<void(const std::string&)> handler) {
  Device& d = TheDevice();
  std::lock_guard<std::mutex> lock(d.mu);
  d.on_failure = std::move(handler);
}

int64_t FailureCount() { return TheDevice().failures.load(); }

void SetLaunchObserver(
    std::function<void(const LaunchSite&, const LaunchConfig&)> observer) {
  Device& d = TheDevice();
  std::lock_guard<std::mutex> lock(d.mu);
  d.on_launch = std::move(observer);
}

}  // namespace trainyard::cuda_emulation
