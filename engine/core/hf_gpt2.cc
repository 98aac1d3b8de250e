// Hugging Face GPT-2 export and import. See hf_gpt2.h.
#include "engine/core/hf_gpt2.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/core/backend.h"
#include "engine/core/file_io.h"
#include "engine/core/safetensors.h"

namespace trainyard::engine {
namespace {

constexpr int64_t kMaxConfigBytes = 1 << 20;
constexpr int64_t kMaxWeightsBytes = int64_t{64} << 30;
constexpr int64_t kMaxTokenizerBytes = int64_t{16} << 20;

std::string Join(const std::string& dir, const char* name) {
  return (std::filesystem::path(dir) / name).string();
}

// Conv1D weights: transposed between our [out, in] and Hugging Face's.
bool IsConv1D(const std::string& name) {
  return absl::StartsWith(name, "h.") &&
         (absl::EndsWith(name, ".c_attn.weight") ||
          absl::EndsWith(name, ".c_proj.weight") ||
          absl::EndsWith(name, ".c_fc.weight"));
}

std::string HfName(const std::string& ours) {
  if (ours == "wte" || ours == "wpe") {
    return absl::StrCat("transformer.", ours, ".weight");
  }
  return "transformer." + ours;
}

HostTensor Transposed(const HostTensor& t) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  HostTensor out{t.name, {cols, rows}, std::vector<float>(t.data.size())};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      out.data[c * rows + r] = t.data[r * cols + c];
    }
  }
  return out;
}

// The names and shapes GptModel has for `config`.
std::vector<std::pair<std::string, Shape>> ExpectedParams(const GptConfig& c) {
  const int64_t C = c.d_model;
  std::vector<std::pair<std::string, Shape>> out = {{"wte", {c.vocab_size, C}},
                                                    {"wpe", {c.seq_len, C}}};
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = absl::StrCat("h.", l, ".");
    out.push_back({h + "ln_1.weight", {C}});
    out.push_back({h + "ln_1.bias", {C}});
    out.push_back({h + "attn.c_attn.weight", {3 * C, C}});
    out.push_back({h + "attn.c_attn.bias", {3 * C}});
    out.push_back({h + "attn.c_proj.weight", {C, C}});
    out.push_back({h + "attn.c_proj.bias", {C}});
    out.push_back({h + "ln_2.weight", {C}});
    out.push_back({h + "ln_2.bias", {C}});
    out.push_back({h + "mlp.c_fc.weight", {4 * C, C}});
    out.push_back({h + "mlp.c_fc.bias", {4 * C}});
    out.push_back({h + "mlp.c_proj.weight", {C, 4 * C}});
    out.push_back({h + "mlp.c_proj.bias", {C}});
  }
  out.push_back({"ln_f.weight", {C}});
  out.push_back({"ln_f.bias", {C}});
  return out;
}

Json ConfigJson(const GptConfig& c) {
  return Json::MakeObject({
      {"architectures", Json::MakeArray({Json::String("GPT2LMHeadModel")})},
      {"model_type", Json::String("gpt2")},
      {"vocab_size", Json::Int(c.vocab_size)},
      {"n_positions", Json::Int(c.seq_len)},
      {"n_ctx", Json::Int(c.seq_len)},
      {"n_embd", Json::Int(c.d_model)},
      {"n_layer", Json::Int(c.n_layer)},
      {"n_head", Json::Int(c.n_head)},
      {"activation_function", Json::String("gelu_new")},
      {"layer_norm_epsilon", Json::Number(kLayerNormEpsilon)},
      {"resid_pdrop", Json::Number(0)},
      {"embd_pdrop", Json::Number(0)},
      {"attn_pdrop", Json::Number(0)},
      {"initializer_range", Json::Number(0.02)},
      {"scale_attn_weights", Json::Bool(true)},
      {"tie_word_embeddings", Json::Bool(true)},
      {"torch_dtype", Json::String("float32")},
      // Our tokenizers have no begin or end token. Left out, GPT2Config
      // takes GPT-2's 50256, outside a small model's vocabulary.
      {"bos_token_id", Json()},
      {"eos_token_id", Json()},
  });
}

