// CPU fp32 ops. See cpu_backend.h.
#include "engine/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/cpu/denormals.h"
#include "engine/cpu/gemm.h"

namespace trainyard::engine {
namespace {

// Elementwise ops go parallel only past this size; below it the wake-up
// costs more than the work.
constexpr int64_t kChunk = 1 << 14;
// SumSquares sums fixed chunks in order, independent of the thread count.
constexpr int64_t kSumChunk = 1 << 13;

}  // namespace

// 64-byte aligned, zero-filled host memory, counted against its backend.
// REQUIRES: freed before the backend that made it.
class CpuBuffer : public DeviceBuffer {
 public:
  CpuBuffer(void* data, int64_t bytes, CpuBackend* owner)
      : data_(data), bytes_(bytes), owner_(owner) {}
  ~CpuBuffer() override {
    std::free(data_);
    owner_->allocated_bytes_ -= bytes_;
  }
  void* data() override { return data_; }
  int64_t bytes() const override { return bytes_; }

 private:
  void* data_;
  int64_t bytes_;
  CpuBackend* owner_;
};

CpuBackend::CpuBackend(const CpuBackendOptions& options)
    : options_(options), pool_(options.threads) {
  FlushDenormalsOnThisThread();  // the pool's workers flush their own
}

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(
    const CpuBackendOptions& options) {
  if (options.threads < 1 || options.threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cpu backend: threads must be in [1, 1024], got ", options.threads));
  }
  return std::unique_ptr<CpuBackend>(new CpuBackend(options));
}

absl::StatusOr<std::unique_ptr<DeviceBuffer>> CpuBackend::Allocate(
    int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError("negative allocation");
  if (options_.memory_limit_bytes > 0 &&
      allocated_bytes_ + bytes > options_.memory_limit_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cpu backend: allocating ", bytes, " bytes would exceed the limit of ",
        options_.memory_limit_bytes));
  }
  const size_t rounded =
      static_cast<size_t>((std::max<int64_t>(bytes, 1) + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cpu backend: out of memory allocating ", bytes, " bytes"));
  }
  std::memset(p, 0, rounded);
  allocated_bytes_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, allocated_bytes_);
  return std::unique_ptr<DeviceBuffer>(new CpuBuffer(p, bytes, this));
}

void CpuBackend::CopyToDevice(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
}

void CpuBackend::CopyToHost(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
}

void CpuBackend::ForChunks(int64_t n,
                           const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 2 * kChunk || pool_.threads() == 1) {
    fn(0, n);
    return;
  }
  pool_.ParallelFor((n + kChunk - 1) / kChunk, [&](int64_t c) {
    fn(c * kChunk, std::min(n, (c + 1) * kChunk));
  });
}

void CpuBackend::ForRange(int64_t n, int64_t grain,
                          const std::function<void(int64_t, int64_t)>& fn) {
  grain = std::max<int64_t>(grain, 1);
  const int64_t ranges = (n + grain - 1) / grain;
  if (ranges <= 1 || pool_.threads() == 1) {
    if (n > 0) fn(0, n);
    return;
  }
  pool_.ParallelFor(
      ranges, [&](int64_t r) { fn(r * grain, std::min(n, (r + 1) * grain)); });
}

void CpuBackend::Add(float* out, const float* a, const float* b, int64_t n) {
  ForChunks(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
  });
}

void CpuBackend::Fill(float* x, int64_t n, float value) {
  ForChunks(n, [&](int64_t b, int64_t e) { std::fill(x + b, x + e, value); });
}

void CpuBackend::Scale(float* x, int64_t n, float s) {
  ForChunks(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] *= s;
  });
}

