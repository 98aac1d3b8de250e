// Test support for training loops (header-only, tests only): a sink that
// records every event and can ask the trainer to stop once a step is
// reported, a bitwise comparison of two training states, slices of the
// repository's MNIST copy, a GPT batch with a learnable pattern and the
// measured memory peak of a step. Used by the
// CPU trainer tests, the data-parallel tests and the CUDA training tests.
//
// Thread-safety: a RecordingSink serves one trainer; `stop` (or the flag
// stop_signal points to) may be read from any thread.
#ifndef TRAINYARD_ENGINE_CORE_TRAINER_TEST_SUPPORT_H_
#define TRAINYARD_ENGINE_CORE_TRAINER_TEST_SUPPORT_H_

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "engine/core/adamw.h"
#include "engine/core/batch.h"
#include "engine/core/gpt.h"
#include "engine/core/model.h"
#include "engine/core/rng.h"
#include "engine/core/tensor.h"
#include "engine/core/trainer_events.h"
#include "engine/data/mnist.h"
#include "gtest/gtest.h"

namespace trainyard::engine {

class RecordingSink : public TrainerEventSink {
 public:
  void Emit(const TrainerEvent& e) override {
    events.push_back(e);
    if (const auto* p = std::get_if<TrainProgressEvent>(&e);
        p != nullptr && stop_after >= 0 && p->step >= stop_after) {
      (stop_signal != nullptr ? *stop_signal : stop).store(true);
    }
  }

  // The recorded events of one kind, in order.
  template <class T>
  std::vector<T> Of() const {
    std::vector<T> out;
    for (const TrainerEvent& e : events) {
      if (const T* t = std::get_if<T>(&e)) out.push_back(*t);
    }
    return out;
  }

  std::vector<TrainerEvent> events;
  // Once a progress report for this step (or a later one) arrives, raise
  // *stop_signal, or `stop` when that is null. -1: never.
  int64_t stop_after = -1;
  std::atomic<bool> stop{false};
  std::atomic<bool>* stop_signal = nullptr;
};

// Every tensor of `a` equals its namesake in `b` bit for bit.
inline void ExpectBitwiseEqual(const std::vector<HostTensor>& a,
                               const std::vector<HostTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    ASSERT_EQ(a[i].data.size(), b[i].data.size());
    EXPECT_EQ(0, std::memcmp(a[i].data.data(), b[i].data.data(),
                             a[i].data.size() * sizeof(float)))
        << a[i].name << " differs";
  }
}

// Two disjoint slices of the MNIST test set in `dir` (the repository's copy
// is examples/data/mnist/): examples [0, train) to train on and the `eval`
// after them to evaluate on.
struct MnistSlices {
  std::unique_ptr<MnistExamples> train, eval;
};
inline MnistSlices LoadMnistSlices(const std::string& dir, int64_t train,
                                   int64_t eval) {
  auto all = MnistExamples::Load(dir + "/t10k-images-idx3-ubyte.gz",
                                 dir + "/t10k-labels-idx1-ubyte.gz");
  EXPECT_TRUE(all.ok()) << all.status();
  if (!all.ok()) return {};
  return {(*all)->Slice(0, train), (*all)->Slice(train, train + eval)};
}

// `size` sequences of a learnable GPT pattern: tokens drawn from [0, 8),
// each target the token plus one (mod the vocabulary).
inline Batch NextTokenBatch(const GptConfig& c, int64_t size, uint64_t seed) {
  Rng rng(seed);
  Batch b;
  b.size = size;
  b.seq_len = c.seq_len;
  for (int64_t i = 0; i < size * c.seq_len; ++i) {
    const int32_t t = static_cast<int32_t>(rng.Uniform(0.f, 1.f) * 8);
    b.tokens.push_back(t);
    b.targets.push_back((t + 1) % c.vocab_size);
  }
  return b;
}

// Bytes the backend allocated at its peak over one training step of
// `model` (fresh weights, forward, backward, an AdamW step): what the memory
// estimate must match.
inline int64_t MeasuredPeak(Model& model, Backend& backend,
                            const Batch& batch) {
  auto opt = *AdamW::Create(AdamWConfig{}, &model.parameters(), &backend);
  Rng rng(1);
  EXPECT_TRUE(model.InitializeParameters(rng).ok());
  model.ZeroGradients();
  EXPECT_TRUE(model.Forward(batch).ok());
  model.Backward(0.1f);
  EXPECT_TRUE(opt->Step(1e-3).ok());
  return backend.peak_allocated_bytes();
}

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_TRAINER_TEST_SUPPORT_H_
