#include "common/byte_text.h"

#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace trainyard {
namespace {

TEST(FormatBytesTest, PicksABinaryUnit) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(-5), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1.0 KiB");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(int64_t{5} << 20), "5.0 MiB");
  EXPECT_EQ(FormatBytes(1'288'490'189), "1.2 GiB");
  EXPECT_EQ(FormatBytes(int64_t{3} << 40), "3.0 TiB");
  EXPECT_EQ(FormatBytes(std::numeric_limits<int64_t>::max()), "8.0 EiB");
  // Never "1024.0 KiB": a value that rounds up to the next unit moves there.
  EXPECT_EQ(FormatBytes((int64_t{1} << 20) - 1), "1.0 MiB");
  EXPECT_EQ(FormatBytes((int64_t{1} << 30) - 1), "1.0 GiB");
}

}  // namespace
}  // namespace trainyard
