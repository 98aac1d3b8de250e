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

TEST(Utf8Test, ChecksStrictly) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_TRUE(IsValidUtf8("\xf4\x8f\xbf\xbf"));   // U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xe0\x80\xaf"));      // overlong, 3 bytes
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(IsValidUtf8("\x80"));              // stray continuation
  EXPECT_FALSE(IsValidUtf8("caf\xc3"));           // cut short
  EXPECT_FALSE(IsValidUtf8("\xc3("));             // not a continuation
  EXPECT_FALSE(IsValidUtf8("\xff"));
}

TEST(Utf8Test, SequenceLengths) {
  const std::string s = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\x80";
  EXPECT_EQ(Utf8SequenceAt(s, 0), 1u);
  EXPECT_EQ(Utf8SequenceAt(s, 1), 2u);
  EXPECT_EQ(Utf8SequenceAt(s, 3), 3u);
  EXPECT_EQ(Utf8SequenceAt(s, 6), 4u);
  EXPECT_EQ(Utf8SequenceAt(s, 10), 0u);
}

TEST(Utf8Test, RepairsEachBadByte) {
  const std::string fffd = "\xef\xbf\xbd";
  EXPECT_EQ(ToValidUtf8("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(ToValidUtf8("a\xff"
                        "b"),
            "a" + fffd + "b");
  EXPECT_EQ(ToValidUtf8("caf\xc3"), "caf" + fffd);
  EXPECT_EQ(ToValidUtf8("\xc0\xaf"), fffd + fffd);
  EXPECT_TRUE(IsValidUtf8(ToValidUtf8("\xed\xa0\x80\xf4\x90\x80\x80x")));
}

}  // namespace
}  // namespace trainyard
