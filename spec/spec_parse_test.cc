// Tests for reading specs (YAML and JSON), printing them, defaults and the
// parameter count.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "spec/spec.h"

namespace trainyard::spec {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;
using ::trainyard::v1::JobSpec;

constexpr char kYaml[] = R"(
name: mnist-mlp
model:
  mlp:
    hidden: [256, 128]
data:
  mnist:
    images: examples/data/mnist/t10k-images-idx3-ubyte.gz
    labels: examples/data/mnist/t10k-labels-idx1-ubyte.gz
    holdout: 2000
optimizer:
  lr: 1e-3
  weight_decay: 0.01
  warmup_steps: 50
batch:
  micro_batch: 64
steps: 1500
precision: FP32
eval: {every_steps: 500}
checkpoint: {every_steps: 500, keep_last: 2}
seed: 42
)";

constexpr char kJson[] = R"({
  "name": "mnist-mlp",
  "model": {"mlp": {"hidden": [256, 128]}},
  "data": {"mnist": {
    "images": "examples/data/mnist/t10k-images-idx3-ubyte.gz",
    "labels": "examples/data/mnist/t10k-labels-idx1-ubyte.gz",
    "holdout": 2000}},
  "optimizer": {"lr": 0.001, "weightDecay": 0.01, "warmup_steps": 50},
  "batch": {"micro_batch": 64},
  "steps": "1500",
  "precision": "FP32",
  "eval": {"every_steps": 500},
  "checkpoint": {"every_steps": 500, "keep_last": 2},
  "seed": 42
})";

std::string ParseError(const std::string& text) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text);
  EXPECT_FALSE(spec.ok()) << spec->DebugString();
  if (spec.ok()) return "";
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(spec.status().message());
}

TEST(ParseJobSpecTest, YamlAndJsonGiveTheSameSpec) {
  absl::StatusOr<JobSpec> from_yaml = ParseJobSpec(kYaml);
  absl::StatusOr<JobSpec> from_json = ParseJobSpec(kJson);
  ASSERT_TRUE(from_yaml.ok()) << from_yaml.status();
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*from_yaml, *from_json))
      << from_yaml->DebugString() << "\nvs\n"
      << from_json->DebugString();
  EXPECT_EQ(from_yaml->steps(), 1500);
  EXPECT_EQ(from_yaml->model().mlp().hidden_size(), 2);
  EXPECT_TRUE(from_yaml->optimizer().has_lr());
  EXPECT_FALSE(from_yaml->optimizer().has_beta1());
  EXPECT_EQ(from_yaml->checkpoint().keep_last(), 2);
}

TEST(ParseJobSpecTest, JsonRoundTrip) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(kYaml);
  ASSERT_TRUE(spec.ok());
  std::string json = JobSpecToJson(*spec);
  EXPECT_EQ(json.find('\n'), std::string::npos);
  EXPECT_THAT(json, HasSubstr("\"micro_batch\":64"));
  absl::StatusOr<JobSpec> again = ParseJobSpec(json);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*spec, *again));
  EXPECT_THAT(JobSpecToJson(*spec, /*pretty=*/true), HasSubstr("\n"));
}

TEST(ParseJobSpecTest, MalformedYamlNamesTheLine) {
  EXPECT_EQ(ParseError("steps: 5\nbatch: {micro_batch: 3\n"),
            "spec: line 3, column 1: end of map flow not found");
  EXPECT_THAT(ParseError("steps: 1\n  name: x: y\n"), HasSubstr("line 2"));
}

TEST(ParseJobSpecTest, MalformedJson) {
  EXPECT_EQ(ParseError(R"({"steps": 5,, "name": "x"})"),
            "spec: line 1, column 13: expected a quoted key");
  EXPECT_EQ(ParseError("{\"name\": \"x\",\n \"steps\": }"),
            "spec: line 2, column 11: expected a value (a string, number, "
            "object, array, true, false or null)");
  EXPECT_EQ(ParseError(R"({"steps": 5)"),
            "spec: line 1, column 12: expected ',' or '}'");
  EXPECT_EQ(ParseError(R"({"steps": 5,})"),
            "spec: line 1, column 13: expected a quoted key");
  EXPECT_EQ(ParseError("{'steps': 5}"),
            "spec: line 1, column 2: expected a quoted key");
  EXPECT_EQ(ParseError(R"({"steps": 05})"),
            "spec: line 1, column 12: expected ',' or '}'");
  EXPECT_EQ(ParseError(R"({"name": "a\qb"})"),
            "spec: line 1, column 13: bad escape in a string");
  EXPECT_EQ(ParseError(R"({"steps": 5} extra)"),
            "spec: line 1, column 14: unexpected text after the end of the "
            "JSON object");
  EXPECT_EQ(ParseError(R"({"name": "x)"),
            "spec: line 1, column 12: "
            "unterminated string");
  std::string deep;
  for (int i = 0; i < 100'000; ++i) deep += "{\"a\":[";
  EXPECT_THAT(ParseError(deep), HasSubstr("nested too deeply"));
}

TEST(ParseJobSpecTest, JsonEscapesAndCompactForm) {
  absl::StatusOr<JobSpec> spec =
      ParseJobSpec(R"({"name":"caf\u00e9 \"x\"\/","steps":-0,"seed":1E2})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "caf\xc3\xa9 \"x\"/");
  EXPECT_EQ(spec->seed(), 100u);
}

