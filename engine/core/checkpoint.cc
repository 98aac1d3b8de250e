// Checkpoint directories: atomic write, strict read, listing and pruning.
// See checkpoint.h.
#include "engine/core/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/core/file_io.h"
#include "engine/core/json.h"
#include "engine/core/safetensors.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;

std::string JoinPath(const std::string& dir, absl::string_view name) {
  return (fs::path(dir) / std::string(name)).string();
}

Json TensorList(const std::vector<HostTensor>& tensors) {
  Json list = Json::MakeArray();
  for (const HostTensor& t : tensors) {
    Json shape = Json::MakeArray();
    for (int64_t d : t.shape) shape.Append(Json::Int(d));
    list.Append(Json::MakeObject({{"name", Json::String(t.name)},
                                  {"dtype", Json::String("F32")},
                                  {"shape", std::move(shape)}}));
  }
  return list;
}

std::string MetaJson(const Checkpoint& ckpt,
                     const SafetensorsWriteResult& file) {
  const CheckpointMeta& m = ckpt.meta;
  Json meta = Json::MakeObject();
  meta.Set("magic", Json::String(kCheckpointMagic));
  meta.Set("version", Json::Int(kCheckpointVersion));
  meta.Set("step", Json::Int(m.step));
  meta.Set("rng", Json::MakeObject({{"algorithm", Json::String("xoshiro256**")},
                                    {"state", Json::String(m.rng_state)}}));
  meta.Set("data_cursor",
           Json::MakeObject({{"epoch", Json::Int(m.cursor.epoch)},
                             {"position", Json::Int(m.cursor.position)}}));
  meta.Set("spec_fingerprint", Json::String(m.fingerprint));
  meta.Set("tensors_file",
           Json::MakeObject(
               {{"name", Json::String(kCheckpointTensorsFile)},
                {"bytes", Json::Int(file.bytes)},
                {"crc32", Json::String(absl::StrFormat("%08x", file.crc32))}}));
  if (m.model.type() != Json::Type::kNull) meta.Set("model", m.model);
  if (m.world_size > 0) meta.Set("world_size", Json::Int(m.world_size));
  if (m.tokenizer.type() != Json::Type::kNull) {
    meta.Set("tokenizer", m.tokenizer);
  }
  if (m.early_stopping.has_value() && m.early_stopping->best_step >= 0) {
    meta.Set("early_stopping",
             Json::MakeObject(
                 {{"best_loss", Json::Number(m.early_stopping->best_loss)},
                  {"best_step", Json::Int(m.early_stopping->best_step)},
                  {"evals_since_best",
                   Json::Int(m.early_stopping->evals_since_best)}}));
  }
  // JSON has no NaN or infinity: figures that are not finite are left out
  // (a resumed run then reports as an older checkpoint's would).
  if (m.figures.has_value() && std::isfinite(m.figures->train_loss) &&
      std::isfinite(m.figures->eval_loss) &&
      std::isfinite(m.figures->eval_accuracy) &&
      std::isfinite(m.figures->window_loss_sum)) {
    meta.Set(
        "figures",
        Json::MakeObject(
            {{"train_loss", Json::Number(m.figures->train_loss)},
             {"eval_loss", Json::Number(m.figures->eval_loss)},
             {"eval_accuracy", Json::Number(m.figures->eval_accuracy)},
             {"eval_examples", Json::Int(m.figures->eval_examples)},
             {"window_loss_sum", Json::Number(m.figures->window_loss_sum)},
             {"window_loss_terms", Json::Int(m.figures->window_loss_terms)}}));
  }
  meta.Set("tensors", TensorList(ckpt.tensors));
  return meta.Serialize() + "\n";
}

// figures.window_loss_sum and window_loss_terms: both or neither (older
// checkpoints have neither).
absl::Status ParseLossWindow(const Json& figures, StepFigures* out) {
  const Json* sum = figures.Find("window_loss_sum");
  const Json* terms = figures.Find("window_loss_terms");
  if (sum == nullptr && terms == nullptr) return absl::OkStatus();
  if (sum == nullptr || terms == nullptr) {
    return absl::DataLossError(
        "figures: window_loss_sum and window_loss_terms come together");
  }
  ASSIGN_OR_RETURN(out->window_loss_sum,
                   sum->AsNumber("figures.window_loss_sum"));
  ASSIGN_OR_RETURN(out->window_loss_terms,
                   terms->AsInt("figures.window_loss_terms"));
  if (out->window_loss_terms < 0) {
    return absl::DataLossError("figures.window_loss_terms is negative");
  }
  return absl::OkStatus();
}

