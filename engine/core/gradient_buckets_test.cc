// Gradient buckets: the plan's boundaries (one bucket, buckets smaller than
// a tensor, exact multiples, non-adjacent gradients), the start order, and
// with the real models that every bucket is started only once its
// gradients are final, and before backward ends.
#include "engine/core/gradient_buckets.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/gpt.h"
#include "engine/core/mlp.h"
#include "engine/core/rng.h"
#include "engine/cpu/cpu_backend.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

// A collective of one rank that records what was started, with the values
// the spans held at that moment.
class RecordingCollective : public Collective {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  absl::Status AllReduceSum(std::span<const FloatSpan>) override {
    return absl::OkStatus();
  }
  void StartAllReduceSum(std::vector<FloatSpan> tensors) override {
    std::vector<float> values;
    for (const FloatSpan& t : tensors) {
      values.insert(values.end(), t.data, t.data + t.size);
    }
    started.push_back(tensors);
    values_at_start.push_back(std::move(values));
  }
  absl::Status WaitAll() override {
    ++waits;
    return absl::OkStatus();
  }

  std::vector<std::vector<FloatSpan>> started;
  std::vector<std::vector<float>> values_at_start;
  int waits = 0;
};

// Parameters over one gradient buffer, sizes as given.
struct FakeParams {
  explicit FakeParams(const std::vector<int64_t>& sizes) {
    int64_t total = 0;
    for (int64_t s : sizes) total += s;
    grads.resize(total);
    int64_t offset = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      params.push_back(
          {absl::StrCat("p", i), {sizes[i]}, nullptr, grads.data() + offset});
      offset += sizes[i];
    }
  }
  std::vector<float> grads;
  std::vector<Parameter> params;
};

// Every gradient float appears in exactly one bucket.
void ExpectCoversAllOnce(const std::vector<GradientBucket>& buckets,
                         const std::vector<float>& grads) {
  std::vector<int> seen(grads.size(), 0);
  for (const GradientBucket& b : buckets) {
    int64_t floats = 0;
    for (const FloatSpan& s : b.spans) {
      for (int64_t i = 0; i < s.size; ++i) ++seen[s.data + i - grads.data()];
      floats += s.size;
    }
    EXPECT_EQ(floats, b.floats);
  }
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << i;
}

TEST(PlanGradientBucketsTest, ZeroOrHugeBucketsMakeOneSpanOfEverything) {
  FakeParams f({10, 3, 7});
  for (int64_t floats : {int64_t{0}, int64_t{20}, int64_t{1} << 40}) {
    const auto buckets = PlanGradientBuckets(f.params, floats);
    ASSERT_EQ(buckets.size(), 1u) << floats;
    ASSERT_EQ(buckets[0].spans.size(), 1u);
    EXPECT_EQ(buckets[0].spans[0].data, f.grads.data());
    EXPECT_EQ(buckets[0].spans[0].size, 20);
    EXPECT_EQ(buckets[0].first_param, 0u);
    EXPECT_EQ(buckets[0].last_param, 2u);
  }
}

TEST(PlanGradientBucketsTest, BucketsSmallerThanATensorSplitItFromTheEnd) {
  FakeParams f({10, 3, 7});
  const auto buckets = PlanGradientBuckets(f.params, 4);
  ASSERT_EQ(buckets.size(), 5u);  // 20 floats: 4 x 4 and 4
  ExpectCoversAllOnce(buckets, f.grads);
  // From the end of the buffer backwards, one adjacent span each.
  for (size_t k = 0; k < buckets.size(); ++k) {
    ASSERT_EQ(buckets[k].spans.size(), 1u) << k;
    EXPECT_EQ(buckets[k].spans[0].data, f.grads.data() + 16 - 4 * k) << k;
    EXPECT_EQ(buckets[k].floats, 4);
  }
  // p2 is [13, 20): bucket 0 is p2's tail, bucket 1 crosses into p1.
  EXPECT_EQ(buckets[0].first_param, 2u);
  EXPECT_EQ(buckets[0].last_param, 2u);
  EXPECT_EQ(buckets[1].first_param, 1u);
  EXPECT_EQ(buckets[1].last_param, 2u);
  EXPECT_EQ(buckets[4].first_param, 0u);
  EXPECT_EQ(buckets[4].last_param, 0u);
}

TEST(PlanGradientBucketsTest, ExactMultiplesLeaveNoEmptyBucket) {
  FakeParams f({6, 6, 6});
  for (int64_t floats : {1, 2, 3, 6, 9, 18}) {
    const auto buckets = PlanGradientBuckets(f.params, floats);
    ASSERT_EQ(static_cast<int64_t>(buckets.size()), 18 / floats) << floats;
    for (const GradientBucket& b : buckets) EXPECT_EQ(b.floats, floats);
    ExpectCoversAllOnce(buckets, f.grads);
  }
  // A bucket of exactly one tensor touches that tensor alone.
  const auto per_tensor = PlanGradientBuckets(f.params, 6);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(per_tensor[k].first_param, 2 - k);
    EXPECT_EQ(per_tensor[k].last_param, 2 - k);
  }
}