double CpuBackend::SumSquares(const float* x, int64_t n) {
  const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  std::vector<double> partial(static_cast<size_t>(chunks));
  auto sum_chunk = [&](int64_t c) {
    double s = 0;
    for (int64_t i = c * kSumChunk; i < std::min(n, (c + 1) * kSumChunk); ++i) {
      s += static_cast<double>(x[i]) * x[i];
    }
    partial[c] = s;
  };
  if (chunks > 4) {
    pool_.ParallelFor(chunks, sum_chunk);
  } else {
    for (int64_t c = 0; c < chunks; ++c) sum_chunk(c);
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

void CpuBackend::LinearForward(float* out, const float* inp,
                               const float* weight, const float* bias,
                               int64_t batch, int64_t in,
                               int64_t out_features) {
  for (int64_t b = 0; b < batch; ++b) {
    float* row = out + b * out_features;
    if (bias != nullptr) {
      std::memcpy(row, bias, static_cast<size_t>(out_features) * 4);
    } else {
      std::fill(row, row + out_features, 0.f);
    }
  }
  GemmArgs g;
  g.trans_b = true;  // weight is [out, in]
  g.m = batch;
  g.n = out_features;
  g.k = in;
  g.a = inp;
  g.lda = in;
  g.b = weight;
  g.ldb = in;
  g.c = out;
  g.ldc = out_features;
  Gemm(g, &pool_);
}

void CpuBackend::LinearBackward(float* dinp, float* dweight, float* dbias,
                                const float* dout, const float* inp,
                                const float* weight, int64_t batch, int64_t in,
                                int64_t out_features) {
  if (dinp != nullptr) {
    std::fill(dinp, dinp + batch * in, 0.f);
    GemmArgs g;  // dinp[batch, in] = dout[batch, out] . weight[out, in]
    g.m = batch;
    g.n = in;
    g.k = out_features;
    g.a = dout;
    g.lda = out_features;
    g.b = weight;
    g.ldb = in;
    g.c = dinp;
    g.ldc = in;
    Gemm(g, &pool_);
  }
  GemmArgs g;  // dweight[out, in] += dout^T . inp[batch, in]
  g.trans_a = true;
  g.m = out_features;
  g.n = in;
  g.k = batch;
  g.a = dout;
  g.lda = out_features;
  g.b = inp;
  g.ldb = in;
  g.c = dweight;
  g.ldc = in;
  Gemm(g, &pool_);
  if (dbias != nullptr) AddColumnSums(dbias, dout, batch, out_features);
}

// Parallel over columns; each column sums its rows in order.
void CpuBackend::AddColumnSums(float* out, const float* x, int64_t rows,
                               int64_t cols) {
  ForRange(cols, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = x + r * cols;
      for (int64_t c = c0; c < c1; ++c) out[c] += row[c];
    }
  });
}

void CpuBackend::ReluForward(float* out, const float* x, int64_t n) {
  ForChunks(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = x[i] > 0.f ? x[i] : 0.f;
  });
}

void CpuBackend::ReluBackward(float* dx, const float* dout, const float* out,
                              int64_t n) {
  ForChunks(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dx[i] = out[i] > 0.f ? dout[i] : 0.f;
  });
}

namespace {

// A row's largest logit (and where it first is) and its sum of
// exp(x - max), both passes in ascending class order: the forward and the
// backward see bitwise the same softmax.
struct RowSoftmax {
  float max = 0;
  float sum = 0;
  int64_t argmax = 0;
};
RowSoftmax SoftmaxOf(const float* x, int64_t classes) {
  RowSoftmax r{x[0], 0.f, 0};
  for (int64_t c = 1; c < classes; ++c) {
    if (x[c] > r.max) {
      r.max = x[c];
      r.argmax = c;
    }
  }
  for (int64_t c = 0; c < classes; ++c) r.sum += std::exp(x[c] - r.max);
  return r;
}

}  // namespace

void CpuBackend::SoftmaxCrossEntropyForward(float* losses, int32_t* hits,
                                            float* lse, const float* logits,
                                            const int32_t* targets,
                                            int64_t batch, int64_t classes) {
  const int64_t grain = std::max<int64_t>(1, 8192 / classes);
  ForRange(batch, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* x = logits + b * classes;
      const RowSoftmax r = SoftmaxOf(x, classes);
      // log-sum-exp form: exact even when p[target] underflows to 0.
      losses[b] = std::log(r.sum) - (x[targets[b]] - r.max);
      if (hits != nullptr) hits[b] = r.argmax == targets[b] ? 1 : 0;
      if (lse != nullptr) lse[b] = r.max + std::log(r.sum);
    }
  });
}

void CpuBackend::SoftmaxCrossEntropyBackward(
    float* dlogits, const float* logits, const float* lse,
    const int32_t* targets, float scale, int64_t batch, int64_t classes) {
  const int64_t grain = std::max<int64_t>(1, 8192 / classes);
  ForRange(batch, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* x = logits + b * classes;
      float* d = dlogits + b * classes;  // may be x: each entry is read first
      // p = exp(x - shift) * inv, from the forward's lse when given.
      float shift = 0.f, inv = 1.f;
      if (lse != nullptr) {
        shift = lse[b];
      } else {
        const RowSoftmax r = SoftmaxOf(x, classes);
        shift = r.max;
        inv = 1.f / r.sum;
      }
      for (int64_t c = 0; c < classes; ++c) {
        const float p = std::exp(x[c] - shift) * inv;
        d[c] = (p - (c == targets[b] ? 1.f : 0.f)) * scale;
      }
    }
  });
}

void CpuBackend::AdamW(float* param, const float* grad, float* m, float* v,
                       int64_t n, const AdamWUpdate& u) {
  ForChunks(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float g = grad[i] * u.grad_scale;
      m[i] = u.beta1 * m[i] + (1.f - u.beta1) * g;
      v[i] = u.beta2 * v[i] + (1.f - u.beta2) * g * g;
      const float m_hat = m[i] / u.bias_correction1;
      const float v_hat = v[i] / u.bias_correction2;
      param[i] -= u.lr * (m_hat / (std::sqrt(v_hat) + u.eps) +
                          u.weight_decay * param[i]);
    }
  });
}

}  // namespace trainyard::engine
