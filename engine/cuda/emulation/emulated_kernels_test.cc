// The embedding, bias-broadcast and bias-gradient kernels run on the CUDA
// emulation (the classifier and LayerNorm have emulated_classifier_test.cc
// and emulated_layernorm_test.cc), called through their launchers, against
// plain host loops (engine/cpu's semantics) in fp32 and bf16: shapes that
// exercise their strided loops, multi-round and chunked paths (a token at
// more than 1024 positions, more than 1024 channels, thousands of rows, a
// scratch too small for all columns at once), the gathers' 16-byte packs
// and their element-by-element fallback, bitwise repeatability (the
// emulation changes its thread order from launch to launch), writes
// outside the outputs (guard zones) and bad arguments.
//
// Tolerances are derived from the kernels' operation counts with
// gamma_n = n u / (1 - n u), u = 2^-24 (guarded_buffers.h): a sum whose
// terms each pass through at most n roundings is within gamma_n of the sum
// of the terms' magnitudes (column sums: ColumnSumDepth). bf16 outputs add
// 2^-8 |want|, one rounding to bf16. Inputs are generated in fp32 and, for
// bf16, rounded first, so both sides read the same values.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/bf16.h"
#include "engine/cpu/test_inputs.h"
#include "engine/cuda/classifier_kernels.h"
#include "engine/cuda/embedding_kernels.h"
#include "engine/cuda/emulation/guarded_buffers.h"
#include "engine/cuda/layernorm_kernels.h"
#include "engine/cuda/linear_kernels.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

using emulation_test::Activations;
using emulation_test::ColumnSumDepth;
using emulation_test::ExpectWithin;
using emulation_test::Gamma;
using emulation_test::Guarded;
using emulation_test::Inputs;
using emulation_test::SameBits;

class EmulatedKernelsTest : public ::testing::TestWithParam<bool> {
 protected:
  bool bf16() const { return GetParam(); }
};

// ------------------------------------------------------------- embedding

// (channels, offset of out): whole 16-byte packs; rows not whole packs;
// out misaligned against the tables. The last two go element by element.
constexpr std::pair<int64_t, int64_t> kGatherShapes[] = {
    {64, 0}, {65, 0}, {64, 3}};

// The stored value of x: x itself or x rounded to bf16.
float Stored(float x, bool bf16) { return bf16 ? RoundToBf16(x) : x; }

TEST_P(EmulatedKernelsTest, EmbeddingForwardAddsTheRowsBitwise) {
  const int64_t batch = 3, seq = 37, vocab = 50;
  std::vector<int32_t> tokens(batch * seq);
  for (size_t r = 0; r < tokens.size(); ++r) tokens[r] = (r * 17 + 3) % vocab;
  Guarded<int32_t> tok(tokens);
  for (const auto& [channels, offset] : kGatherShapes) {
    const std::vector<float> wte = Inputs(vocab * channels, 24, bf16());
    const std::vector<float> wpe = Inputs(seq * channels, 25, bf16());
    Activations te(wte, bf16()), pe(wpe, bf16());
    const int64_t n = batch * seq * channels;
    Activations out(std::vector<float>(n, 7.f), bf16(), offset);
    ASSERT_EQ(
        cuda::LaunchEmbeddingForward(out.get(), tok.get(), te.get(), pe.get(),
                                     batch, seq, channels, bf16(), nullptr),
        cudaSuccess);
    EXPECT_TRUE(out.GuardsIntact());
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = i / channels, c = i % channels;
      want[i] = Stored(
          wte[tokens[row] * channels + c] + wpe[(row % seq) * channels + c],
          bf16());
    }
    EXPECT_TRUE(SameBits(out.values(), want))
        << channels << " channels, out at " << offset;
  }
}

// The token table's owners find their positions by sorting the keys
// (sort_keys given) or by scanning the tokens (none): both must add in
// ascending position order, bit for bit.
void CheckEmbeddingBackward(bool bf16, int64_t batch, bool sorted) {
  // seq 520, token 7 at 7 of every 10 positions (more than one owner's
  // 1024-position list), 1100 channels (two passes of a block's threads).
  const int64_t seq = 520, channels = 1100, vocab = 64;
  const int64_t rows = batch * seq;
  std::vector<int32_t> tokens(rows);
  for (int64_t r = 0; r < rows; ++r) {
    tokens[r] =
        r % 10 < 7 ? 7 : static_cast<int32_t>((r * 2654435761u) % vocab);
  }
  ASSERT_GT(std::count(tokens.begin(), tokens.end(), 7), 1024);
  const std::vector<float> dout = Inputs(rows * channels, 21, bf16);
  std::vector<float> wte = Random(vocab * channels, 22);
  std::vector<float> wpe = Random(seq * channels, 23);
  Guarded<float> dwte(wte), dwpe(wpe);
  Activations d(dout, bf16);
  Guarded<int32_t> tok(tokens);
  // Keys for the rows rounded up to a power of two, and not one more.
  int64_t n = 1;
  while (n < rows) n *= 2;
  Guarded<uint64_t> keys(std::vector<uint64_t>(n, 0));
  ASSERT_EQ(cuda::LaunchEmbeddingBackward(
                dwte.get(), dwpe.get(), d.get(), tok.get(), batch, seq,
                channels, bf16, sorted ? keys.get() : nullptr, n, nullptr),
            cudaSuccess);
  EXPECT_TRUE(dwte.GuardsIntact());
  EXPECT_TRUE(dwpe.GuardsIntact());
  EXPECT_TRUE(keys.GuardsIntact());
  for (int64_t r = 0; r < rows; ++r) {  // fp32 adds, ascending positions
    for (int64_t c = 0; c < channels; ++c) {
      wte[tokens[r] * channels + c] += dout[r * channels + c];
      wpe[(r % seq) * channels + c] += dout[r * channels + c];
    }
  }
  EXPECT_TRUE(SameBits(dwte.values(), wte));
  EXPECT_TRUE(SameBits(dwpe.values(), wpe));
}