struct ParsedMeta {
  CheckpointMeta meta;
  int64_t file_bytes = 0;
  std::string file_crc;
  std::vector<std::pair<std::string, Shape>> tensors;
};

absl::Status ParseTensorList(const Json& list, ParsedMeta* out) {
  if (!list.is_array()) return absl::DataLossError("`tensors` is not a list");
  for (const Json& t : list.array()) {
    ASSIGN_OR_RETURN(const Json* name, RequireField(t, "name"));
    ASSIGN_OR_RETURN(std::string n, name->AsString("tensors[].name"));
    ASSIGN_OR_RETURN(const Json* shape, RequireField(t, "shape"));
    if (!shape->is_array()) return absl::DataLossError("tensors[].shape");
    Shape s;
    for (const Json& d : shape->array()) {
      ASSIGN_OR_RETURN(int64_t dim, d.AsInt("tensors[].shape"));
      s.push_back(dim);
    }
    out->tensors.emplace_back(std::move(n), std::move(s));
  }
  return absl::OkStatus();
}

absl::StatusOr<ParsedMeta> ParseMeta(absl::string_view text) {
  ASSIGN_OR_RETURN(Json j, ParseJson(text));
  if (!j.is_object()) return absl::DataLossError("not a JSON object");
  ParsedMeta out;
  ASSIGN_OR_RETURN(const Json* magic, RequireField(j, "magic"));
  if (!magic->is_string() || *magic->AsString("magic") != kCheckpointMagic) {
    return absl::DataLossError(
        absl::StrCat("magic is not \"", kCheckpointMagic, "\""));
  }
  ASSIGN_OR_RETURN(const Json* version, RequireField(j, "version"));
  ASSIGN_OR_RETURN(int64_t v, version->AsInt("version"));
  if (v != kCheckpointVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "version ", v, " is not supported (this engine reads version ",
        kCheckpointVersion, ")"));
  }
  ASSIGN_OR_RETURN(const Json* step, RequireField(j, "step"));
  ASSIGN_OR_RETURN(out.meta.step, step->AsInt("step"));
  ASSIGN_OR_RETURN(const Json* rng, RequireField(j, "rng"));
  ASSIGN_OR_RETURN(const Json* rng_state, RequireField(*rng, "state"));
  ASSIGN_OR_RETURN(out.meta.rng_state, rng_state->AsString("rng.state"));
  ASSIGN_OR_RETURN(const Json* cursor, RequireField(j, "data_cursor"));
  ASSIGN_OR_RETURN(const Json* epoch, RequireField(*cursor, "epoch"));
  ASSIGN_OR_RETURN(out.meta.cursor.epoch, epoch->AsInt("data_cursor.epoch"));
  ASSIGN_OR_RETURN(const Json* pos, RequireField(*cursor, "position"));
  ASSIGN_OR_RETURN(out.meta.cursor.position,
                   pos->AsInt("data_cursor.position"));
  if (out.meta.step < 0 || out.meta.cursor.epoch < 0 ||
      out.meta.cursor.position < 0) {
    return absl::DataLossError("negative step or data cursor");
  }
  ASSIGN_OR_RETURN(const Json* fp, RequireField(j, "spec_fingerprint"));
  ASSIGN_OR_RETURN(out.meta.fingerprint, fp->AsString("spec_fingerprint"));
  ASSIGN_OR_RETURN(const Json* file, RequireField(j, "tensors_file"));
  ASSIGN_OR_RETURN(const Json* bytes, RequireField(*file, "bytes"));
  ASSIGN_OR_RETURN(out.file_bytes, bytes->AsInt("tensors_file.bytes"));
  ASSIGN_OR_RETURN(const Json* crc, RequireField(*file, "crc32"));
  ASSIGN_OR_RETURN(out.file_crc, crc->AsString("tensors_file.crc32"));
  if (const Json* model = j.Find("model")) out.meta.model = *model;
  if (const Json* world = j.Find("world_size")) {
    ASSIGN_OR_RETURN(out.meta.world_size, world->AsInt("world_size"));
    if (out.meta.world_size < 1) {
      return absl::DataLossError(
          absl::StrCat("world_size ", out.meta.world_size, " is below 1"));
    }
  }
  if (const Json* tok = j.Find("tokenizer")) out.meta.tokenizer = *tok;
  if (const Json* es = j.Find("early_stopping")) {
    EarlyStoppingState state;
    ASSIGN_OR_RETURN(const Json* loss, RequireField(*es, "best_loss"));
    ASSIGN_OR_RETURN(state.best_loss,
                     loss->AsNumber("early_stopping.best_loss"));
    ASSIGN_OR_RETURN(const Json* best, RequireField(*es, "best_step"));
    ASSIGN_OR_RETURN(state.best_step, best->AsInt("early_stopping.best_step"));
    ASSIGN_OR_RETURN(const Json* since, RequireField(*es, "evals_since_best"));
    ASSIGN_OR_RETURN(state.evals_since_best,
                     since->AsInt("early_stopping.evals_since_best"));
    if (state.best_step < 0 || state.best_step > out.meta.step ||
        state.evals_since_best < 0) {
      return absl::DataLossError(
          "early_stopping: a best step outside the run or a negative count");
    }
    out.meta.early_stopping = state;
  }
  if (const Json* f = j.Find("figures")) {
    StepFigures figures;
    for (auto [name, field] :
         {std::pair{"train_loss", &figures.train_loss},
          std::pair{"eval_loss", &figures.eval_loss},
          std::pair{"eval_accuracy", &figures.eval_accuracy}}) {
      ASSIGN_OR_RETURN(const Json* v, RequireField(*f, name));
      ASSIGN_OR_RETURN(*field, v->AsNumber(absl::StrCat("figures.", name)));
    }
    ASSIGN_OR_RETURN(const Json* n, RequireField(*f, "eval_examples"));
    ASSIGN_OR_RETURN(figures.eval_examples, n->AsInt("figures.eval_examples"));
    RETURN_IF_ERROR(ParseLossWindow(*f, &figures));
    out.meta.figures = figures;
  }
  ASSIGN_OR_RETURN(const Json* tensors, RequireField(j, "tensors"));
  RETURN_IF_ERROR(ParseTensorList(*tensors, &out));
  return out;
}

