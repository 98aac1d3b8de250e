// Loading, exporting and importing trained GPTs. See gpt_tools.h.
#include "engine/gpt_tools.h"

#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/core/checkpoint.h"
#include "engine/core/model_weights.h"

namespace trainyard::engine {
namespace {

absl::StatusOr<GptConfig> CheckpointGptConfig(const std::string& path,
                                              const Checkpoint& ckpt) {
  absl::StatusOr<GptConfig> config = GptConfigFromDescription(ckpt.meta.model);
  if (!config.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": not a GPT checkpoint (", config.status().message(), ")"));
  }
  return config;
}

// `dir` is absent or an empty folder.
absl::Status CheckNewFolder(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code error;
  const bool exists = fs::exists(dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, ": ", error.message()));
  }
  if (!exists || (fs::is_directory(dir, error) && fs::is_empty(dir, error))) {
    return absl::OkStatus();
  }
  return absl::AlreadyExistsError(
      absl::StrCat(dir, " already exists: name a new or empty folder"));
}

}  // namespace

absl::Status LoadHfWeights(const HfGpt2& hf, absl::string_view source,
                           GptModel* model, Backend* backend) {
  const GptConfig& want = model->config();
  const GptConfig& got = hf.config;
  for (auto [name, a, b] :
       {std::tuple{"n_layer", want.n_layer, got.n_layer},
        std::tuple{"n_head", want.n_head, got.n_head},
        std::tuple{"d_model", want.d_model, got.d_model},
        std::tuple{"seq_len", want.seq_len, got.seq_len},
        std::tuple{"vocab_size", want.vocab_size, got.vocab_size}}) {
    if (a != b) {
      return absl::InvalidArgumentError(absl::StrCat("model.gpt.", name, ": ",
                                                     a, " differs from the ",
                                                     source, " model's ", b));
    }
  }
  return CopyWeightsInto(hf.params, source, model, backend);
}

absl::StatusOr<LoadedGpt> LoadGptCheckpoint(const std::string& dir,
                                            int threads) {
  ASSIGN_OR_RETURN(auto found, ReadCheckpointOrNewest(dir));
  auto& [path, ckpt] = found;
  ASSIGN_OR_RETURN(GptConfig config, CheckpointGptConfig(path, ckpt));
  LoadedGpt out;
  out.checkpoint_path = path;
  if (ckpt.meta.tokenizer.type() != Json::Type::kNull) {
    absl::StatusOr<Tokenizer> tok = Tokenizer::FromJson(ckpt.meta.tokenizer);
    if (!tok.ok()) {
      return absl::DataLossError(
          absl::StrCat(path, ": ", tok.status().message()));
    }
    out.tokenizer = *std::move(tok);
  }
  CpuBackendOptions options;
  options.threads = threads;
  ASSIGN_OR_RETURN(out.backend, CpuBackend::Create(options));
  ASSIGN_OR_RETURN(out.model, GptModel::Create(config, 1, out.backend.get()));
  HfGpt2 weights{config, std::move(ckpt.tensors), Json()};
  RETURN_IF_ERROR(
      LoadHfWeights(weights, path, out.model.get(), out.backend.get()));
  return out;
}

absl::Status ExportGptCheckpoint(const std::string& checkpoint_dir,
                                 const std::string& out_dir) {
  RETURN_IF_ERROR(CheckNewFolder(out_dir));
  ASSIGN_OR_RETURN(auto found, ReadCheckpointOrNewest(checkpoint_dir));
  auto& [path, ckpt] = found;
  ASSIGN_OR_RETURN(GptConfig config, CheckpointGptConfig(path, ckpt));
  return WriteHfGpt2(out_dir, config, ckpt.tensors, ckpt.meta.tokenizer);
}

}  // namespace trainyard::engine
