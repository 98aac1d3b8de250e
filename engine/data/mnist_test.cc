#include "engine/data/mnist.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

const std::string kDir = std::string(YARD_SOURCE_DIR) + "/examples/data/mnist/";
const std::string kImages = kDir + "t10k-images-idx3-ubyte.gz";
const std::string kLabels = kDir + "t10k-labels-idx1-ubyte.gz";

std::string WriteRaw(const std::string& name, const std::string& bytes) {
  const std::string dir = ::testing::TempDir() + "mnist_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
  return dir + "/" + name;
}

std::string Labels(std::vector<uint8_t> values) {
  std::string s = {0, 0, 8, 1, 0, 0, 0, static_cast<char>(values.size())};
  for (uint8_t v : values) s.push_back(static_cast<char>(v));
  return s;
}

TEST(MnistTest, LoadsTheTestSet) {
  absl::StatusOr<std::unique_ptr<MnistExamples>> m =
      MnistExamples::Load(kImages, kLabels);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->size(), 10000);
  EXPECT_EQ((*m)->feature_dim(), 784);
  // The t10k labels begin 7, 2, 1, 0, 4 (LeCun's page).
  const int first[] = {7, 2, 1, 0, 4};
  for (int i = 0; i < 5; ++i) EXPECT_EQ((*m)->label(i), first[i]);
  Batch b;
  const int64_t idx[] = {0, 9999};
  (*m)->Gather(idx, &b);
  EXPECT_EQ(b.size, 2);
  EXPECT_EQ(b.features.size(), 2u * 784);
  EXPECT_EQ(b.targets[0], 7);
  // Background pixels normalize to -mean/std.
  EXPECT_NEAR(b.features[0], -0.1307f / 0.3081f, 1e-6);
}

TEST(MnistTest, HoldoutSplitsOffTheLastExamples) {
  auto all = *MnistExamples::Load(kImages, kLabels);
  absl::StatusOr<MnistSplit> s = SplitHoldout(*all, 2000);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->train->size(), 8000);
  EXPECT_EQ(s->eval->size(), 2000);
  EXPECT_EQ(s->eval->label(0), all->label(8000));
  EXPECT_EQ(s->train->label(7999), all->label(7999));
  EXPECT_FALSE(SplitHoldout(*all, 10000).ok());
  EXPECT_FALSE(SplitHoldout(*all, -1).ok());
  EXPECT_EQ(SplitHoldout(*all, 0)->eval->size(), 0);
}

TEST(MnistTest, RejectsFilesThatDisagree) {
  // Labels for 3 examples against 10000 images.
  absl::StatusOr<std::unique_ptr<MnistExamples>> m =
      MnistExamples::Load(kImages, WriteRaw("three.idx", Labels({1, 2, 3})));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(m.status().message(), "holds 10000 images"))
      << m.status();
  // Labels passed as images: wrong rank.
  m = MnistExamples::Load(kLabels, kLabels);
  EXPECT_TRUE(absl::StrContains(m.status().message(), "[count, rows, cols]"))
      << m.status();
  // A label that is not a digit.
  const std::string image =
      std::string{0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1} + "x";
  m = MnistExamples::Load(WriteRaw("one.idx", image),
                          WriteRaw("bad_label.idx", Labels({12})));
  EXPECT_TRUE(absl::StrContains(m.status().message(), "not a digit"))
      << m.status();
}

}  // namespace
}  // namespace trainyard::engine