TEST(ParseJobSpecTest, EmptyDocument) {
  EXPECT_EQ(ParseError(""), "spec: empty");
  EXPECT_EQ(ParseError("   \n# nothing\n"), "spec: empty");
}

// Errors name the field and where it was written, as syntax errors do.
TEST(ParseJobSpecTest, UnknownFieldsAreNamed) {
  EXPECT_EQ(ParseError("steps: 5\nfoo: 1\n"),
            "spec: line 2, column 1: unknown field \"foo\"");
  EXPECT_EQ(ParseError("model:\n  mlp:\n    hidden: [1]\n    layers: 2\n"),
            "spec: line 4, column 5: model.mlp: unknown field \"layers\"");
  EXPECT_EQ(ParseError("model: {mlp: {hidden: [1], layers: 2}}"),
            "spec: line 1, column 28: model.mlp: unknown field \"layers\"");
  EXPECT_EQ(ParseError("{\"steps\": 5,\n \"foo\": 1}"),
            "spec: line 2, column 2: unknown field \"foo\"");
}

TEST(ParseJobSpecTest, WrongTypesAreNamed) {
  EXPECT_EQ(ParseError("name: x\nsteps: abc"),
            "spec: line 2, column 1: steps: invalid value \"abc\" (expected an "
            "integer)");
  EXPECT_EQ(
      ParseError("model:\n  mlp:\n    hidden:\n      - 64\n      - 2.5\n"),
      "spec: line 5, column 9: model.mlp.hidden[1]: invalid value 2.5 "
      "(expected an integer)");
  EXPECT_EQ(ParseError("name: [a]"),
            "spec: line 1, column 1: name: must not be a list");
  EXPECT_EQ(ParseError("steps: {a: 1}"),
            "spec: line 1, column 1: steps: expected a single value, got a "
            "mapping");
  EXPECT_EQ(ParseError("precision: bf16"),
            "spec: line 1, column 1: precision: invalid value \"bf16\" "
            "(expected one of FP32, BF16)");
  EXPECT_EQ(ParseError("seed: -1"),
            "spec: line 1, column 1: seed: invalid value -1 (expected a "
            "non-negative integer)");
  EXPECT_EQ(ParseError("name: 5"),
            "spec: line 1, column 1: name: invalid value 5 (expected a "
            "string)");
  EXPECT_THAT(ParseError("steps: 99999999999999999999"),
              HasSubstr("spec: line 1, column 1: steps: invalid value"));
}

TEST(ParseJobSpecTest, TwoModelsAtOnce) {
  EXPECT_EQ(ParseError("model: {mlp: {hidden: [1]}, gpt: {n_layer: 1}}"),
            "spec: line 1, column 1: model: set only one of mlp, gpt");
}

TEST(ParseJobSpecTest, AliasBomb) {
  std::string yaml = "name: &a0 x\n";
  for (int i = 1; i < 12; ++i) {
    absl::StrAppend(&yaml, "k", i, ": &a", i, " [");
    for (int j = 0; j < 10; ++j) {
      absl::StrAppend(&yaml, j ? ", " : "", "*a", i - 1);
    }
    absl::StrAppend(&yaml, "]\n");
  }
  EXPECT_THAT(ParseError(yaml), HasSubstr("expands to more than"));
}

class SpecFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = ::testing::TempDir() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
};

TEST_F(SpecFileTest, ReadsYamlAndJsonFiles) {
  absl::StatusOr<JobSpec> a = ReadJobSpecFile(Write("a.yaml", kYaml));
  absl::StatusOr<JobSpec> b = ReadJobSpecFile(Write("b.json", kJson));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*a, *b));
}