// 2600 rows: 4096 keys, so the sort runs a stage across shared-memory
// tiles (a global pass) as well as within them.
TEST_P(EmulatedKernelsTest, EmbeddingBackwardAddsInPositionOrderBitwise) {
  CheckEmbeddingBackward(bf16(), /*batch=*/5, /*sorted=*/true);
}

TEST_P(EmulatedKernelsTest,
       EmbeddingBackwardWithoutSortKeysScansAndAddsInOrder) {
  CheckEmbeddingBackward(bf16(), /*batch=*/3, /*sorted=*/false);
}

// ----------------------------------------------------------- column sums

TEST_P(EmulatedKernelsTest, BroadcastRowsCopiesTheBiasBitwise) {
  const int64_t rows = 45;
  for (const auto& [cols, offset] : kGatherShapes) {
    const std::vector<float> bias = Inputs(cols, 33, bf16());
    Activations b(bias, bf16());
    Activations out(std::vector<float>(rows * cols, 7.f), bf16(), offset);
    ASSERT_EQ(cuda::LaunchBroadcastRows(out.get(), b.get(), rows, cols, bf16(),
                                        nullptr),
              cudaSuccess);
    EXPECT_TRUE(out.GuardsIntact());
    std::vector<float> want(rows * cols);
    for (int64_t i = 0; i < rows * cols; ++i) want[i] = bias[i % cols];
    EXPECT_TRUE(SameBits(out.values(), want))
        << cols << " columns, out at " << offset;
  }
}

constexpr int64_t kSumRows = 2500;

// Row shapes: whole 16-byte packs (200 columns, aligned: a pack a thread),
// and an element a thread for rows that are not (203 columns; dout 3
// elements off a 16-byte boundary). Scratch sizes (floats per output):
// every column at once in 10 row ranges, and 96 columns at a time (chunks
// of 96, 96 and 8 or 11 columns).
TEST_P(EmulatedKernelsTest, BiasGradSumsRowsInChunksAndRepeatsBitwise) {
  for (const auto& [cols, offset] :
       {std::pair<int64_t, int64_t>{200, 0}, {203, 0}, {200, 3}}) {
    SCOPED_TRACE(std::to_string(cols) + " columns at " +
                 std::to_string(offset));
    const std::vector<float> dout = Inputs(kSumRows * cols, 31, bf16());
    const std::vector<float> init = Random(cols, 32);
    std::vector<double> want(cols), tol(cols);
    for (int64_t c = 0; c < cols; ++c) {
      double sum = init[c], mag = std::abs(init[c]);
      for (int64_t r = 0; r < kSumRows; ++r) {
        sum += dout[r * cols + c];
        mag += std::abs(dout[r * cols + c]);
      }
      want[c] = sum;
      tol[c] = Gamma(ColumnSumDepth(kSumRows)) * mag;
    }
    Activations d(dout, bf16(), offset);
    for (const int64_t scratch_floats : {32 * cols, int64_t{96}}) {
      std::vector<float> first;
      for (int run = 0; run < 2; ++run) {
        Guarded<float> dbias(init);
        Guarded<float> scratch(std::vector<float>(scratch_floats, 0.f));
        ASSERT_EQ(cuda::LaunchBiasGrad(dbias.get(), d.get(), kSumRows, cols,
                                       scratch.get(), scratch_floats, bf16(),
                                       nullptr),
                  cudaSuccess);
        EXPECT_TRUE(dbias.GuardsIntact());
        EXPECT_TRUE(scratch.GuardsIntact());
        if (run == 0) {
          first = dbias.values();
          ExpectWithin(first, want, tol, "dbias");
        } else {
          EXPECT_TRUE(SameBits(dbias.values(), first))
              << "scratch " << scratch_floats;
        }
      }
    }
    Guarded<float> dbias(init), scratch(std::vector<float>(31, 0.f));
    EXPECT_EQ(cuda::LaunchBiasGrad(dbias.get(), d.get(), kSumRows, cols,
                                   scratch.get(), 31, bf16(), nullptr),
              cudaErrorInvalidValue);
    EXPECT_TRUE(SameBits(dbias.values(), init)) << "wrote despite the error";
  }
}

// No rows or no columns: nothing launched, nothing written.
TEST_P(EmulatedKernelsTest, EmptyShapesLaunchNothing) {
  EXPECT_EQ(
      cuda::LaunchSoftmaxCrossEntropyForward(nullptr, nullptr, nullptr, nullptr,
                                             nullptr, 0, 10, bf16(), nullptr),
      cudaSuccess);
  EXPECT_EQ(cuda::LaunchEmbeddingBackward(nullptr, nullptr, nullptr, nullptr, 0,
                                          4, 8, bf16(), nullptr, 0, nullptr),
            cudaSuccess);
  EXPECT_EQ(
      cuda::LaunchBiasGrad(nullptr, nullptr, 5, 0, nullptr, 0, bf16(), nullptr),
      cudaSuccess);
  EXPECT_EQ(cuda::LaunchLayerNormBackward(
                nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                nullptr, nullptr, 0, 8, nullptr, 0, bf16(), nullptr),
            cudaSuccess);
}

INSTANTIATE_TEST_SUITE_P(Types, EmulatedKernelsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Bf16" : "Fp32";
                         });

}  // namespace
}  // namespace trainyard::engine
