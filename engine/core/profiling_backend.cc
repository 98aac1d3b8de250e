// Op timing around another backend. See profiling_backend.h.
#include "engine/core/profiling_backend.h"

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace trainyard::engine {

ProfilingBackend::ProfilingBackend(std::unique_ptr<Backend> inner)
    : inner_(std::move(inner)) {}

void ProfilingBackend::Wait() {
  absl::Status s = inner_->Synchronize();
  if (pending_.ok()) pending_ = std::move(s);
}

template <typename Call>
auto ProfilingBackend::Timed(const char* op, Call&& call) {
  return TimedAs([op] { return std::string(op); }, std::forward<Call>(call));
}

template <typename Call>
auto ProfilingBackend::Timed(const char* op, int64_t in, int64_t out,
                             Call&& call) {
  return TimedAs([&] { return absl::StrCat(op, " ", in, "x", out); },
                 std::forward<Call>(call));
}

template <typename Name, typename Call>
auto ProfilingBackend::TimedAs(const Name& name, Call&& call) {
  if (!enabled_) return call();
  Wait();
  const auto start = std::chrono::steady_clock::now();
  auto finish = [&] {
    Wait();
    std::string op = name();
    OpTime& t = totals_[op];
    t.op = std::move(op);
    ++t.calls;
    t.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
  };
  if constexpr (std::is_void_v<decltype(call())>) {
    call();
    finish();
  } else {
    auto result = call();
    finish();
    return result;
  }
}

std::vector<OpTime> ProfilingBackend::Profile() const {
  std::vector<OpTime> out;
  for (const auto& [op, t] : totals_) out.push_back(t);
  std::stable_sort(
      out.begin(), out.end(),
      [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
  return out;
}

absl::Status ProfilingBackend::Synchronize() {
  absl::Status s = inner_->Synchronize();
  if (!pending_.ok()) s = std::exchange(pending_, absl::OkStatus());
  return s;
}

void ProfilingBackend::CopyToDevice(void* dst, const void* src, int64_t bytes) {
  Timed("CopyToDevice", [&] { inner_->CopyToDevice(dst, src, bytes); });
}

void ProfilingBackend::CopyToHost(void* dst, const void* src, int64_t bytes) {
  Timed("CopyToHost", [&] { inner_->CopyToHost(dst, src, bytes); });
}

void ProfilingBackend::Fill(float* x, int64_t n, float value) {
  Timed("Fill", [&] { inner_->Fill(x, n, value); });
}

void ProfilingBackend::FillActivations(void* x, int64_t n, float value) {
  Timed("FillActivations", [&] { inner_->FillActivations(x, n, value); });
}

void ProfilingBackend::CastToActivations(void* dst, const float* src,
                                         int64_t n) {
  Timed("CastToActivations", [&] { inner_->CastToActivations(dst, src, n); });
}

void ProfilingBackend::Scale(float* x, int64_t n, float s) {
  Timed("Scale", [&] { inner_->Scale(x, n, s); });
}

double ProfilingBackend::SumSquares(const float* x, int64_t n) {
  return Timed("SumSquares", [&] { return inner_->SumSquares(x, n); });
}

std::vector<double> ProfilingBackend::SumSquaresEach(
    std::span<const FloatTensor> tensors) {
  return Timed("SumSquaresEach",
               [&] { return inner_->SumSquaresEach(tensors); });
}

void ProfilingBackend::LinearForward(void* out, const void* inp,
                                     const void* weight, const void* bias,
                                     int64_t batch, int64_t in,
                                     int64_t out_features) {
  Timed("LinearForward", in, out_features, [&] {
    inner_->LinearForward(out, inp, weight, bias, batch, in, out_features);
  });
}

void ProfilingBackend::LinearGeluForward(void* out, void* pre, const void* inp,
                                         const void* weight, const void* bias,
                                         int64_t batch, int64_t in,
                                         int64_t out_features) {
  Timed("LinearGeluForward", in, out_features, [&] {
    inner_->LinearGeluForward(out, pre, inp, weight, bias, batch, in,
                              out_features);
  });
}

void ProfilingBackend::LinearBackwardThroughGelu(
    void* dpre, float* dweight, float* dbias, const void* dout, const void* inp,
    const void* weight, const void* pre, int64_t batch, int64_t in,
    int64_t out_features) {
  Timed("LinearBackwardThroughGelu", in, out_features, [&] {
    inner_->LinearBackwardThroughGelu(dpre, dweight, dbias, dout, inp, weight,
                                      pre, batch, in, out_features);
  });
}

void ProfilingBackend::LinearBackward(void* dinp, float* dweight, float* dbias,
                                      const void* dout, const void* inp,
                                      const void* weight, int64_t batch,
                                      int64_t in, int64_t out_features) {
  Timed("LinearBackward", in, out_features, [&] {
    inner_->LinearBackward(dinp, dweight, dbias, dout, inp, weight, batch, in,
                           out_features);
  });
}

void ProfilingBackend::ReluForward(void* out, const void* x, int64_t n) {
  Timed("ReluForward", [&] { inner_->ReluForward(out, x, n); });
}

void ProfilingBackend::ReluBackward(void* dx, const void* dout, const void* out,
                                    int64_t n) {
  Timed("ReluBackward", [&] { inner_->ReluBackward(dx, dout, out, n); });
}

void ProfilingBackend::SoftmaxCrossEntropyForward(
    float* losses, int32_t* hits, float* lse, const void* logits,
    const int32_t* targets, int64_t batch, int64_t classes) {
  Timed("SoftmaxCrossEntropyForward", [&] {
    inner_->SoftmaxCrossEntropyForward(losses, hits, lse, logits, targets,
                                       batch, classes);
  });
}

void ProfilingBackend::SoftmaxCrossEntropyBackward(
    void* dlogits, const void* logits, const float* lse, const int32_t* targets,
    float scale, int64_t batch, int64_t classes) {
  Timed("SoftmaxCrossEntropyBackward", [&] {
    inner_->SoftmaxCrossEntropyBackward(dlogits, logits, lse, targets, scale,
                                        batch, classes);
  });
}

void ProfilingBackend::SoftmaxCrossEntropyForwardBackward(
    float* losses, int32_t* hits, float* lse, void* logits,
    const int32_t* targets, float scale, int64_t batch, int64_t classes) {
  Timed("SoftmaxCrossEntropyForwardBackward", [&] {
    inner_->SoftmaxCrossEntropyForwardBackward(losses, hits, lse, logits,
                                               targets, scale, batch, classes);
  });
}

void ProfilingBackend::AdamW(float* param, const float* grad, float* m,
                             float* v, void* working, int64_t n,
                             const AdamWUpdate& update) {
  Timed("AdamW", [&] { inner_->AdamW(param, grad, m, v, working, n, update); });
}

void ProfilingBackend::AdamWEach(std::span<const AdamWTensor> tensors,
                                 const AdamWUpdate& update) {
  Timed("AdamWEach", [&] { inner_->AdamWEach(tensors, update); });
}

void ProfilingBackend::Add(void* out, const void* a, const void* b, int64_t n) {
  Timed("Add", [&] { inner_->Add(out, a, b, n); });
}

void ProfilingBackend::EmbeddingForward(void* out, const int32_t* tokens,
                                        const void* wte, const void* wpe,
                                        int64_t batch, int64_t seq,
                                        int64_t channels) {
  Timed("EmbeddingForward", [&] {
    inner_->EmbeddingForward(out, tokens, wte, wpe, batch, seq, channels);
  });
}

void ProfilingBackend::EmbeddingBackward(float* dwte, float* dwpe,
                                         const void* dout,
                                         const int32_t* tokens, int64_t batch,
                                         int64_t seq, int64_t channels) {
  Timed("EmbeddingBackward", [&] {
    inner_->EmbeddingBackward(dwte, dwpe, dout, tokens, batch, seq, channels);
  });
}

void ProfilingBackend::LayerNormForward(void* out, float* mean, float* rstd,
                                        const void* inp, const void* weight,
                                        const void* bias, int64_t rows,
                                        int64_t channels) {
  Timed("LayerNormForward", [&] {
    inner_->LayerNormForward(out, mean, rstd, inp, weight, bias, rows,
                             channels);
  });
}

void ProfilingBackend::AddLayerNormForward(void* res, void* out, float* mean,
                                           float* rstd, const void* a,
                                           const void* b, const void* weight,
                                           const void* bias, int64_t rows,
                                           int64_t channels) {
  Timed("AddLayerNormForward", [&] {
    inner_->AddLayerNormForward(res, out, mean, rstd, a, b, weight, bias, rows,
                                channels);
  });
}

void ProfilingBackend::LayerNormBackward(void* dinp, float* dweight,
                                         float* dbias, float* dinp_sums,
                                         const void* dout, const void* inp,
                                         const void* weight, const float* mean,
                                         const float* rstd, int64_t rows,
                                         int64_t channels) {
  Timed("LayerNormBackward", [&] {
    inner_->LayerNormBackward(dinp, dweight, dbias, dinp_sums, dout, inp,
                              weight, mean, rstd, rows, channels);
  });
}

void ProfilingBackend::GeluForward(void* out, const void* x, int64_t n) {
  Timed("GeluForward", [&] { inner_->GeluForward(out, x, n); });
}

void ProfilingBackend::GeluBackward(void* dx, const void* x, const void* dout,
                                    int64_t n) {
  Timed("GeluBackward", [&] { inner_->GeluBackward(dx, x, dout, n); });
}

void ProfilingBackend::AttentionForward(void* out, float* state,
                                        const void* qkv, int64_t batch,
                                        int64_t seq, int64_t channels,
                                        int64_t heads) {
  Timed("AttentionForward", [&] {
    inner_->AttentionForward(out, state, qkv, batch, seq, channels, heads);
  });
}

void ProfilingBackend::AttentionBackward(void* dqkv, float* scratch,
                                         const void* dout, const void* out,
                                         const void* qkv, const float* state,
                                         int64_t batch, int64_t seq,
                                         int64_t channels, int64_t heads) {
  Timed("AttentionBackward", [&] {
    inner_->AttentionBackward(dqkv, scratch, dout, out, qkv, state, batch, seq,
                              channels, heads);
  });
}

}  // namespace trainyard::engine
