// What yard-train does with a trained GPT besides training it: load it
// from a checkpoint (for `sample`), write it as a Hugging Face GPT-2 folder
// (`export`), and load such a folder's weights into a model (fine-tuning
// from `model.gpt.init_from`). Stateless functions; thread-safe.
#ifndef TRAINYARD_ENGINE_GPT_TOOLS_H_
#define TRAINYARD_ENGINE_GPT_TOOLS_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/gpt.h"
#include "engine/core/hf_gpt2.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/data/tokenizer.h"

namespace trainyard::engine {

struct LoadedGpt {
  // Declared first so it is destroyed last.
  std::unique_ptr<CpuBackend> backend;
  std::unique_ptr<GptModel> model;     // sized for one sequence
  std::optional<Tokenizer> tokenizer;  // absent for token-shard models
  std::string checkpoint_path;
};

// `dir` is one checkpoint (it holds meta.json) or a checkpoint root (the
// newest readable checkpoint in it). FAILED_PRECONDITION when it is not a
// GPT checkpoint; the checkpoint reader's errors otherwise.
absl::StatusOr<LoadedGpt> LoadGptCheckpoint(const std::string& dir,
                                            int threads);

// Writes the checkpoint at `checkpoint_dir` (as LoadGptCheckpoint finds
// it) as a Hugging Face GPT-2 folder at `out_dir`, which must not exist or
// be an empty folder: ALREADY_EXISTS otherwise, before anything is read or
// written (an export never mixes its files with others, nor replaces a
// model). LoadGptCheckpoint's errors.
absl::Status ExportGptCheckpoint(const std::string& checkpoint_dir,
                                 const std::string& out_dir);

// Copies the weights of `hf` (an imported folder, or a checkpoint's) into
// `model`. INVALID_ARGUMENT naming the field and `source` ("init_from",
// "warm_start") when the sizes differ from the model's.
absl::Status LoadHfWeights(const HfGpt2& hf, absl::string_view source,
                           GptModel* model, Backend* backend);

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_GPT_TOOLS_H_
