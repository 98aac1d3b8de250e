#include "engine/data/shuffled_loader.h"

#include <algorithm>
#include <set>

#include "engine/data/mnist.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

// 10 one-pixel "images" whose label is their index mod 10 and pixel value
// their index, so a batch reveals which examples it holds.
std::unique_ptr<MnistExamples> Tiny(int n) {
  std::vector<uint8_t> pixels, labels;
  for (int i = 0; i < n; ++i) {
    pixels.push_back(static_cast<uint8_t>(i));
    labels.push_back(static_cast<uint8_t>(i % 10));
  }
  return std::make_unique<MnistExamples>(1, 1, pixels, labels);
}

int64_t IndexOf(float feature) {
  // Invert the normalization (p / 255 - mean) / std.
  return std::lround((feature * 0.3081f + 0.1307f) * 255.0f);
}

std::vector<int64_t> Draw(ShuffledLoader& loader, int batches) {
  std::vector<int64_t> out;
  for (int b = 0; b < batches; ++b) {
    absl::StatusOr<Batch> batch = loader.Next();
    EXPECT_TRUE(batch.ok());
    for (float f : batch->features) out.push_back(IndexOf(f));
  }
  return out;
}

TEST(ShuffledLoaderTest, EachEpochIsAPermutationAndEpochsDiffer) {
  auto data = Tiny(12);
  auto loader = *ShuffledLoader::Create(data.get(), {4, 99, 2});
  const std::vector<int64_t> order = Draw(*loader, 6);  // two epochs
  std::vector<int64_t> e0(order.begin(), order.begin() + 12);
  std::vector<int64_t> e1(order.begin() + 12, order.end());
  EXPECT_EQ(std::set<int64_t>(e0.begin(), e0.end()).size(), 12u);
  EXPECT_EQ(std::set<int64_t>(e1.begin(), e1.end()).size(), 12u);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, ShuffledLoader::EpochOrder(99, 0, 12));
}

TEST(ShuffledLoaderTest, SameSeedSameStreamAndBatchesCrossEpochs) {
  auto data = Tiny(10);
  auto a = *ShuffledLoader::Create(data.get(), {3, 5, 1});
  auto b = *ShuffledLoader::Create(data.get(), {3, 5, 3});
  EXPECT_EQ(Draw(*a, 7), Draw(*b, 7));
  // Batch 4 (examples 9..11) spans epochs 0 and 1; cursors say so.
  auto c = *ShuffledLoader::Create(data.get(), {3, 5, 1});
  DataCursor cursor;
  for (int i = 0; i < 4; ++i) cursor = c->Next()->next;
  EXPECT_EQ(cursor, (DataCursor{1, 2}));
}

TEST(ShuffledLoaderTest, SeekContinuesTheSameStream) {
  auto data = Tiny(10);
  auto straight = *ShuffledLoader::Create(data.get(), {4, 1, 2});
  const std::vector<int64_t> all = Draw(*straight, 8);
  auto first = *ShuffledLoader::Create(data.get(), {4, 1, 2});
  DataCursor cursor;
  for (int i = 0; i < 3; ++i) cursor = first->Next()->next;
  // A fresh loader (new process) sought to the saved cursor.
  auto resumed = *ShuffledLoader::Create(data.get(), {4, 1, 2});
  ASSERT_TRUE(resumed->Seek(cursor).ok());
  EXPECT_EQ(Draw(*resumed, 5),
            std::vector<int64_t>(all.begin() + 12, all.end()));
  // Seeking back to the start replays from the beginning.
  ASSERT_TRUE(resumed->Seek({}).ok());
  EXPECT_EQ(Draw(*resumed, 2),
            std::vector<int64_t>(all.begin(), all.begin() + 8));
}

TEST(ShuffledLoaderTest, DrawsWithReplacementFromTheSeedAndResumes) {
  auto data = Tiny(10);
  ShuffledLoaderOptions o{4, 7, 2, /*with_replacement=*/true};
  auto straight = *ShuffledLoader::Create(data.get(), o);
  const std::vector<int64_t> all = Draw(*straight, 6);
  for (size_t i = 0; i < all.size(); ++i) {
    ASSERT_EQ(all[i], ShuffledLoader::DrawnExample(7, i, 10));
  }
  // 24 draws from 10 examples: some repeat, all are in range.
  EXPECT_LT(std::set<int64_t>(all.begin(), all.end()).size(), all.size());
  auto first = *ShuffledLoader::Create(data.get(), o);
  DataCursor cursor;
  for (int i = 0; i < 2; ++i) cursor = first->Next()->next;
  EXPECT_EQ(cursor, (DataCursor{0, 8}));
  auto resumed = *ShuffledLoader::Create(data.get(), o);
  ASSERT_TRUE(resumed->Seek(cursor).ok());
  EXPECT_EQ(Draw(*resumed, 4),
            std::vector<int64_t>(all.begin() + 8, all.end()));
  EXPECT_TRUE(resumed->Seek({0, 1000}).ok());  // no epoch end
  EXPECT_FALSE(resumed->Seek({1, 0}).ok());
  o.seed = 8;
  auto other = *ShuffledLoader::Create(data.get(), o);
  EXPECT_NE(Draw(*other, 6), all);
}

TEST(ShuffledLoaderTest, RejectsBadInput) {
  auto data = Tiny(10);
  EXPECT_FALSE(ShuffledLoader::Create(data.get(), {0, 1, 1}).ok());
  EXPECT_FALSE(ShuffledLoader::Create(data.get(), {4, 1, 0}).ok());
  auto empty = Tiny(0);
  EXPECT_FALSE(ShuffledLoader::Create(empty.get(), {4, 1, 1}).ok());
  auto loader = *ShuffledLoader::Create(data.get(), {4, 1, 1});
  EXPECT_FALSE(loader->Seek({0, 11}).ok());
  EXPECT_FALSE(loader->Seek({-1, 0}).ok());
  EXPECT_TRUE(loader->Seek({3, 10}).ok());  // end of an epoch is fine
}

}  // namespace
}  // namespace trainyard::engine