absl::StatusOr<GptConfig> ParseConfig(const Json& j) {
  auto unsupported = [](absl::string_view why) {
    return absl::InvalidArgumentError(why);
  };
  const Json* type = j.Find("model_type");
  if (type == nullptr || !type->is_string() ||
      *type->AsString("model_type") != "gpt2") {
    return unsupported("model_type is not \"gpt2\"");
  }
  if (const Json* act = j.Find("activation_function");
      act != nullptr && act->is_string() &&
      *act->AsString("activation_function") != "gelu_new") {
    return unsupported("activation_function is not \"gelu_new\"");
  }
  if (const Json* tie = j.Find("tie_word_embeddings");
      tie != nullptr && tie->type() == Json::Type::kBool &&
      tie->Serialize() == "false") {
    return unsupported("the output embedding is not tied to the input one");
  }
  if (const Json* inner = j.Find("n_inner");
      inner != nullptr && inner->type() != Json::Type::kNull) {
    return unsupported("n_inner is set (only 4 * n_embd is supported)");
  }
  // Options that change what the model computes: only GPT-2's own values,
  // else the import would be another function than the one exported.
  auto is_bool = [&j](const char* name, bool value) {
    const Json* v = j.Find(name);
    return v != nullptr && v->type() == Json::Type::kBool &&
           v->Serialize() == (value ? "true" : "false");
  };
  if (is_bool("scale_attn_weights", false)) {
    return unsupported(
        "scale_attn_weights is false (attention scores are "
        "always scaled by 1/sqrt(head size))");
  }
  if (is_bool("scale_attn_by_inverse_layer_idx", true)) {
    return unsupported("scale_attn_by_inverse_layer_idx is true");
  }
  if (is_bool("add_cross_attention", true)) {
    return unsupported("add_cross_attention is true");
  }
  if (const Json* eps = j.Find("layer_norm_epsilon");
      eps != nullptr && eps->type() != Json::Type::kNull) {
    absl::StatusOr<double> v = eps->AsNumber("layer_norm_epsilon");
    if (!v.ok() ||
        std::abs(*v - kLayerNormEpsilon) > 1e-3 * kLayerNormEpsilon) {
      return unsupported(absl::StrCat("layer_norm_epsilon is ",
                                      eps->Serialize(), " (only ",
                                      kLayerNormEpsilon, " is supported)"));
    }
  }
  GptConfig c;
  for (auto [name, field] :
       {std::pair{"n_layer", &c.n_layer}, std::pair{"n_head", &c.n_head},
        std::pair{"n_embd", &c.d_model}, std::pair{"n_positions", &c.seq_len},
        std::pair{"vocab_size", &c.vocab_size}}) {
    ASSIGN_OR_RETURN(const Json* v, RequireField(j, name));
    ASSIGN_OR_RETURN(*field, v->AsInt(name));
  }
  RETURN_IF_ERROR(ValidateGptConfig(c));
  return c;
}

// Prefixes the message with the file.
absl::Status InFile(const std::string& path, const absl::Status& s) {
  if (s.ok() || absl::StartsWith(s.message(), path)) return s;
  return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
}

absl::StatusOr<GptConfig> ParseConfigFile(absl::string_view text,
                                          const std::string& path) {
  if (static_cast<int64_t>(text.size()) > kMaxConfigBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": ", text.size(), " bytes, more than the limit of ",
                     kMaxConfigBytes));
  }
  absl::StatusOr<Json> json = ParseJson(text);
  if (!json.ok()) {
    return absl::DataLossError(
        absl::StrCat(path, ": ", json.status().message()));
  }
  absl::StatusOr<GptConfig> config = ParseConfig(*json);
  if (!config.ok()) return InFile(path, config.status());
  return config;
}

// GptModel's parameters, under its names and layout, taken out of the
// Hugging Face tensors (which are moved from).
absl::StatusOr<std::vector<HostTensor>> ParamsFromHf(
    const GptConfig& config, std::vector<HostTensor>* tensors,
    const std::string& weights_path) {
  std::map<std::string, HostTensor*> by_name;
  for (HostTensor& t : *tensors) {
    std::string name = t.name;
    if (absl::StartsWith(name, "transformer.")) name = name.substr(12);
    if (name == "wte.weight" || name == "wpe.weight") name.resize(3);
    by_name[name] = &t;
  }
  std::vector<HostTensor> params;
  for (const auto& [name, shape] : ExpectedParams(config)) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return absl::DataLossError(
          absl::StrCat(weights_path, ": tensor ", HfName(name), " is missing"));
    }
    HostTensor t = std::move(*it->second);
    t.name = name;
    if (IsConv1D(name)) {
      if (t.shape.size() != 2)
        t.shape.clear();
      else
        t = Transposed(t);
    }
    if (t.shape != shape) {
      return absl::DataLossError(absl::StrCat(
          weights_path, ": tensor ", HfName(name), " has shape ",
          ShapeString(IsConv1D(name) && t.shape.size() == 2
                          ? Shape{t.shape[1], t.shape[0]}
                          : t.shape),
          ", the config needs ",
          ShapeString(IsConv1D(name) ? Shape{shape[1], shape[0]} : shape)));
    }
    params.push_back(std::move(t));
  }
  return params;
}

}  // namespace

