// CpuBackend's Backend overrides, the ops seen through activation_dtype().
// In fp32 each casts its pointers and calls the fp32 op (so fp32 results
// are the reference's, bit for bit). In bf16 each widens its bf16 inputs to
// fp32 copies, runs the same fp32 op on them, and rounds its outputs to
// nearest even once: bf16 storage, fp32 math, as the CUDA backend's bf16
// kernels. Outputs the op accumulates into (+=) are widened first, so the
// sum happens in fp32 and is rounded once. The copies cost time and memory
// outside the allocation count; this mode exists to test the mixed-
// precision plumbing, not to train fast. See cpu_backend.h.
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/core/bf16.h"
#include "engine/cpu/cpu_backend.h"

namespace trainyard::engine {
namespace {

float* F(void* p) { return static_cast<float*>(p); }
const float* F(const void* p) { return static_cast<const float*>(p); }

// An fp32 copy of a bf16 tensor of n elements; empty for null.
std::vector<float> Widen(const void* p, int64_t n) {
  if (p == nullptr) return {};
  std::vector<float> out(static_cast<size_t>(n));
  Bf16ToFloats(static_cast<const uint16_t*>(p), n, out.data());
  return out;
}

// Uninitialized fp32 output of n elements; empty for null.
std::vector<float> Output(const void* p, int64_t n) {
  if (p == nullptr) return {};
  return std::vector<float>(static_cast<size_t>(n));
}

float* D(std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

// Rounds v into the bf16 tensor at dst (skipped for null).
void Narrow(void* dst, const std::vector<float>& v) {
  if (dst == nullptr) return;
  FloatsToBf16(v.data(), static_cast<int64_t>(v.size()),
               static_cast<uint16_t*>(dst));
}

}  // namespace

void CpuBackend::FillActivations(void* x, int64_t n, float value) {
  if (!bf16()) return Fill(F(x), n, value);
  const uint16_t h = FloatToBf16(value);
  uint16_t* p = static_cast<uint16_t*>(x);
  for (int64_t i = 0; i < n; ++i) p[i] = h;
}

void CpuBackend::CastToActivations(void* dst, const float* src, int64_t n) {
  if (!bf16()) {
    if (dst != src) std::memmove(dst, src, static_cast<size_t>(n) * 4);
    return;
  }
  FloatsToBf16(src, n, static_cast<uint16_t*>(dst));
}

void CpuBackend::LinearForward(void* out, const void* inp, const void* weight,
                               const void* bias, int64_t batch, int64_t in,
                               int64_t out_features) {
  if (!bf16()) {
    return LinearForward(F(out), F(inp), F(weight), F(bias), batch, in,
                         out_features);
  }
  std::vector<float> x = Widen(inp, batch * in),
                     w = Widen(weight, out_features * in),
                     b = Widen(bias, out_features),
                     o = Output(out, batch * out_features);
  LinearForward(D(o), D(x), D(w), D(b), batch, in, out_features);
  Narrow(out, o);
}

void CpuBackend::LinearBackward(void* dinp, float* dweight, float* dbias,
                                const void* dout, const void* inp,
                                const void* weight, int64_t batch, int64_t in,
                                int64_t out_features) {
  if (!bf16()) {
    return LinearBackward(F(dinp), dweight, dbias, F(dout), F(inp), F(weight),
                          batch, in, out_features);
  }
  std::vector<float> d = Widen(dout, batch * out_features),
                     x = Widen(inp, batch * in),
                     w = Widen(weight, out_features * in),
                     di = Output(dinp, batch * in);
  LinearBackward(D(di), dweight, dbias, D(d), D(x), D(w), batch, in,
                 out_features);
  Narrow(dinp, di);
}

void CpuBackend::ReluForward(void* out, const void* x, int64_t n) {
  if (!bf16()) return ReluForward(F(out), F(x), n);
  std::vector<float> xf = Widen(x, n), o = Output(out, n);
  ReluForward(D(o), D(xf), n);
  Narrow(out, o);
}

void CpuBackend::ReluBackward(void* dx, const void* dout, const void* out,
                              int64_t n) {
  if (!bf16()) return ReluBackward(F(dx), F(dout), F(out), n);
  std::vector<float> d = Widen(dout, n), o = Widen(out, n), g = Output(dx, n);
  ReluBackward(D(g), D(d), D(o), n);
  Narrow(dx, g);
}

void CpuBackend::SoftmaxCrossEntropyForward(float* losses, int32_t* hits,
                                            float* lse, const void* logits,
                                            const int32_t* targets,
                                            int64_t batch, int64_t classes) {
  if (!bf16()) {
    return SoftmaxCrossEntropyForward(losses, hits, lse, F(logits), targets,
                                      batch, classes);
  }
  std::vector<float> x = Widen(logits, batch * classes);
  SoftmaxCrossEntropyForward(losses, hits, lse, D(x), targets, batch, classes);
}

void CpuBackend::SoftmaxCrossEntropyBackward(void* dlogits, const void* logits,
                                             const float* lse,
                                             const int32_t* targets,
                                             float scale, int64_t batch,
                                             int64_t classes) {
  if (!bf16()) {
    return SoftmaxCrossEntropyBackward(F(dlogits), F(logits), lse, targets,
                                       scale, batch, classes);
  }
  // The widened copy is read whole before dlogits is written: in place is
  // fine.
  std::vector<float> x = Widen(logits, batch * classes);
  SoftmaxCrossEntropyBackward(D(x), D(x), lse, targets, scale, batch, classes);
  Narrow(dlogits, x);
}

void CpuBackend::AdamW(float* param, const float* grad, float* m, float* v,
                       void* working, int64_t n, const AdamWUpdate& u) {
  AdamW(param, grad, m, v, n, u);
  if (working != nullptr && working != param)
    CastToActivations(working, param, n);
}

void CpuBackend::Add(void* out, const void* a, const void* b, int64_t n) {
  if (!bf16()) return Add(F(out), F(a), F(b), n);
  std::vector<float> x = Widen(a, n), y = Widen(b, n), o = Output(out, n);
  Add(D(o), D(x), D(y), n);
  Narrow(out, o);
}

void CpuBackend::EmbeddingForward(void* out, const int32_t* tokens,
                                  const void* wte, const void* wpe,
                                  int64_t batch, int64_t seq,
                                  int64_t channels) {
  if (!bf16()) {
    return EmbeddingForward(F(out), tokens, F(wte), F(wpe), batch, seq,
                            channels);
  }
  // Only the rows the tokens name are read: widen just those.
  int32_t rows = 0;
  for (int64_t i = 0; i < batch * seq; ++i)
    rows = std::max(rows, tokens[i] + 1);
  std::vector<float> te = Widen(wte, rows * channels),
                     pe = Widen(wpe, seq * channels),
                     o = Output(out, batch * seq * channels);
  EmbeddingForward(D(o), tokens, D(te), D(pe), batch, seq, channels);
  Narrow(out, o);
}

void CpuBackend::EmbeddingBackward(float* dwte, float* dwpe, const void* dout,
                                   const int32_t* tokens, int64_t batch,
                                   int64_t seq, int64_t channels) {
  if (!bf16()) {
    return EmbeddingBackward(dwte, dwpe, F(dout), tokens, batch, seq, channels);
  }
  std::vector<float> d = Widen(dout, batch * seq * channels);
  EmbeddingBackward(dwte, dwpe, D(d), tokens, batch, seq, channels);
}

void CpuBackend::LayerNormForward(void* out, float* mean, float* rstd,
                                  const void* inp, const void* weight,
                                  const void* bias, int64_t rows,
                                  int64_t channels) {
  if (!bf16()) {
    return LayerNormForward(F(out), mean, rstd, F(inp), F(weight), F(bias),
                            rows, channels);
  }
  std::vector<float> x = Widen(inp, rows * channels),
                     w = Widen(weight, channels), b = Widen(bias, channels),
                     o = Output(out, rows * channels);
  LayerNormForward(D(o), mean, rstd, D(x), D(w), D(b), rows, channels);
  Narrow(out, o);
}

void CpuBackend::LayerNormBackward(void* dinp, float* dweight, float* dbias,
                                   float* dinp_sums, const void* dout,
                                   const void* inp, const void* weight,
                                   const float* mean, const float* rstd,
                                   int64_t rows, int64_t channels) {
  if (!bf16()) {
    return LayerNormBackward(F(dinp), dweight, dbias, dinp_sums, F(dout),
                             F(inp), F(weight), mean, rstd, rows, channels);
  }
  const int64_t n = rows * channels;
  std::vector<float> di = Widen(dinp, n), d = Widen(dout, n), x = Widen(inp, n),
                     w = Widen(weight, channels);
  LayerNormBackward(D(di), dweight, dbias, nullptr, D(d), D(x), D(w), mean,
                    rstd, rows, channels);
  Narrow(dinp, di);
  // The sums of dinp as stored, as a later LinearBackward would read it.
  if (dinp_sums != nullptr) {
    AddColumnSums(dinp_sums, Widen(dinp, n).data(), rows, channels);
  }
}

void CpuBackend::GeluForward(void* out, const void* x, int64_t n) {
  if (!bf16()) return GeluForward(F(out), F(x), n);
  std::vector<float> xf = Widen(x, n), o = Output(out, n);
  GeluForward(D(o), D(xf), n);
  Narrow(out, o);
}

void CpuBackend::GeluBackward(void* dx, const void* x, const void* dout,
                              int64_t n) {
  if (!bf16()) return GeluBackward(F(dx), F(x), F(dout), n);
  std::vector<float> xf = Widen(x, n), d = Widen(dout, n), g = Output(dx, n);
  GeluBackward(D(g), D(xf), D(d), n);
  Narrow(dx, g);
}

void CpuBackend::AttentionForward(void* out, float* att, const void* qkv,
                                  int64_t batch, int64_t seq, int64_t channels,
                                  int64_t heads) {
  if (!bf16()) {
    return AttentionForward(F(out), att, F(qkv), batch, seq, channels, heads);
  }
  const int64_t btc = batch * seq * channels;
  std::vector<float> x = Widen(qkv, 3 * btc), o = Output(out, btc);
  AttentionForward(D(o), att, D(x), batch, seq, channels, heads);
  Narrow(out, o);
}

void CpuBackend::AttentionBackward(void* dqkv, float* scratch, const void* dout,
                                   const void* out, const void* qkv,
                                   const float* att, int64_t batch, int64_t seq,
                                   int64_t channels, int64_t heads) {
  if (!bf16()) {
    return AttentionBackward(F(dqkv), scratch, F(dout), F(out), F(qkv), att,
                             batch, seq, channels, heads);
  }
  const int64_t btc = batch * seq * channels;
  std::vector<float> d = Widen(dout, btc), o = Widen(out, btc),
                     x = Widen(qkv, 3 * btc), g = Output(dqkv, 3 * btc);
  AttentionBackward(D(g), scratch, D(d), D(o), D(x), att, batch, seq, channels,
                    heads);
  Narrow(dqkv, g);
}

}  // namespace trainyard::engine