// Checks the tensor file against what meta.json promised. By name through
// a map: a hostile file may list hundreds of thousands of tensors.
absl::Status CheckAgainstMeta(const ParsedMeta& meta,
                              const std::vector<HostTensor>& tensors) {
  if (meta.tensors.size() != tensors.size()) {
    return absl::DataLossError(absl::StrCat("holds ", tensors.size(),
                                            " tensors, meta.json lists ",
                                            meta.tensors.size()));
  }
  std::map<absl::string_view, const HostTensor*> by_name;
  for (const HostTensor& t : tensors) by_name[t.name] = &t;
  for (const auto& [name, shape] : meta.tensors) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return absl::DataLossError(absl::StrCat("tensor ", name, " is missing"));
    }
    if (it->second->shape != shape) {
      return absl::DataLossError(absl::StrCat(
          "tensor ", name, " has shape ", ShapeString(it->second->shape),
          ", meta.json says ", ShapeString(shape)));
    }
  }
  return absl::OkStatus();
}

// Prefixes a status message with the file it is about.
absl::Status InFile(const std::string& file, const absl::Status& s) {
  if (s.ok() || absl::StartsWith(s.message(), file)) return s;
  return absl::Status(s.code(), absl::StrCat(file, ": ", s.message()));
}

// A checkpoint's files are written by WriteCheckpoint, never as links; one
// that is a link was planted, and could lead anywhere.
absl::Status RefuseSymlink(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": is a symlink; checkpoint files never are"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ParsedMeta> ParseMetaFile(absl::string_view text,
                                         const std::string& dir,
                                         const std::string& meta_path) {
  absl::StatusOr<ParsedMeta> meta = ParseMeta(text);
  if (!meta.ok()) {
    absl::Status s = meta.status();
    if (s.code() == absl::StatusCode::kInvalidArgument) {
      s = absl::DataLossError(s.message());  // malformed file, not bad input
    }
    return InFile(meta_path, s);
  }
  const int64_t dir_step = StepFromDirName(fs::path(dir).filename().string());
  if (dir_step >= 0 && dir_step != meta->meta.step) {
    return absl::DataLossError(
        absl::StrCat(meta_path, ": step ", meta->meta.step,
                     " does not match the directory name"));
  }
  return meta;
}

// The tensor file's bytes against meta.json: size, CRC, then contents.
absl::StatusOr<Checkpoint> VerifyTensors(const ParsedMeta& meta,
                                         absl::string_view bytes,
                                         const std::string& tensors_path) {
  if (static_cast<int64_t>(bytes.size()) != meta.file_bytes) {
    return absl::DataLossError(absl::StrCat(
        tensors_path, ": ",
        static_cast<int64_t>(bytes.size()) < meta.file_bytes ? "truncated"
                                                             : "corrupt",
        ": ", bytes.size(), " bytes, meta.json says ", meta.file_bytes));
  }
  const std::string crc = absl::StrFormat("%08x", Crc32(0, bytes));
  if (crc != meta.file_crc) {
    return absl::DataLossError(absl::StrCat(tensors_path, ": corrupt: CRC-32 ",
                                            crc, ", meta.json says ",
                                            meta.file_crc));
  }
  Checkpoint out;
  ASSIGN_OR_RETURN(out.tensors, ParseSafetensors(bytes, tensors_path));
  RETURN_IF_ERROR(InFile(tensors_path, CheckAgainstMeta(meta, out.tensors)));
  out.meta = meta.meta;
  return out;
}

}  // namespace

