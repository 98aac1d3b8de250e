// See checkpoint_match.h.
#include "engine/checkpoint_match.h"

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/read_file.h"
#include "common/status_macros.h"
#include "engine/core/checkpoint.h"
#include "engine/core/gpt.h"
#include "engine/core/json.h"
#include "engine/core/tensor.h"

namespace trainyard::engine {
namespace {

struct FoundMeta {
  std::string path;
  Json json;
  CheckpointMeta meta;
};

// The newest checkpoint whose meta.json reads cleanly; one that does not is
// skipped here as the trainer skips it.
absl::StatusOr<std::optional<FoundMeta>> NewestMeta(const std::string& root) {
  ASSIGN_OR_RETURN(std::vector<CheckpointEntry> entries, ListCheckpoints(root));
  for (const CheckpointEntry& e : entries) {
    absl::StatusOr<std::string> text =
        ReadWholeFile(absl::StrCat(e.path, "/", kCheckpointMetaFile),
                      kMaxCheckpointMetaBytes);
    if (!text.ok()) continue;
    absl::StatusOr<CheckpointMeta> meta = ReadCheckpointMeta(*text);
    absl::StatusOr<Json> json = ParseJson(*text);
    if (!meta.ok() || !json.ok()) continue;
    return FoundMeta{e.path, *std::move(json), *std::move(meta)};
  }
  return std::nullopt;
}

// "model.gpt.n_layer is 1 there, 2 in this spec; ..." for the GPT sizes that
// differ; "" when they agree or either side has no GPT description.
std::string GptSizesDiffer(const Json& there, const GptConfig& here,
                           bool is_gpt) {
  absl::StatusOr<GptConfig> theirs = GptConfigFromDescription(there);
  if (!is_gpt || !theirs.ok()) return "";
  std::vector<std::string> parts;
  for (auto [name, a, b] :
       {std::tuple{"n_layer", theirs->n_layer, here.n_layer},
        std::tuple{"n_head", theirs->n_head, here.n_head},
        std::tuple{"d_model", theirs->d_model, here.d_model},
        std::tuple{"seq_len", theirs->seq_len, here.seq_len},
        std::tuple{"vocab_size", theirs->vocab_size, here.vocab_size}}) {
    if (a != b) {
      parts.push_back(
          absl::StrCat("model.gpt.", name, " is ", a, " there, ", b, " here"));
    }
  }
  return absl::StrJoin(parts, ", ");
}

// The first of this model's tensors that the checkpoint lacks or holds in
// another shape, or one it holds that this model has none of (an MLP of
// more layers); "" when the weights agree.
std::string TensorsDiffer(const Json& meta,
                          const std::vector<Parameter>& parameters) {
  std::map<std::string, Shape> theirs;
  if (const Json* list = meta.Find("tensors");
      list != nullptr && list->is_array()) {
    for (const Json& t : list->array()) {
      const Json* name = t.Find("name");
      const Json* shape = t.Find("shape");
      if (name == nullptr || shape == nullptr || !shape->is_array()) continue;
      absl::StatusOr<std::string> n = name->AsString("name");
      if (!n.ok()) continue;
      Shape s;
      for (const Json& d : shape->array())
        s.push_back(d.AsInt("dim").value_or(-1));
      theirs[*n] = s;
    }
  }
  for (const Parameter& p : parameters) {
    auto it = theirs.find(p.name);
    if (it == theirs.end()) {
      return absl::StrCat("tensor ", p.name,
                          " of this spec's model is not there");
    }
    if (it->second != p.shape) {
      return absl::StrCat("tensor ", p.name, " has shape ",
                          ShapeString(it->second), " there, ",
                          ShapeString(p.shape), " in this spec's model");
    }
    theirs.erase(it);
  }
  for (const auto& [name, shape] : theirs) {
    // Optimizer moments are named after their parameters.
    bool moment = false;
    for (const Parameter& p : parameters) {
      if (name.size() > p.name.size() &&
          name.compare(name.size() - p.name.size(), p.name.size(), p.name) ==
              0) {
        moment = true;
        break;
      }
    }
    if (!moment) {
      return absl::StrCat("it holds tensor ", name, " ", ShapeString(shape),
                          ", which this spec's model has none of");
    }
  }
  return "";
}

}  // namespace

absl::Status CheckCheckpointMatchesSpec(
    const EngineJob& job, const std::vector<Parameter>& parameters,
    int world_size) {
  const TrainerConfig& t = job.trainer;
  if (t.checkpoint.dir.empty() || t.fingerprint.empty()) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::optional<FoundMeta> found,
                   NewestMeta(t.checkpoint.dir));
  if (!found.has_value()) return absl::OkStatus();
  if (found->meta.fingerprint == t.fingerprint) {
    const int64_t theirs = found->meta.world_size;
    if (theirs == 0 || theirs == world_size) return absl::OkStatus();
    const int64_t per_rank = t.micro_batch * t.grad_accum;
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint.dir: ", found->path, " was written by a run of ", theirs,
        " data-parallel ranks (a global batch of ", per_rank * theirs,
        " examples), this one has ", world_size, " (", per_rank * world_size,
        "): resuming would change the global batch mid-run. Run it with ",
        theirs, " ranks, or start a new checkpoint dir with --warm-start ",
        found->path));
  }
  std::string what = GptSizesDiffer(found->meta.model, job.gpt, job.is_gpt);
  if (what.empty() && !parameters.empty()) {
    what = TensorsDiffer(found->json, parameters);
  }
  if (what.empty() && parameters.empty()) {
    what = absl::StrCat("it was written for another spec (fingerprint ",
                        found->meta.fingerprint, " there, ", t.fingerprint,
                        " here)");
  } else if (what.empty()) {
    what = absl::StrCat(
        "the model's shape agrees, but its data, optimizer, batch, steps, "
        "precision, seed or warm_start differ (spec fingerprint ",
        found->meta.fingerprint, " there, ", t.fingerprint, " here)");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "checkpoint.dir: ", found->path,
      " does not match the spec, so the run cannot resume from it: ", what,
      "; give another checkpoint dir (nothing in this one was changed)"));
}

}  // namespace trainyard::engine
