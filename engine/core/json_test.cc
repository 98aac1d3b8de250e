#include "engine/core/json.h"

#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

TEST(JsonTest, RoundTripsNestedValues) {
  Json j = Json::MakeObject();
  j.Set("s", Json::String("a\"b\\c\n\x01"));
  j.Set("big", Json::Int(9'007'199'254'740'993));  // not exact as a double
  j.Set("list", Json::MakeArray({Json::Int(-1), Json::Bool(true), Json()}));
  const std::string text = j.Serialize();
  absl::StatusOr<Json> back = ParseJson(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Serialize(), text);
  EXPECT_EQ(*back->Find("big")->AsInt("big"), 9'007'199'254'740'993);
  EXPECT_EQ(*back->Find("s")->AsString("s"), "a\"b\\c\n\x01");
}

TEST(JsonTest, DecodesUnicodeEscapes) {
  absl::StatusOr<Json> j = ParseJson(R"("\u00e9\ud83d\ude00")");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(*j->AsString(""), "\xc3\xa9\xf0\x9f\x98\x80");
}

TEST(JsonTest, RejectsMalformedInput) {
  for (const char* bad :
       {"", "{", "[1,]", "{\"a\" 1}", "01x", "\"abc", "tru", "{\"a\":1} x",
        "\"\\ud800\"", "-", "1.", "[\"\x01\"]"}) {
    EXPECT_FALSE(ParseJson(bad).ok()) << bad;
  }
  EXPECT_FALSE(ParseJson(std::string(100, '[') + std::string(100, ']')).ok());
}

TEST(JsonTest, BoundsValuesNotOnlyDepth) {
  // 2 bytes of text per value: a few MB would take hundreds of MB parsed.
  std::string many = "[0";
  for (int i = 0; i < 100; ++i) many += ",0";
  many += "]";
  JsonLimits limits;
  limits.max_values = 101;
  absl::StatusOr<Json> j = ParseJson(many, limits);
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("more than 101 values"),
            std::string::npos)
      << j.status();
  limits.max_values = 102;  // the array and its 101 items
  EXPECT_TRUE(ParseJson(many, limits).ok());
  limits.max_depth = 3;
  EXPECT_TRUE(ParseJson("[[[[]]]]", limits).ok());
  EXPECT_FALSE(ParseJson("[[[[[]]]]]", limits).ok());
}

TEST(JsonTest, TypedAccessorsNameTheField) {
  Json j = *ParseJson(R"({"a": "x", "b": 1.5})");
  absl::StatusOr<int64_t> a = j.Find("a")->AsInt("a");
  EXPECT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("a: expected an integer"),
            std::string::npos);
  EXPECT_FALSE(j.Find("b")->AsInt("b").ok());
  EXPECT_EQ(j.Find("missing"), nullptr);
  EXPECT_FALSE(RequireField(j, "missing").ok());
}

}  // namespace
}  // namespace trainyard::engine
