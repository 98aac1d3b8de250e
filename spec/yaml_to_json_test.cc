// Tests for the YAML -> JSON conversion, including hostile documents.
#include "spec/yaml_to_json.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::spec {
namespace {

using ::testing::HasSubstr;

std::string Json(const std::string& yaml) {
  absl::StatusOr<std::string> json = YamlToJson(yaml);
  EXPECT_TRUE(json.ok()) << json.status();
  return json.ok() ? *json : "";
}

std::string Error(const std::string& yaml, const YamlLimits& limits = {}) {
  absl::StatusOr<std::string> json = YamlToJson(yaml, limits);
  EXPECT_FALSE(json.ok()) << *json;
  if (json.ok()) return "";
  EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(json.status().message());
}

TEST(YamlToJsonTest, PlainScalarsBecomeJsonValues) {
  EXPECT_EQ(Json("a: 5\nb: -2.5\nc: true\nd: ~\ne: text\nf: False"),
            R"({"a":5,"b":-2.5,"c":true,"d":null,"e":"text","f":false})");
}

TEST(YamlToJsonTest, YamlNumberFormsAreNormalized) {
  EXPECT_EQ(Json("a: .5\nb: +3\nc: 1.\nd: 1e-3\ne: 007.5\nf: -0"),
            R"({"a":0.5,"b":3,"c":1,"d":1e-3,"e":7.5,"f":-0})");
}

TEST(YamlToJsonTest, NonNumbersStayStrings) {
  EXPECT_EQ(
      Json("a: 0755\nb: 1.2.3\nc: 1e\nd: '-'\ne: yes\nf: 0x10"),
      R"({"a":"0755","b":"1.2.3","c":"1e","d":"-","e":"yes","f":"0x10"})");
}

TEST(YamlToJsonTest, QuotedScalarsStayStrings) {
  EXPECT_EQ(Json("a: \"5\"\nb: 'true'\nc: \"null\""),
            R"({"a":"5","b":"true","c":"null"})");
}

TEST(YamlToJsonTest, InfinityAndNanUseProtobufSpelling) {
  EXPECT_EQ(Json("a: .inf\nb: -.Inf\nc: .NaN"),
            R"({"a":"Infinity","b":"-Infinity","c":"NaN"})");
}

TEST(YamlToJsonTest, StringsAreEscaped) {
  EXPECT_EQ(Json("a: \"q\\\"b\\\\\\t\\x01\""), R"({"a":"q\"b\\\t\u0001"})");
}

TEST(YamlToJsonTest, NestedMapsAndSequences) {
  EXPECT_EQ(Json("m:\n  h: [1, 2]\n  s:\n    - x\n    - {k: v}\n"),
            R"({"m":{"h":[1,2],"s":["x",{"k":"v"}]}})");
}

TEST(YamlToJsonTest, JsonInputIsAccepted) {
  EXPECT_EQ(Json(R"({"a": {"b": [1, "2"]}, "c": null})"),
            R"({"a":{"b":[1,"2"]},"c":null})");
}

TEST(YamlToJsonTest, SyntaxErrorNamesLineAndColumn) {
  EXPECT_THAT(Error("a: 1\nb: [1, 2\n"), HasSubstr("line "));
  EXPECT_THAT(Error("a: 1\n b: 2\nc"), HasSubstr("line 2"));
  EXPECT_THAT(Error("{\"a\": 1,, }"), HasSubstr("missing key"));
}

TEST(YamlToJsonTest, DuplicateKeysAreRejected) {
  EXPECT_EQ(Error("steps: 1\nname: x\nsteps: 2\n"),
            "line 3, column 1: duplicate key \"steps\"");
}

TEST(YamlToJsonTest, EmptyDocuments) {
  EXPECT_EQ(Error(""), "empty");
  EXPECT_EQ(Error("# only a comment\n"), "empty");
  EXPECT_EQ(Error("---\n"), "empty");
}

TEST(YamlToJsonTest, TopLevelMustBeAMapping) {
  EXPECT_THAT(Error("- 1\n- 2\n"), HasSubstr("expected a mapping"));
  EXPECT_THAT(Error("just text"), HasSubstr("expected a mapping"));
}

TEST(YamlToJsonTest, OneDocumentOnly) {
  EXPECT_THAT(Error("a: 1\n---\nb: 2\n"), HasSubstr("second one"));
  EXPECT_EQ(Json("a: 1\n...\n"), R"({"a":1})");  // an end marker alone
}

// yaml-cpp 0.7's LoadAll never returns on these (found by fuzz_spec; the
// fuzzer's input is fuzz/corpus/spec/crash-yaml-loadall-loop.json).
TEST(YamlToJsonTest, StrayPunctuationIsAnErrorNotAHang) {
  EXPECT_EQ(Error(","),
            "line 1, column 1: unexpected text (a stray ',' or ':'?)");
  EXPECT_THAT(Error("\n,\n"), HasSubstr("unexpected text"));
  EXPECT_THAT(Error("{\"a\": 1,,\n \"b\": 2}"), HasSubstr("line 1"));
}

TEST(YamlToJsonTest, ComplexKeysAreRejected) {
  EXPECT_THAT(Error("? [a]\n: 1\n"), HasSubstr("keys must be plain names"));
}

TEST(YamlToJsonTest, AliasesExpand) {
  EXPECT_EQ(Json("a: &x {k: 1}\nb: *x"), R"({"a":{"k":1},"b":{"k":1}})");
}

TEST(YamlToJsonTest, BillionLaughsIsRefused) {
  std::string yaml = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    absl::StrAppend(&yaml, "a", i, ": &a", i, " [");
    for (int j = 0; j < 10; ++j)
      absl::StrAppend(&yaml, j ? ", " : "", "*a", i - 1);
    absl::StrAppend(&yaml, "]\n");
  }
  EXPECT_THAT(Error(yaml), HasSubstr("expands to more than"));
}

TEST(YamlToJsonTest, AliasesOfALongStringAreRefused) {
  // 1,000 aliases of a 500 KB string: few nodes, 500 MB of JSON.
  std::string yaml = "a: &s " + std::string(500'000, 'x') + "\nb: [";
  for (int i = 0; i < 1000; ++i) absl::StrAppend(&yaml, i ? ", " : "", "*s");
  absl::StrAppend(&yaml, "]\n");
  EXPECT_THAT(Error(yaml),
              HasSubstr("expands to more than 8388608 bytes of JSON"));
}

TEST(YamlToJsonTest, SelfReferenceIsRefused) {
  EXPECT_THAT(Error("a: &x [*x]\n"), HasSubstr("nested deeper"));
}

TEST(YamlToJsonTest, DeepNestingIsRefused) {
  EXPECT_THAT(Error(std::string(100'000, '[')), HasSubstr("line 1"));
  std::string nested = "a: " + std::string(40, '[') + std::string(40, ']');
  EXPECT_THAT(Error(nested), HasSubstr("nested deeper than 32 levels"));
}

TEST(YamlToJsonTest, SizeIsLimited) {
  YamlLimits limits;
  limits.max_bytes = 16;
  EXPECT_THAT(Error("name: a very long name indeed", limits),
              HasSubstr("limit is 16"));
}

TEST(YamlToJsonTest, BinaryGarbageIsAnErrorNotACrash) {
  std::string garbage;
  for (int i = 0; i < 4096; ++i) garbage.push_back(static_cast<char>(i * 7919));
  absl::StatusOr<std::string> json = YamlToJson(garbage);
  EXPECT_FALSE(json.ok());
}

}  // namespace
}  // namespace trainyard::spec
