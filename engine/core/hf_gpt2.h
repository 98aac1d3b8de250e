// Hugging Face GPT-2 folders, the exchange format for trained GPTs:
//   config.json        GPT2Config (model_type "gpt2", n_layer, n_head,
//                      n_embd, n_positions, vocab_size, activation
//                      "gelu_new", tied embeddings, bos_token_id and
//                      eos_token_id null: our tokenizers have neither)
//   model.safetensors  F32 tensors named as transformers' GPT2LMHeadModel
//                      ("transformer.wte.weight", "transformer.h.0.ln_1.
//                      weight", ...) with metadata {"format": "pt"}; the
//                      four linear weights of a block are Conv1D weights,
//                      stored [in, out], the transpose of ours
//   trainyard_tokenizer.json  (optional) the tokenizer the model was
//                      trained with, so text models can be sampled and
//                      fine-tuned on the same characters
// Reading accepts names with or without the "transformer." prefix and
// ignores lm_head.weight (tied to wte) and the attention mask buffers older
// transformers versions save. Stateless functions; thread-safe.
#ifndef TRAINYARD_ENGINE_CORE_HF_GPT2_H_
#define TRAINYARD_ENGINE_CORE_HF_GPT2_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/gpt.h"
#include "engine/core/json.h"
#include "engine/core/tensor.h"

namespace trainyard::engine {

inline constexpr char kHfConfigFile[] = "config.json";
inline constexpr char kHfWeightsFile[] = "model.safetensors";
inline constexpr char kHfTokenizerFile[] = "trainyard_tokenizer.json";

// `params` holds GptModel's tensors under its own names and layout (as in
// a checkpoint; other tensors, e.g. AdamW moments, are ignored). Writes the
// folder (creating it) with every file fsynced. INVALID_ARGUMENT when a
// parameter is missing or has the wrong shape. `tokenizer` may be null.
absl::Status WriteHfGpt2(const std::string& dir, const GptConfig& config,
                         const std::vector<HostTensor>& params,
                         const Json& tokenizer);

struct HfGpt2 {
  GptConfig config;
  std::vector<HostTensor> params;  // GptModel's names and layout
  Json tokenizer;                  // null when the folder has none
};

// Reads a folder. Errors name the file: NOT_FOUND for a missing file,
// DATA_LOSS for malformed contents, a missing tensor or a wrong shape,
// INVALID_ARGUMENT for a model this engine cannot run (not GPT-2, another
// activation, untied embeddings).
absl::StatusOr<HfGpt2> ReadHfGpt2(const std::string& dir);

// The same checks on the files' contents held in memory; `dir` names the
// folder in errors, and `tokenizer_json` is null when the folder has no
// tokenizer file.
absl::StatusOr<HfGpt2> ParseHfGpt2(absl::string_view config_json,
                                   absl::string_view weights,
                                   const std::string* tokenizer_json,
                                   const std::string& dir);

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_HF_GPT2_H_