TEST_F(SpecFileTest, ErrorsNameTheFile) {
  std::string path = Write("bad.yaml", "steps: 5\nsteps: 6\n");
  absl::StatusOr<JobSpec> spec = ReadJobSpecFile(path);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(),
            path + ": line 2, column 1: duplicate key \"steps\"");
}

TEST_F(SpecFileTest, MissingFileIsNotFound) {
  absl::StatusOr<JobSpec> spec = ReadJobSpecFile("/nonexistent/x.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(spec.status().message(), HasSubstr("/nonexistent/x.yaml"));
}

TEST_F(SpecFileTest, DirectoryIsRefused) {
  absl::StatusOr<JobSpec> spec = ReadJobSpecFile(::testing::TempDir());
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("not a regular file"));
}

TEST_F(SpecFileTest, HugeFileIsRefused) {
  std::string path = Write(
      "huge.yaml", absl::StrCat("name: \"", std::string(2 << 20, 'x'), "\""));
  absl::StatusOr<JobSpec> spec = ReadJobSpecFile(path);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("the limit is"));
}

TEST(WithDefaultsTest, FillsDocumentedDefaults) {
  JobSpec spec = WithDefaults(*ParseJobSpec(
      "model: {mlp: {hidden: [8]}}\ndata: {mnist: {images: a, labels: b}}"));
  EXPECT_DOUBLE_EQ(spec.optimizer().lr(), 1e-3);
  EXPECT_DOUBLE_EQ(spec.optimizer().beta1(), 0.9);
  EXPECT_DOUBLE_EQ(spec.optimizer().beta2(), 0.999);
  EXPECT_DOUBLE_EQ(spec.optimizer().eps(), 1e-8);
  EXPECT_TRUE(spec.optimizer().has_weight_decay());
  EXPECT_DOUBLE_EQ(spec.optimizer().weight_decay(), 0.0);
  EXPECT_DOUBLE_EQ(spec.optimizer().grad_clip(), 1.0);
  EXPECT_DOUBLE_EQ(spec.optimizer().min_lr_ratio(), 0.1);
  EXPECT_EQ(spec.batch().grad_accum(), 1);
  EXPECT_EQ(spec.checkpoint().keep_last(), 3);
  EXPECT_EQ(spec.resources().cpu_threads(), 1);
  EXPECT_EQ(spec.log_every_steps(), 10);
  EXPECT_EQ(spec.precision(), trainyard::v1::FP32);
  EXPECT_EQ(spec.model().mlp().input_dim(), 784);
  EXPECT_EQ(spec.model().mlp().num_classes(), 10);
}

TEST(WithDefaultsTest, KeepsExplicitValuesIncludingZero) {
  JobSpec spec = WithDefaults(
      *ParseJobSpec("optimizer: {lr: 0.5, grad_clip: 0}\nlog_every_steps: 3\n"
                    "checkpoint: {keep_last: 7}\nprecision: BF16\n"));
  EXPECT_DOUBLE_EQ(spec.optimizer().lr(), 0.5);
  EXPECT_DOUBLE_EQ(spec.optimizer().grad_clip(), 0.0);
  EXPECT_EQ(spec.log_every_steps(), 3);
  EXPECT_EQ(spec.checkpoint().keep_last(), 7);
  EXPECT_EQ(spec.precision(), trainyard::v1::BF16);
}

TEST(CountParametersTest, Mlp) {
  JobSpec spec = *ParseJobSpec("model: {mlp: {hidden: [256, 128]}}");
  // 784*256+256 + 256*128+128 + 128*10+10
  EXPECT_EQ(CountParameters(spec), 200'960 + 32'896 + 1'290);
}

TEST(CountParametersTest, Gpt2Small) {
  JobSpec spec = *ParseJobSpec(
      "model: {gpt: {n_layer: 12, n_head: 12, d_model: 768, seq_len: 1024, "
      "vocab_size: 50257}}");
  EXPECT_EQ(CountParameters(spec), 124'439'808);  // GPT-2 small, tied
}

TEST(CountParametersTest, SaturatesInsteadOfOverflowing) {
  JobSpec spec;
  for (int i = 0; i < 1000; ++i) {
    spec.mutable_model()->mutable_mlp()->add_hidden(2'000'000'000);
  }
  EXPECT_EQ(CountParameters(spec), INT64_MAX);
  EXPECT_EQ(CountParameters(JobSpec()), 0);
}

}  // namespace
}  // namespace trainyard::spec
