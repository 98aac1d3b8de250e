// CopyWeightsInto: a model takes another's weights exactly, ignores tensors
// that are not its parameters, and refuses weights that do not fit without
// touching its own.
#include "engine/core/model_weights.h"

#include <memory>
#include <vector>

#include "engine/core/mlp.h"
#include "engine/cpu/cpu_backend.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

std::vector<HostTensor> WeightsOf(const Model& model) {
  std::vector<HostTensor> out;
  for (const Parameter& p : model.parameters()) {
    out.push_back(
        {p.name, p.shape, std::vector<float>(p.value, p.value + p.size())});
  }
  return out;
}

class ModelWeightsTest : public ::testing::Test {
 protected:
  std::unique_ptr<MlpModel> Mlp(const MlpConfig& config, uint64_t seed) {
    std::unique_ptr<MlpModel> model =
        *MlpModel::Create(config, 4, backend_.get());
    Rng rng(seed);
    EXPECT_TRUE(model->InitializeParameters(rng).ok());
    return model;
  }

  std::unique_ptr<CpuBackend> backend_ = *CpuBackend::Create({});
};

TEST_F(ModelWeightsTest, CopiesEveryParameterAndIgnoresOtherTensors) {
  std::unique_ptr<MlpModel> trained = Mlp({6, {5}, 3}, 1);
  std::unique_ptr<MlpModel> fresh = Mlp({6, {5}, 3}, 2);
  std::vector<HostTensor> tensors = WeightsOf(*trained);
  // A checkpoint also holds the optimizer's moments.
  tensors.push_back({"adam.m.fc0.weight", {5, 6}, std::vector<float>(30, 7)});
  ASSERT_NE(WeightsOf(*fresh)[0].data, tensors[0].data);
  ASSERT_TRUE(
      CopyWeightsInto(tensors, "warm_start", fresh.get(), backend_.get()).ok());
  const std::vector<HostTensor> got = WeightsOf(*fresh);
  const std::vector<HostTensor> want = WeightsOf(*trained);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].data, want[i].data) << got[i].name;
  }
}

TEST_F(ModelWeightsTest, RefusesAShapeThatDiffersAndKeepsItsOwnWeights) {
  std::unique_ptr<MlpModel> wider = Mlp({6, {8}, 3}, 1);
  std::unique_ptr<MlpModel> model = Mlp({6, {5}, 3}, 2);
  const std::vector<HostTensor> before = WeightsOf(*model);
  std::vector<HostTensor> tensors = WeightsOf(*wider);
  // The last layers agree in name; fc0 differs first.
  absl::Status s =
      CopyWeightsInto(tensors, "warm_start", model.get(), backend_.get());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "warm_start: its fc0.weight has shape [8, 6], this mlp's is "
            "[5, 6]");
  const std::vector<HostTensor> after = WeightsOf(*model);
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].data, before[i].data) << after[i].name;
  }
}

TEST_F(ModelWeightsTest, RefusesWeightsWithAParameterMissing) {
  std::unique_ptr<MlpModel> deeper = Mlp({6, {5, 4}, 3}, 1);
  std::unique_ptr<MlpModel> model = Mlp({6, {5}, 3}, 2);
  std::vector<HostTensor> tensors = WeightsOf(*model);
  tensors.erase(tensors.begin() + 1);  // fc0.bias
  absl::Status s =
      CopyWeightsInto(tensors, "init_from", model.get(), backend_.get());
  EXPECT_EQ(s.message(),
            "init_from: has no weights for the mlp parameter fc0.bias");
  // A deeper model: its fc1 is the shallower one's output layer.
  s = CopyWeightsInto(WeightsOf(*model), "warm_start", deeper.get(),
                      backend_.get());
  EXPECT_EQ(s.message(),
            "warm_start: its fc1.weight has shape [3, 5], this mlp's is "
            "[4, 5]");
}

}  // namespace
}  // namespace trainyard::engine
