#include "engine/data/tokenizer.h"

#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

TEST(TokenizerTest, BytesRoundTripAnything) {
  const Tokenizer t = Tokenizer::Bytes();
  EXPECT_EQ(t.vocab_size(), 256);
  const std::string text("a\xff\x00z", 4);
  absl::StatusOr<std::vector<int32_t>> ids = t.Encode(text);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{97, 255, 0, 122}));
  EXPECT_EQ(t.Decode(*ids), text);
}

TEST(TokenizerTest, CharsAreTheSortedCodePointsOfTheText) {
  absl::StatusOr<Tokenizer> t = Tokenizer::CharsFromText("hello é€\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->vocab_size(), 8);  // \n, ' ', e, h, l, o, é, €
  absl::StatusOr<std::vector<int32_t>> ids = t->Encode("hole\né€");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{3, 5, 4, 2, 0, 6, 7}));
  EXPECT_EQ(t->Decode(*ids), "hole\né€");
  EXPECT_EQ(t->Decode(std::vector<int32_t>{99}), "\xEF\xBF\xBD");
  EXPECT_EQ(t->Encode("x").status().message(),
            "character U+0078 at byte offset 0 is not in the vocabulary");
}

TEST(TokenizerTest, JsonRoundTrip) {
  const Tokenizer t = *Tokenizer::CharsFromText("abca");
  absl::StatusOr<Tokenizer> back = Tokenizer::FromJson(t.ToJson());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->ToJson().Serialize(), t.ToJson().Serialize());
  EXPECT_EQ(*back->Encode("cab"), *t.Encode("cab"));
  EXPECT_FALSE(Tokenizer::FromJson(Tokenizer::Bytes().ToJson())->is_char());
  for (const char* bad : {R"({"kind": "bpe"})", R"({"kind": "char"})",
                          R"({"kind": "char", "vocab": []})",
                          R"({"kind": "char", "vocab": [5, 4]})", R"({})"}) {
    EXPECT_FALSE(Tokenizer::FromJson(*ParseJson(bad)).ok()) << bad;
  }
}

TEST(TokenizerTest, RejectsInvalidUtf8) {
  for (const std::string& bad :
       {std::string("ab\xff"), std::string("\xc3"), std::string("\xc0\xaf"),
        std::string("\xed\xa0\x80")}) {
    EXPECT_FALSE(Tokenizer::CharsFromText(bad).ok());
  }
  EXPECT_EQ(Tokenizer::CharsFromText("ab\xff").status().message(),
            "not valid UTF-8 at byte offset 2 (use the byte tokenizer for "
            "binary text)");
  EXPECT_FALSE(Tokenizer::CharsFromText("").ok());
}

}  // namespace
}  // namespace trainyard::engine
