// DeviceArena's offsets: alignment, first fit, merging, exhaustion; needs
// no device.
#include "engine/cuda/device_arena.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace trainyard::engine::cuda {
namespace {

TEST(DeviceArenaTest, HandsOutAlignedDisjointBlocks) {
  DeviceArena arena(4096, 256);
  const int64_t a = *arena.Take(1);
  const int64_t b = *arena.Take(300);
  const int64_t c = *arena.Take(0);  // still a block of its own
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 256);
  EXPECT_EQ(c, 768);
  EXPECT_EQ(arena.used(), 1024);
  EXPECT_EQ(arena.free(), 3072);
}

TEST(DeviceArenaTest, ReusesAndMergesFreedBlocks) {
  DeviceArena arena(4 * 256, 256);
  const int64_t a = *arena.Take(256), b = *arena.Take(256);
  const int64_t c = *arena.Take(256), d = *arena.Take(256);
  EXPECT_FALSE(arena.Take(1).ok());
  arena.Give(b);
  arena.Give(c);  // b and c merge into one 512-byte block
  EXPECT_EQ(arena.largest_free_block(), 512);
  EXPECT_EQ(*arena.Take(512), b);
  arena.Give(a);
  arena.Give(d);
  arena.Give(b);  // everything merges back
  EXPECT_EQ(arena.largest_free_block(), 4 * 256);
  EXPECT_EQ(arena.used(), 0);
  (void)c;
}

TEST(DeviceArenaTest, SameCallsSameOffsets) {
  auto run = [] {
    DeviceArena arena(1 << 20, 256);
    std::vector<int64_t> offsets;
    for (int i = 0; i < 20; ++i) offsets.push_back(*arena.Take(i * 1000));
    for (int i = 0; i < 20; i += 3) arena.Give(offsets[i]);
    for (int i = 0; i < 10; ++i) offsets.push_back(*arena.Take(i * 333));
    return offsets;
  };
  EXPECT_EQ(run(), run());
}

TEST(DeviceArenaTest, ExhaustionNamesTheBytes) {
  DeviceArena arena(1000, 256);  // capacity rounds down to 768
  EXPECT_EQ(arena.capacity(), 768);
  ASSERT_TRUE(arena.Take(500).ok());
  const absl::StatusOr<int64_t> big = arena.Take(300);
  ASSERT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(big.status().message(), "300 bytes"))
      << big.status();
  EXPECT_TRUE(absl::StrContains(big.status().message(), "256 of 768"))
      << big.status();
  EXPECT_EQ(arena.Take(int64_t{1} << 62).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(arena.Take(-1).status().code(), absl::StatusCode::kInvalidArgument);
  arena.Give(12345);  // unknown offsets are ignored
  EXPECT_EQ(arena.used(), 512);
}

}  // namespace
}  // namespace trainyard::engine::cuda