namespace {

// ParseMeta with its errors named after meta.json: a newer format keeps
// its code, anything else is a broken file.
absl::StatusOr<ParsedMeta> ParseMetaJson(absl::string_view meta_json) {
  absl::StatusOr<ParsedMeta> meta = ParseMeta(meta_json);
  if (meta.ok()) return meta;
  return absl::Status(absl::IsFailedPrecondition(meta.status())
                          ? meta.status().code()
                          : absl::StatusCode::kDataLoss,
                      absl::StrCat("meta.json: ", meta.status().message()));
}

}  // namespace

absl::StatusOr<CheckpointMeta> ReadCheckpointMeta(absl::string_view meta_json) {
  ASSIGN_OR_RETURN(ParsedMeta meta, ParseMetaJson(meta_json));
  return std::move(meta.meta);
}

absl::StatusOr<TensorsFileRecord> ReadTensorsFileRecord(
    absl::string_view meta_json) {
  ASSIGN_OR_RETURN(ParsedMeta meta, ParseMetaJson(meta_json));
  TensorsFileRecord out;
  out.step = meta.meta.step;
  out.bytes = meta.file_bytes;
  if (meta.file_crc.size() != 8 ||
      !absl::SimpleHexAtoi(meta.file_crc, &out.crc32)) {
    return absl::DataLossError(absl::StrCat("meta.json: tensors_file.crc32 \"",
                                            meta.file_crc,
                                            "\" is not 8 hex digits"));
  }
  return out;
}

int64_t StepFromDirName(absl::string_view name) {
  if (!absl::StartsWith(name, "step-") || name.size() == 5) return -1;
  int64_t step = -1;
  for (char c : name.substr(5)) {
    if (c < '0' || c > '9') return -1;
  }
  if (!absl::SimpleAtoi(name.substr(5), &step)) return -1;
  return step;
}

std::string CheckpointDirName(int64_t step) {
  return absl::StrFormat("step-%08d", step);
}

