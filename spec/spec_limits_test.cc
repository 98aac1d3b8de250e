// Tests for the limits of spec/limits.h: spec size (text and encoded),
// string lengths and encodings, model sizes at and past every cap (and far
// past them, where a careless product would overflow int64), steps and
// batches, and that a deployment cannot raise a limit past its constant.
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/limits.h"
#include "spec/spec.h"

namespace trainyard::spec {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using ::trainyard::v1::JobSpec;

constexpr char kMlp[] = R"(
name: mnist-mlp
model: {mlp: {hidden: [256, 128]}}
data: {mnist: {images: mnist/images.gz, labels: mnist/labels.gz}}
batch: {micro_batch: 64}
steps: 1500
)";

constexpr char kGpt[] = R"(
name: gpt
model: {gpt: {n_layer: 2, n_head: 2, d_model: 64, seq_len: 64,
              vocab_size: 256}}
data: {text: {train: text/train.txt}}
batch: {micro_batch: 8}
steps: 100
)";

class LimitsTest : public ::testing::Test {
 protected:
  LimitsTest() {
    // Paths need not exist: these tests are about the numbers.
    options_.data_root = ::testing::TempDir();
    options_.check_files_exist = false;
  }
  static JobSpec Parse(const char* text) {
    absl::StatusOr<JobSpec> spec = ParseJobSpec(text);
    EXPECT_TRUE(spec.ok()) << spec.status();
    return spec.ok() ? *spec : JobSpec();
  }
  std::string ErrorOf(const JobSpec& spec) {
    absl::Status s = ValidateJobSpec(spec, options_);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    return std::string(s.message());
  }
  bool Valid(const JobSpec& spec) {
    absl::Status s = ValidateJobSpec(spec, options_);
    EXPECT_TRUE(s.ok()) << s;
    return s.ok();
  }
  ValidationOptions options_;
};

TEST_F(LimitsTest, SpecTextOverOneMebibyteIsRefusedBeforeParsing) {
  // Broken YAML: were it parsed, the error would be a syntax error.
  std::string text = "name: [" + std::string(kMaxSpecBytes, 'x');
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec.status().message(),
            absl::StrCat("spec: spec is ", text.size(),
                         " bytes; the limit is 1048576 (1 MiB)"));
  text = "{\"name\": [" + std::string(kMaxSpecBytes, ' ');  // JSON route
  EXPECT_THAT(ParseJobSpec(text).status().message(),
              HasSubstr("the limit is 1048576"));

  const std::string path = ::testing::TempDir() + "/limits_huge.yaml";
  std::ofstream(path) << "name: [" << std::string(3 << 20, 'x');
  spec = ReadJobSpecFile(path);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec.status().message(),
            absl::StrCat(path, ": spec is ", (3 << 20) + 7,
                         " bytes; the limit is 1048576 (1 MiB)"));
}

TEST_F(LimitsTest, EncodedSpecOverOneMebibyteIsRefused) {
  // 10,000 shards (the most allowed) of 200 characters: 2 MB of paths.
  JobSpec spec = Parse(kGpt);
  auto* tokens = spec.mutable_data()->mutable_tokens();
  for (int i = 0; i < 10'000; ++i) {
    tokens->add_train(absl::StrCat(std::string(190, 's'), i));
  }
  EXPECT_THAT(ErrorOf(spec), StartsWith("the spec is "));
  EXPECT_THAT(ErrorOf(spec), HasSubstr(" bytes encoded; the limit is 1048576"));
}

TEST_F(LimitsTest, StringsMustBeValidUtf8) {
  JobSpec spec = Parse(kMlp);
  spec.set_name("caf\xc3\xa9 \xe2\x9c\x93");  // "café ✓"
  EXPECT_TRUE(Valid(spec));
  for (const char* bad : {"\xc3", "\xc0\xaf", "\xed\xa0\x80",
                          "\xf4\x90\x80\x80", "\xff", "a\x80"}) {
    spec.set_name(bad);
    EXPECT_EQ(ErrorOf(spec), "name: must be valid UTF-8") << bad;
  }
  spec = Parse(kMlp);
  spec.mutable_data()->mutable_mnist()->set_images("mnist/\xfe.gz");
  EXPECT_EQ(ErrorOf(spec), "data.mnist.images: must be valid UTF-8");
  spec = Parse(kGpt);
  spec.mutable_model()->mutable_gpt()->set_init_from("hf\xc3");
  EXPECT_EQ(ErrorOf(spec), "model.gpt.init_from: must be valid UTF-8");
  spec.mutable_model()->mutable_gpt()->set_init_from(std::string(5000, 'h'));
  EXPECT_EQ(ErrorOf(spec), "model.gpt.init_from: at most 4096 bytes");
  spec.mutable_model()->mutable_gpt()->set_init_from("a\tb");
  EXPECT_EQ(ErrorOf(spec),
            "model.gpt.init_from: must not contain control characters");
}

TEST_F(LimitsTest, NameLength) {
  JobSpec spec = Parse(kMlp);
  spec.set_name(std::string(kMaxNameLength, 'n'));
  EXPECT_TRUE(Valid(spec));
  spec.set_name(std::string(kMaxNameLength + 1, 'n'));
  EXPECT_EQ(ErrorOf(spec), "name: at most 128 bytes of UTF-8, got 129");
}