absl::Status WriteHfGpt2(const std::string& dir, const GptConfig& config,
                         const std::vector<HostTensor>& params,
                         const Json& tokenizer) {
  std::map<std::string, const HostTensor*> by_name;
  for (const HostTensor& t : params) by_name[t.name] = &t;
  std::vector<HostTensor> out;
  for (const auto& [name, shape] : ExpectedParams(config)) {
    auto it = by_name.find(name);
    if (it == by_name.end() || it->second->shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat("export: parameter ", name,
                                                     " is missing or not ",
                                                     ShapeString(shape)));
    }
    HostTensor t = IsConv1D(name) ? Transposed(*it->second) : *it->second;
    t.name = HfName(name);
    out.push_back(std::move(t));
  }
  RETURN_IF_ERROR(MakeDirectories(dir));
  RETURN_IF_ERROR(WriteFileDurably(Join(dir, kHfConfigFile),
                                   ConfigJson(config).Serialize() + "\n"));
  RETURN_IF_ERROR(WriteSafetensors(Join(dir, kHfWeightsFile), out).status());
  if (tokenizer.type() != Json::Type::kNull) {
    RETURN_IF_ERROR(WriteFileDurably(Join(dir, kHfTokenizerFile),
                                     tokenizer.Serialize() + "\n"));
  }
  return SyncDirectory(dir);
}

absl::StatusOr<HfGpt2> ReadHfGpt2(const std::string& dir) {
  const std::string config_path = Join(dir, kHfConfigFile);
  absl::StatusOr<std::string> config =
      ReadWholeFile(config_path, kMaxConfigBytes);
  if (!config.ok()) return InFile(config_path, config.status());
  // The config first: a bad one is reported without reading the weights.
  RETURN_IF_ERROR(ParseConfigFile(*config, config_path).status());
  const std::string weights_path = Join(dir, kHfWeightsFile);
  absl::StatusOr<std::string> weights =
      ReadWholeFile(weights_path, kMaxWeightsBytes);
  if (!weights.ok()) return InFile(weights_path, weights.status());
  const std::string tok_path = Join(dir, kHfTokenizerFile);
  std::optional<std::string> tokenizer;
  if (std::filesystem::exists(tok_path)) {
    absl::StatusOr<std::string> text =
        ReadWholeFile(tok_path, kMaxTokenizerBytes);
    if (!text.ok()) return InFile(tok_path, text.status());
    tokenizer = *std::move(text);
  }
  return ParseHfGpt2(*config, *weights,
                     tokenizer.has_value() ? &*tokenizer : nullptr, dir);
}

absl::StatusOr<HfGpt2> ParseHfGpt2(absl::string_view config_json,
                                   absl::string_view weights,
                                   const std::string* tokenizer_json,
                                   const std::string& dir) {
  HfGpt2 out;
  ASSIGN_OR_RETURN(out.config,
                   ParseConfigFile(config_json, Join(dir, kHfConfigFile)));
  const std::string weights_path = Join(dir, kHfWeightsFile);
  ASSIGN_OR_RETURN(std::vector<HostTensor> tensors,
                   ParseSafetensors(weights, weights_path));
  ASSIGN_OR_RETURN(out.params,
                   ParamsFromHf(out.config, &tensors, weights_path));
  if (tokenizer_json != nullptr) {
    absl::StatusOr<Json> json = ParseJson(*tokenizer_json);
    if (!json.ok()) {
      return absl::DataLossError(absl::StrCat(Join(dir, kHfTokenizerFile), ": ",
                                              json.status().message()));
    }
    out.tokenizer = *std::move(json);
  }
  return out;
}

}  // namespace trainyard::engine