namespace {

// ".<16 hex digits>": names this write's own folders apart from any other
// writer's, on this host or another sharing the root.
std::string WriteSuffix() {
  static thread_local std::mt19937_64 bits{std::random_device{}()};
  return absl::StrFormat(".%016x", bits());
}

// Renames the folder `path` in `root` to a name of this call's own
// (.old-step-aside.<random>), which no other writer or pruner touches, and
// returns that name; nullopt when `path` is not there (never was, or
// another writer or pruner moved it first). Renaming is atomic, so a
// folder another writer is putting back at `path` meanwhile is never
// half-deleted. The name keeps the .old-step- prefix: if the caller dies
// before deleting it, a later prune clears it.
absl::StatusOr<std::optional<std::string>> MoveAside(const std::string& root,
                                                     const std::string& path) {
  const std::string aside = JoinPath(root, ".old-step-aside" + WriteSuffix());
  std::error_code ec;
  fs::rename(path, aside, ec);
  if (ec == std::errc::no_such_file_or_directory) return std::nullopt;
  if (ec) {
    return absl::InternalError(
        absl::StrCat(path, ": cannot move aside: ", ec.message()));
  }
  return aside;
}

// Deletes a folder MoveAside returned. Another pruner may find it stale
// and take it first: no error then.
absl::Status RemoveAside(const std::optional<std::string>& aside) {
  if (!aside.has_value()) return absl::OkStatus();
  absl::Status removed = RemoveTree(*aside);
  return removed.code() == absl::StatusCode::kNotFound ? absl::OkStatus()
                                                       : removed;
}

// Puts tmp in place as `final_path`. The checkpoint already there (if any)
// is moved aside first and deleted only once tmp is in place; when the
// rename fails for another reason than a race, it goes back. Another
// writer may put the same step in place between the two renames; then
// the move aside is tried again.
absl::Status PutInPlace(const std::string& root, const std::string& tmp,
                        const std::string& final_path) {
  const auto CannotRename = [&](const std::error_code& ec) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ",
                                            final_path, ": ", ec.message()));
  };
  for (int attempt = 0;; ++attempt) {
    ASSIGN_OR_RETURN(std::optional<std::string> aside,
                     MoveAside(root, final_path));
    std::error_code ec;
    fs::rename(tmp, final_path, ec);
    if (!ec) return RemoveAside(aside);
    if (!fs::exists(final_path)) {  // not a race: restore, then fail
      std::error_code ignored;
      if (aside.has_value()) fs::rename(*aside, final_path, ignored);
      return CannotRename(ec);
    }
    // Another writer's copy of the step is in place.
    RETURN_IF_ERROR(RemoveAside(aside));
    if (attempt == 2) {
      return CannotRename(ec);
    }
  }
}

}  // namespace

absl::StatusOr<std::string> WriteCheckpoint(const std::string& root,
                                            const Checkpoint& checkpoint) {
  RETURN_IF_ERROR(MakeDirectories(root));
  const std::string name = CheckpointDirName(checkpoint.meta.step);
  const std::string tmp = JoinPath(root, ".tmp-" + name + WriteSuffix());
  const std::string final_path = JoinPath(root, name);
  absl::Status written = [&]() -> absl::Status {
    RETURN_IF_ERROR(MakeDirectories(tmp));
    ASSIGN_OR_RETURN(SafetensorsWriteResult file,
                     WriteSafetensors(JoinPath(tmp, kCheckpointTensorsFile),
                                      checkpoint.tensors));
    RETURN_IF_ERROR(WriteFileDurably(JoinPath(tmp, kCheckpointMetaFile),
                                     MetaJson(checkpoint, file)));
    RETURN_IF_ERROR(SyncDirectory(tmp));
    RETURN_IF_ERROR(PutInPlace(root, tmp, final_path));
    return SyncDirectory(root);
  }();
  if (!written.ok()) {
    RemoveTree(tmp).IgnoreError();  // best effort: the error says more
    return written;
  }
  return final_path;
}

absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path) {
  const std::string meta_path = JoinPath(path, kCheckpointMetaFile);
  const std::string tensors_path = JoinPath(path, kCheckpointTensorsFile);
  RETURN_IF_ERROR(RefuseSymlink(meta_path));
  absl::StatusOr<std::string> meta_text =
      ReadWholeFile(meta_path, kMaxCheckpointMetaBytes);
  if (!meta_text.ok()) return InFile(meta_path, meta_text.status());
  // meta.json first: a bad one is reported without reading the big file.
  ASSIGN_OR_RETURN(ParsedMeta meta, ParseMetaFile(*meta_text, path, meta_path));
  RETURN_IF_ERROR(RefuseSymlink(tensors_path));
  absl::StatusOr<std::string> bytes =
      ReadWholeFile(tensors_path, kMaxCheckpointTensorsBytes);
  if (!bytes.ok()) return InFile(tensors_path, bytes.status());
  return VerifyTensors(meta, *bytes, tensors_path);
}

