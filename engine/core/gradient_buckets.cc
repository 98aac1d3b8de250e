// Gradient buckets for overlapped all-reduce. See gradient_buckets.h.
#include "engine/core/gradient_buckets.h"

#include <algorithm>
#include <utility>

namespace trainyard::engine {

std::vector<GradientBucket> PlanGradientBuckets(
    const std::vector<Parameter>& params, int64_t bucket_floats) {
  int64_t total = 0;
  for (const Parameter& p : params) total += p.size();
  if (bucket_floats <= 0) bucket_floats = std::max<int64_t>(total, 1);
  std::vector<GradientBucket> buckets;
  GradientBucket open;
  auto close = [&] {
    if (open.floats > 0) buckets.push_back(std::move(open));
    open = GradientBucket();
  };
  for (size_t i = params.size(); i-- > 0;) {
    // Each parameter is taken from its end, so consecutive pieces run
    // backwards through memory and merge when the gradients are adjacent.
    int64_t left = params[i].size();
    while (left > 0) {
      const int64_t take = std::min(left, bucket_floats - open.floats);
      const FloatSpan piece{params[i].grad + (left - take), take};
      if (open.floats == 0) open.last_param = i;
      open.first_param = i;
      if (!open.spans.empty() &&
          piece.data + piece.size == open.spans.back().data) {
        open.spans.back() = {piece.data, piece.size + open.spans.back().size};
      } else {
        open.spans.push_back(piece);
      }
      open.floats += take;
      left -= take;
      if (open.floats == bucket_floats) close();
    }
  }
  close();
  return buckets;
}

OverlappedGradientSum::OverlappedGradientSum(
    std::vector<GradientBucket> buckets, size_t num_params,
    Collective* collective)
    : buckets_(std::move(buckets)),
      collective_(collective),
      final_(num_params, false) {}

void OverlappedGradientSum::Begin() {
  std::fill(final_.begin(), final_.end(), false);
  next_ = 0;
}

void OverlappedGradientSum::MarkFinal(size_t begin, size_t end) {
  end = std::min(end, final_.size());
  for (size_t i = begin; i < end; ++i) final_[i] = true;
  StartReady();
}

void OverlappedGradientSum::StartReady() {
  while (next_ < buckets_.size()) {
    const GradientBucket& b = buckets_[next_];
    for (size_t i = b.first_param; i <= b.last_param; ++i) {
      if (!final_[i]) return;
    }
    collective_->StartAllReduceSum(b.spans);
    ++next_;
  }
}

absl::Status OverlappedGradientSum::Finish(std::vector<FloatSpan> extra) {
  std::fill(final_.begin(), final_.end(), true);
  StartReady();
  if (!extra.empty()) collective_->StartAllReduceSum(std::move(extra));
  return collective_->WaitAll();
}

}  // namespace trainyard::engine
