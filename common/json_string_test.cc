#include "common/json_string.h"

#include "gtest/gtest.h"

namespace trainyard {
namespace {

std::string Quote(absl::string_view s) {
  std::string out;
  AppendJsonString(s, &out);
  return out;
}

TEST(JsonStringTest, EscapesQuotesBackslashesAndControls) {
  EXPECT_EQ(Quote("plain"), "\"plain\"");
  EXPECT_EQ(Quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(Quote("l1\nl2\r\t"), "\"l1\\nl2\\r\\t\"");
  EXPECT_EQ(Quote(absl::string_view("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
}

TEST(JsonStringTest, KeepsUtf8Bytes) {
  EXPECT_EQ(Quote("caf\xc3\xa9"), "\"caf\xc3\xa9\"");
}

}  // namespace
}  // namespace trainyard