TEST(PlanGradientBucketsTest, GradientsApartInMemoryStaySeparateSpans) {
  std::vector<float> a(5), b(5);
  std::vector<Parameter> params = {{"a", {5}, nullptr, a.data()},
                                   {"b", {5}, nullptr, b.data()}};
  const auto buckets = PlanGradientBuckets(params, 0);
  ASSERT_EQ(buckets.size(), 1u);
  ASSERT_EQ(buckets[0].spans.size(), 2u);
  EXPECT_EQ(buckets[0].spans[0].data, b.data());  // the last parameter first
  EXPECT_EQ(buckets[0].spans[1].data, a.data());
}

TEST(OverlappedGradientSumTest, StartsInPlanOrderOnlyWhenComplete) {
  FakeParams f({4, 4, 4, 4});
  RecordingCollective c;
  OverlappedGradientSum sum(PlanGradientBuckets(f.params, 4), 4, &c);
  sum.Begin();
  sum.MarkFinal(1, 2);  // p1 final, but bucket 0 (p3) is not: nothing starts
  EXPECT_EQ(c.started.size(), 0u);
  sum.MarkFinal(3, 4);  // p3 starts; p2 is next and not final
  EXPECT_EQ(c.started.size(), 1u);
  sum.MarkFinal(2, 3);  // p2, then p1 (already final)
  EXPECT_EQ(c.started.size(), 3u);
  EXPECT_EQ(sum.started(), 3u);
  float figures[2] = {1, 2};
  ASSERT_TRUE(sum.Finish({{figures, 2}}).ok());
  ASSERT_EQ(c.started.size(), 5u);  // p0, then the figures
  EXPECT_EQ(c.started[3][0].data, f.grads.data());
  EXPECT_EQ(c.started[4][0].data, figures);
  EXPECT_EQ(c.waits, 1);
  // A new backward starts over.
  sum.Begin();
  EXPECT_EQ(sum.started(), 0u);
  sum.MarkFinal(0, 99);  // clamped to the parameters there are
  EXPECT_EQ(c.started.size(), 9u);
}

// Runs one backward of `model` through the buckets and checks that each
// bucket held its final values when it started, and that some started
// before backward ended.
// `embeddings_last`: the first parameters are final only when backward
// ends (the GPT's embeddings), so some bucket must wait for Finish.
void ExpectBucketsStartFinal(Model& model, const Batch& batch,
                             int64_t bucket_floats, bool embeddings_last) {
  RecordingCollective c;
  OverlappedGradientSum sum(
      PlanGradientBuckets(model.parameters(), bucket_floats),
      model.parameters().size(), &c);
  model.ZeroGradients();
  ASSERT_TRUE(model.Forward(batch).ok());
  sum.Begin();
  model.set_gradients_final_callback(
      [&](size_t begin, size_t end) { sum.MarkFinal(begin, end); });
  model.Backward(0.5f);
  model.set_gradients_final_callback(nullptr);
  const size_t before_end = c.started.size();
  ASSERT_TRUE(sum.Finish({}).ok());
  EXPECT_GE(before_end, 1u) << "no overlap: buckets all started after "
                               "backward";
  if (embeddings_last) {
    EXPECT_LT(before_end, sum.buckets().size());
  }
  ASSERT_EQ(c.started.size(), sum.buckets().size());
  for (size_t k = 0; k < c.started.size(); ++k) {
    size_t at = 0;
    for (const FloatSpan& s : c.started[k]) {
      for (int64_t i = 0; i < s.size; ++i, ++at) {
        ASSERT_EQ(c.values_at_start[k][at], s.data[i])
            << "bucket " << k << " started before its gradients were final";
      }
    }
  }
}

std::unique_ptr<CpuBackend> Cpu() {
  CpuBackendOptions o;
  o.threads = 2;
  return *CpuBackend::Create(o);
}

TEST(OverlappedGradientSumTest, MlpBucketsStartFinalAndBeforeBackwardEnds) {
  auto backend = Cpu();
  auto model = *MlpModel::Create({12, {16, 8}, 4}, 3, backend.get());
  Rng rng(5);
  ASSERT_TRUE(model->InitializeParameters(rng).ok());
  Batch batch;
  batch.size = 3;
  batch.feature_dim = 12;
  for (int i = 0; i < 36; ++i) batch.features.push_back(rng.Normal(0, 1));
  batch.targets = {0, 3, 1};
  for (int64_t floats : {7, 40, 136}) {
    SCOPED_TRACE(floats);
    ExpectBucketsStartFinal(*model, batch, floats, false);
  }
}

TEST(OverlappedGradientSumTest, GptBucketsStartFinalAndBeforeBackwardEnds) {
  auto backend = Cpu();
  const GptConfig config{3, 2, 16, 8, 32};
  auto model = *GptModel::Create(config, 2, backend.get());
  Rng rng(7);
  ASSERT_TRUE(model->InitializeParameters(rng).ok());
  Batch batch;
  batch.size = 2;
  batch.seq_len = 8;
  for (int i = 0; i < 16; ++i) {
    batch.tokens.push_back(static_cast<int32_t>(rng.Uniform(0, 31.99f)));
    batch.targets.push_back(static_cast<int32_t>(rng.Uniform(0, 31.99f)));
  }
  // One block is 12 * 16^2 + 13 * 16 = 3280 floats.
  for (int64_t floats : {100, 3280, 5000}) {
    SCOPED_TRACE(floats);
    ExpectBucketsStartFinal(*model, batch, floats, true);
  }
}

}  // namespace
}  // namespace trainyard::engine
