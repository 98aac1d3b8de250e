// Reading Hugging Face GPT-2 folders from memory: a valid one, configs that
// ask for absurd sizes (refused before anything is allocated) and weights
// that do not match the config.
#include "engine/core/hf_gpt2.h"

#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/test_dir.h"
#include "engine/core/file_io.h"
#include "engine/core/json.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

// GptModel's parameters for a 1-layer, d_model 4 model, under its names.
std::vector<HostTensor> TinyParams(const GptConfig& c) {
  const int64_t C = c.d_model;
  std::vector<std::pair<std::string, Shape>> shapes = {
      {"wte", {c.vocab_size, C}},
      {"wpe", {c.seq_len, C}},
      {"h.0.ln_1.weight", {C}},
      {"h.0.ln_1.bias", {C}},
      {"h.0.attn.c_attn.weight", {3 * C, C}},
      {"h.0.attn.c_attn.bias", {3 * C}},
      {"h.0.attn.c_proj.weight", {C, C}},
      {"h.0.attn.c_proj.bias", {C}},
      {"h.0.ln_2.weight", {C}},
      {"h.0.ln_2.bias", {C}},
      {"h.0.mlp.c_fc.weight", {4 * C, C}},
      {"h.0.mlp.c_fc.bias", {4 * C}},
      {"h.0.mlp.c_proj.weight", {C, 4 * C}},
      {"h.0.mlp.c_proj.bias", {C}},
      {"ln_f.weight", {C}},
      {"ln_f.bias", {C}}};
  std::vector<HostTensor> out;
  for (auto& [name, shape] : shapes) {
    out.push_back({name, shape, std::vector<float>(NumElements(shape), 0.5f)});
  }
  return out;
}

class HfGpt2Test : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(WriteHfGpt2(dir_, config_, TinyParams(config_), Json()).ok());
    config_json_ = *ReadWholeFile(dir_ + "/config.json", 1 << 20);
    weights_ = *ReadWholeFile(dir_ + "/model.safetensors", 1 << 20);
  }
  std::string ConfigWith(const std::string& key, const std::string& value) {
    std::string text = config_json_;
    const std::string field = absl::StrCat("\"", key, "\":");
    if (text.find(field) == std::string::npos) {  // a key export leaves out
      return absl::StrCat("{", field, value, ",", text.substr(1));
    }
    const size_t at = text.find(field) + field.size();
    text.replace(at, text.find(',', at) - at, value);
    return text;
  }

  GptConfig config_{1, 1, 4, 4, 8};
  TestDir tmp_;
  // Made by WriteHfGpt2.
  const std::string dir_ = tmp_.File("model");
  std::string config_json_, weights_;
};

TEST_F(HfGpt2Test, ParsesFromMemory) {
  absl::StatusOr<HfGpt2> hf =
      ParseHfGpt2(config_json_, weights_, nullptr, dir_);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->params.size(), 16u);
  EXPECT_EQ(hf->config.d_model, 4);
  const std::string tok = R"({"kind":"byte"})";
  hf = ParseHfGpt2(config_json_, weights_, &tok, dir_);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_TRUE(hf->tokenizer.is_object());
  const std::string bad_tok = "{";
  EXPECT_EQ(ParseHfGpt2(config_json_, weights_, &bad_tok, dir_).status().code(),
            absl::StatusCode::kDataLoss);
}

// Our tokenizers have no begin or end token: config.json says so, or
// transformers takes GPT-2's 50256, outside this model's 8 ids.
TEST_F(HfGpt2Test, TheConfigHasNoBeginOrEndToken) {
  absl::StatusOr<Json> config = ParseJson(config_json_);
  ASSERT_TRUE(config.ok()) << config.status();
  for (const char* key : {"bos_token_id", "eos_token_id"}) {
    const Json* id = config->Find(key);
    ASSERT_NE(id, nullptr) << key;
    EXPECT_EQ(id->type(), Json::Type::kNull) << key;
  }
}

TEST_F(HfGpt2Test, AbsurdConfigsAreRefusedBeforeAllocating) {
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"n_layer", "1000000000"},
           {"n_embd", "9223372036854775807"},
           {"vocab_size", "-1"},
           {"n_positions", "99999999999999999999"},
           {"n_head", "3"}}) {
    absl::StatusOr<HfGpt2> hf =
        ParseHfGpt2(ConfigWith(key, value), weights_, nullptr, dir_);
    EXPECT_FALSE(hf.ok()) << key;
    EXPECT_TRUE(absl::StartsWith(hf.status().message(), dir_ + "/config.json"))
        << hf.status();
  }
}

// Options that would make the imported model compute something else than
// the engine's GPT-2 are refused naming the option, GPT-2's own values
// accepted.
TEST_F(HfGpt2Test, ConfigOptionsThatChangeTheModelAreRefused) {
  for (const auto& [key, value, why] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"layer_norm_epsilon", "0.5", "layer_norm_epsilon is 0.5"},
           {"layer_norm_epsilon", "\"x\"", "layer_norm_epsilon is \"x\""},
           {"scale_attn_weights", "false", "scale_attn_weights is false"},
           {"scale_attn_by_inverse_layer_idx", "true",
            "scale_attn_by_inverse_layer_idx is true"},
           {"activation_function", "\"relu\"", "activation_function"}}) {
    absl::StatusOr<HfGpt2> hf =
        ParseHfGpt2(ConfigWith(key, value), weights_, nullptr, dir_);
    EXPECT_EQ(hf.status().code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_TRUE(absl::StrContains(hf.status().message(), why)) << hf.status();
  }
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"layer_norm_epsilon", "1e-05"},
           {"scale_attn_weights", "true"},
           {"scale_attn_by_inverse_layer_idx", "false"}}) {
    EXPECT_TRUE(
        ParseHfGpt2(ConfigWith(key, value), weights_, nullptr, dir_).ok())
        << key;
  }
}

TEST_F(HfGpt2Test, WeightsMustMatchTheConfig) {
  absl::StatusOr<HfGpt2> hf =
      ParseHfGpt2(ConfigWith("n_layer", "2"), weights_, nullptr, dir_);
  EXPECT_EQ(hf.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(hf.status().message(), "is missing"))
      << hf.status();
  hf = ParseHfGpt2(ConfigWith("n_positions", "8"), weights_, nullptr, dir_);
  EXPECT_TRUE(absl::StrContains(hf.status().message(), "has shape [4, 4]"))
      << hf.status();
  EXPECT_EQ(ParseHfGpt2(config_json_, weights_.substr(0, 100), nullptr, dir_)
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace trainyard::engine