absl::StatusOr<Checkpoint> ParseCheckpoint(absl::string_view meta_json,
                                           absl::string_view tensors,
                                           const std::string& dir) {
  const std::string meta_path = JoinPath(dir, kCheckpointMetaFile);
  if (static_cast<int64_t>(meta_json.size()) > kMaxCheckpointMetaBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        meta_path, ": ", meta_json.size(), " bytes, more than the limit of ",
        kMaxCheckpointMetaBytes));
  }
  ASSIGN_OR_RETURN(ParsedMeta meta, ParseMetaFile(meta_json, dir, meta_path));
  return VerifyTensors(meta, tensors, JoinPath(dir, kCheckpointTensorsFile));
}

absl::StatusOr<std::vector<CheckpointEntry>> ListCheckpoints(
    const std::string& root) {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  if (!fs::exists(root, ec)) return out;
  fs::directory_iterator it(root, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat(root, ": cannot list: ", ec.message()));
  }
  for (const fs::directory_entry& e : it) {
    const int64_t step = StepFromDirName(e.path().filename().string());
    // symlink_status: a link named step-* is not followed anywhere.
    if (step >= 0 && fs::is_directory(e.symlink_status(ec))) {
      out.push_back({step, e.path().string()});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointEntry& a, const CheckpointEntry& b) {
              return a.step > b.step;
            });
  return out;
}

namespace {

// Removes `path` (a folder in `root`) without racing the other writers and
// pruners of the root: moved aside first, then deleted. Removing it in
// place could meet a writer putting the same step back ("not empty").
absl::Status RemoveUnlessGone(const std::string& root,
                              const std::string& path) {
  ASSIGN_OR_RETURN(std::optional<std::string> aside, MoveAside(root, path));
  return RemoveAside(aside);
}

}  // namespace

absl::Status PruneCheckpoints(const std::string& root, int keep_last,
                              int64_t also_keep_step) {
  ASSIGN_OR_RETURN(std::vector<CheckpointEntry> all, ListCheckpoints(root));
  for (size_t i = static_cast<size_t>(std::max(keep_last, 1)); i < all.size();
       ++i) {
    if (all[i].step == also_keep_step) continue;
    RETURN_IF_ERROR(RemoveUnlessGone(root, all[i].path));
  }
  std::error_code ec;
  const fs::file_time_type stale_before =
      fs::file_time_type::clock::now() -
      std::chrono::seconds(kStaleWriteSeconds);
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (!absl::StartsWith(name, ".tmp-step-") &&
        !absl::StartsWith(name, ".old-step-")) {
      continue;
    }
    std::error_code time_ec;
    const fs::file_time_type written = fs::last_write_time(e.path(), time_ec);
    // Gone meanwhile (its writer finished), or still someone's: keep.
    if (time_ec || written > stale_before) continue;
    RETURN_IF_ERROR(RemoveUnlessGone(root, e.path().string()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<LatestCheckpoint>> ReadLatestCheckpoint(
    const std::string& root) {
  ASSIGN_OR_RETURN(std::vector<CheckpointEntry> all, ListCheckpoints(root));
  std::vector<std::string> skipped;
  for (const CheckpointEntry& e : all) {
    absl::StatusOr<Checkpoint> ckpt = ReadCheckpoint(e.path);
    if (ckpt.ok()) {
      return LatestCheckpoint{e.path, *std::move(ckpt), std::move(skipped)};
    }
    skipped.push_back(std::string(ckpt.status().message()));
  }
  if (!skipped.empty()) {
    return absl::DataLossError(absl::StrCat("no readable checkpoint in ", root,
                                            ": ",
                                            absl::StrJoin(skipped, "; ")));
  }
  return std::nullopt;
}

absl::StatusOr<std::pair<std::string, Checkpoint>> ReadCheckpointOrNewest(
    const std::string& dir) {
  if (std::filesystem::exists(std::filesystem::path(dir) /
                              kCheckpointMetaFile)) {
    ASSIGN_OR_RETURN(Checkpoint ckpt, ReadCheckpoint(dir));
    return std::pair{dir, std::move(ckpt)};
  }
  ASSIGN_OR_RETURN(std::optional<LatestCheckpoint> latest,
                   ReadLatestCheckpoint(dir));
  if (!latest.has_value()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint in ", dir));
  }
  return std::pair{latest->path, std::move(latest->checkpoint)};
}

}  // namespace trainyard::engine