TEST_F(LimitsTest, StepsAndBatches) {
  JobSpec spec = Parse(kMlp);
  spec.set_steps(kMaxSteps);
  EXPECT_TRUE(Valid(spec));
  spec.set_steps(std::numeric_limits<int64_t>::max());
  EXPECT_EQ(ErrorOf(spec),
            "steps: must be in [1, 10000000], got 9223372036854775807");
  spec = Parse(kMlp);
  spec.mutable_batch()->set_micro_batch(kMaxMicroBatch + 1);
  spec.mutable_batch()->set_grad_accum(std::numeric_limits<int32_t>::max());
  EXPECT_EQ(ErrorOf(spec),
            "batch.micro_batch: must be in [1, 65536], got 65537; "
            "batch.grad_accum: must be in [1, 4096], got 2147483647");
}

TEST_F(LimitsTest, GptTokensPerMicroBatch) {
  JobSpec spec = Parse(kGpt);
  auto* gpt = spec.mutable_model()->mutable_gpt();
  gpt->set_seq_len(65'536);
  gpt->set_d_model(16);
  spec.mutable_batch()->set_micro_batch(256);  // exactly 2^24 tokens
  EXPECT_TRUE(Valid(spec));
  spec.mutable_batch()->set_micro_batch(257);
  EXPECT_EQ(ErrorOf(spec),
            "batch.micro_batch: micro_batch x model.gpt.seq_len must be at "
            "most 16777216 tokens, got 16842752");
}

TEST_F(LimitsTest, ModelSizesAtAndPastEveryCap) {
  JobSpec spec = Parse(kGpt);
  auto* gpt = spec.mutable_model()->mutable_gpt();
  const int32_t kHuge = std::numeric_limits<int32_t>::max();
  gpt->set_n_layer(kHuge);
  gpt->set_n_head(kHuge);
  gpt->set_d_model(kHuge);
  gpt->set_seq_len(kHuge);
  gpt->set_vocab_size(kHuge);
  EXPECT_EQ(ErrorOf(spec),
            "model.gpt.n_layer: must be in [1, 256], got 2147483647; "
            "model.gpt.n_head: must be in [1, 1024], got 2147483647; "
            "model.gpt.d_model: must be in [1, 65536], got 2147483647; "
            "model.gpt.seq_len: must be in [1, 65536], got 2147483647; "
            "model.gpt.vocab_size: must be in [1, 1048576], got 2147483647");
  // Every dimension at its cap: the count is computed without overflow and
  // refused as a whole.
  gpt->set_n_layer(256);
  gpt->set_n_head(1024);
  gpt->set_d_model(65'536);
  gpt->set_seq_len(256);
  gpt->set_vocab_size(1 << 20);
  EXPECT_EQ(ErrorOf(spec), "model: 1.3e13 parameters exceeds the limit of 2e9");
  spec = Parse(kMlp);
  auto* mlp = spec.mutable_model()->mutable_mlp();
  for (int i = 0; i < 300; ++i) mlp->add_hidden(kHuge);
  EXPECT_EQ(ErrorOf(spec), "model.mlp.hidden: at most 256 layers, got 302");
}

TEST_F(LimitsTest, CountParametersSaturatesInsteadOfWrapping) {
  JobSpec spec = Parse(kGpt);
  auto* gpt = spec.mutable_model()->mutable_gpt();
  gpt->set_n_layer(std::numeric_limits<int32_t>::max());
  gpt->set_d_model(std::numeric_limits<int32_t>::max());
  gpt->set_vocab_size(std::numeric_limits<int32_t>::max());
  EXPECT_EQ(CountParameters(spec), std::numeric_limits<int64_t>::max());
  gpt->set_d_model(std::numeric_limits<int32_t>::min());
  EXPECT_GE(CountParameters(spec), 0);
  spec = Parse(kMlp);
  auto* mlp = spec.mutable_model()->mutable_mlp();
  mlp->set_input_dim(std::numeric_limits<int32_t>::max());
  for (int i = 0; i < 1000; ++i) {
    mlp->add_hidden(std::numeric_limits<int32_t>::max());
  }
  EXPECT_EQ(CountParameters(spec), std::numeric_limits<int64_t>::max());
}

TEST_F(LimitsTest, ADeploymentMayLowerLimitsButNotRaiseThem) {
  JobSpec spec = Parse(kMlp);
  spec.set_steps(kMaxSteps + 1);
  options_.limits.max_steps = std::numeric_limits<int64_t>::max();
  options_.limits.max_layer_width = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(ErrorOf(spec), "steps: must be in [1, 10000000], got 10000001");
  spec.set_steps(100);
  spec.mutable_model()->mutable_mlp()->set_hidden(0, kMaxLayerWidth + 1);
  EXPECT_EQ(ErrorOf(spec),
            "model.mlp.hidden[0]: must be in [1, 65536], got 65537");
  spec = Parse(kMlp);
  options_.limits.max_steps = 1000;
  EXPECT_EQ(ErrorOf(spec), "steps: must be in [1, 1000], got 1500");
}

}  // namespace
}  // namespace trainyard::spec
