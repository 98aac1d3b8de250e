#include "common/utf8.h"

#include "gtest/gtest.h"

namespace trainyard {
namespace {

std::string Encode(uint32_t cp) {
  std::string out;
  AppendUtf8(cp, &out);
  return out;
}

TEST(Utf8Test, EncodesEachLength) {
  EXPECT_EQ(Encode('A'), "A");
  EXPECT_EQ(Encode(0xE9), "\xc3\xa9");          // é
  EXPECT_EQ(Encode(0x20AC), "\xe2\x82\xac");    // €
  EXPECT_EQ(Encode(0x1F600), "\xf0\x9f\x98\x80");
  EXPECT_EQ(Encode(0xFFFD), "\xef\xbf\xbd");    // replacement character
}

}  // namespace
}  // namespace trainyard
