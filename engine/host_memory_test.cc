#include "engine/host_memory.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

TEST(HostMemoryTest, ReadsMemAvailable) {
  EXPECT_EQ(MemAvailableBytes("MemTotal:       32000000 kB\n"
                              "MemFree:         1000 kB\n"
                              "MemAvailable:    2048 kB\n"),
            2048 * 1024);
  EXPECT_EQ(MemAvailableBytes("MemTotal: 1 kB\n"), std::nullopt);
  EXPECT_EQ(MemAvailableBytes("MemAvailable: lots\n"), std::nullopt);
}

TEST(HostMemoryTest, CgroupRoomIsTheLimitLessTheUsage) {
  EXPECT_EQ(CgroupRoomBytes("1073741824\n", "73741824\n"), 1000000000);
  EXPECT_EQ(CgroupRoomBytes("100\n", "200\n"), 0);
  EXPECT_EQ(CgroupRoomBytes("max\n", "200\n"), std::nullopt);
  // cgroup v1's "no limit": 2^63 rounded down to a page.
  EXPECT_EQ(CgroupRoomBytes("9223372036854771712\n", "5\n"), std::nullopt);
  EXPECT_EQ(CgroupRoomBytes("", ""), std::nullopt);
}

TEST(HostMemoryTest, TheOverrideWinsAndMustBeABytesCount) {
  setenv("YARD_HOST_MEMORY_BYTES", "12345", 1);
  absl::StatusOr<HostMemory> m = AvailableHostMemory();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->available, 12345);
  EXPECT_EQ(m->source, "YARD_HOST_MEMORY_BYTES");
  setenv("YARD_HOST_MEMORY_BYTES", "12G", 1);
  EXPECT_EQ(AvailableHostMemory().status().message(),
            "YARD_HOST_MEMORY_BYTES must be a positive byte count, got '12G'");
  unsetenv("YARD_HOST_MEMORY_BYTES");
  // This machine has a /proc/meminfo.
  m = AvailableHostMemory();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_GT(m->available, 0);
}

}  // namespace
}  // namespace trainyard::engine
