// What the CUDA kernel benchmarks (attention_bench.cc, gemm_bench.cc)
// share: their flags (--name value pairs of positive integers or file
// names), CUDA errors as one line, device buffers freed on every exit,
// launches timed with CUDA events,
// fixed-seed random inputs, medians and CSV appends. Header-only; not
// thread-safe.
#ifndef TRAINYARD_BENCH_ENGINE_CUDA_BENCH_UTIL_H_
#define TRAINYARD_BENCH_ENGINE_CUDA_BENCH_UTIL_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/core/bf16.h"
#include "engine/cuda/stream_timer.h"

namespace trainyard::bench {

// A flag taking a positive integer (or 0 when zero_ok).
struct IntFlag {
  const char* name;  // with its dashes: "--reps"
  int64_t* value;
  bool zero_ok = false;
};

// A flag taking a non-empty string (a file name).
struct StringFlag {
  const char* name;
  std::string* value;
};

// Parses --name value pairs into `ints` and `strings`: false with *error
// naming the flag or value it cannot take.
inline bool ParseFlags(int argc, char** argv, const std::vector<IntFlag>& ints,
                       const std::vector<StringFlag>& strings,
                       std::string* error) {
  if (argc % 2 != 1) {
    *error = "every flag takes one value";
    return false;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    const auto text =
        std::find_if(strings.begin(), strings.end(),
                     [&](const StringFlag& f) { return flag == f.name; });
    if (text != strings.end() && !value.empty()) {
      *text->value = value;
      continue;
    }
    const auto it =
        std::find_if(ints.begin(), ints.end(),
                     [&](const IntFlag& f) { return flag == f.name; });
    int64_t n = 0;
    if (it == ints.end() || !absl::SimpleAtoi(value, &n) ||
        n < (it->zero_ok ? 0 : 1)) {
      *error = absl::StrCat("bad flag or value: ", flag, " ", value);
      return false;
    }
    *it->value = n;
  }
  return true;
}

// True for cudaSuccess; else false with *error "what: the CUDA error".
inline bool CudaOk(cudaError_t e, const char* what, std::string* error) {
  if (e == cudaSuccess) return true;
  *error = absl::StrCat(what, ": ", cudaGetErrorString(e));
  return false;
}

// Device allocations, freed when it goes out of scope.
class DeviceBuffers {
 public:
  DeviceBuffers() = default;
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  ~DeviceBuffers() {
    for (void* p : owned_) cudaFree(p);
  }
  // *p = `bytes` of device memory, or false with *error.
  template <typename T>
  bool Allocate(T** p, int64_t bytes, std::string* error) {
    void* raw = nullptr;
    if (!CudaOk(cudaMalloc(&raw, static_cast<size_t>(bytes)), "cudaMalloc",
                error)) {
      return false;
    }
    owned_.push_back(raw);
    *p = static_cast<T*>(raw);
    return true;
  }

 private:
  std::vector<void*> owned_;
};

// Times one launch at a time on a stream (engine::cuda::StreamTimer), with
// the benchmarks' errors as text.
class EventTimer {
 public:
  // The events, or false with *error.
  bool Create(std::string* error) {
    const absl::Status s = timer_.Create();
    if (!s.ok()) *error = std::string(s.message());
    return s.ok();
  }
  // *ms = the time launch() takes on `stream` (the default stream unless
  // given); launch returns false (having said why, if it matters) when it
  // could not launch. `what` names the run in a CUDA error while it runs.
  template <typename Launch>
  bool Time(const Launch& launch, const std::string& what, float* ms,
            std::string* error, cudaStream_t stream = nullptr) {
    bool launched = true;
    const absl::StatusOr<float> t = timer_.Time(stream, [&] {
      launched = launch();
      return launched ? absl::OkStatus() : absl::AbortedError("not launched");
    });
    if (!launched) return false;
    if (!t.ok()) {
      *error = absl::StrCat(what, ": ", t.status().message());
      return false;
    }
    *ms = *t;
    return true;
  }

 private:
  engine::cuda::StreamTimer timer_;
};

// Uniform in [-1, 1) from a fixed-seed LCG: the same inputs every run.
class Lcg {
 public:
  explicit Lcg(uint64_t seed)
      : x_(seed * 6364136223846793005ull + 1442695040888963407ull) {}
  float Next() {
    x_ = x_ * 6364136223846793005ull + 1442695040888963407ull;
    const float u = static_cast<float>(x_ >> 40) / static_cast<float>(1 << 24);
    return 2.f * u - 1.f;
  }

 private:
  uint64_t x_;
};

inline std::vector<uint16_t> RandomBf16(int64_t n, uint64_t seed) {
  std::vector<uint16_t> v(static_cast<size_t>(n));
  Lcg random(seed);
  for (auto& e : v) e = engine::FloatToBf16(random.Next());
  return v;
}

inline double Median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2]
                           : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2.0;
}

// Appends `rows` (each a line without its newline) to the CSV file at
// `path`, with `header` first if the file is new or empty; false with
// *error if it cannot be written.
inline bool AppendCsv(const std::string& path, const std::string& header,
                      const std::vector<std::string>& rows,
                      std::string* error) {
  std::ifstream existing(path);
  const bool fresh = !existing.good() || existing.peek() == EOF;
  std::ofstream csv(path, std::ios::app);
  if (fresh) csv << header << "\n";
  for (const std::string& row : rows) csv << row << "\n";
  if (!csv) {
    *error = absl::StrCat(path, ": cannot write");
    return false;
  }
  return true;
}

// A benchmark's main: with the flags parsed (`parsed`, else *error says
// what is wrong), returns run(error), 0 or 1; prints "name: error" to
// stderr on failure, and `usage` too when it was the flags.
template <typename Run>
int Main(const char* name, const char* usage, bool parsed, std::string* error,
         const Run& run) {
  if (!parsed) {
    std::fprintf(stderr, "%s: %s\nusage: %s %s\n", name, error->c_str(), name,
                 usage);
    return 1;
  }
  const int rc = run(error);
  if (rc != 0) std::fprintf(stderr, "%s: %s\n", name, error->c_str());
  return rc;
}

}  // namespace trainyard::bench

#endif  // TRAINYARD_BENCH_ENGINE_CUDA_BENCH_UTIL_H_
