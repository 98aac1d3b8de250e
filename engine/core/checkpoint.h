// Checkpoints on disk. A checkpoint is a directory `step-00001234/` inside a
// checkpoint root holding
//   model.safetensors  weights and optimizer moments as named F32 tensors
//   meta.json          {"magic": "trainyard-checkpoint", "version": 1, step,
//                       RNG state, data cursor, spec fingerprint, the tensor
//                       list, the byte size + CRC-32 of model.safetensors,
//                       and, for language models, "model" (kind and sizes)
//                       and "tokenizer", so a checkpoint alone is enough to
//                       sample from or export}
// A checkpoint is written into a temp dir, every file and the dir are
// fsynced, then the dir is renamed into place, so a crash leaves either the
// old set or the new one, never a half-written checkpoint under a step name.
// Reading checks everything and rejects truncated or corrupt files with an
// error naming the file and the problem.
//
// Thread-safety: functions are safe to call concurrently on different roots;
// one writer per root at a time.
#ifndef TRAINYARD_ENGINE_CORE_CHECKPOINT_H_
#define TRAINYARD_ENGINE_CORE_CHECKPOINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/batch.h"
#include "engine/core/early_stopping.h"
#include "engine/core/json.h"
#include "engine/core/tensor.h"

namespace trainyard::engine {

inline constexpr char kCheckpointMagic[] = "trainyard-checkpoint";
inline constexpr int kCheckpointVersion = 1;
inline constexpr char kCheckpointTensorsFile[] = "model.safetensors";
inline constexpr char kCheckpointMetaFile[] = "meta.json";
// The largest files a checkpoint is read with. meta.json holds the tensor
// list (tens of bytes per tensor) and at most a char tokenizer's vocabulary
// (under 10 MB for all of Unicode).
inline constexpr int64_t kMaxCheckpointMetaBytes = int64_t{16} << 20;
inline constexpr int64_t kMaxCheckpointTensorsBytes = int64_t{64} << 30;

// What a run that ends at the checkpoint's step reports, so that one
// resumed at its last step ends with a straight run's figures (and does not
// count that step's evaluation twice), and the train loss of the progress
// report under way, so that one resumed between two reports makes the
// straight run's next report.
struct StepFigures {
  double train_loss = 0;  // the loss the run would report as its last
  // The evaluation made at this step, if one was (eval_examples > 0).
  double eval_loss = 0;
  double eval_accuracy = 0;
  int64_t eval_examples = 0;
  // The loss summed over the steps since the last progress report, and the
  // loss terms (examples or predicted tokens) it sums. Both 0 on a report's
  // step, and in checkpoints written before they were kept: a run resumed
  // from one of those averages its next report over the steps since the
  // resume only.
  double window_loss_sum = 0;
  int64_t window_loss_terms = 0;
};

struct CheckpointMeta {
  int64_t step = 0;
  std::string rng_state;  // Rng::SerializeState()
  DataCursor cursor;
  // Identifies the configuration that produced it; resume refuses a
  // checkpoint with a different fingerprint.
  std::string fingerprint;
  // Optional descriptions (null when absent): the model's kind and sizes,
  // e.g. {"kind": "gpt", "n_layer": 4, ...}, and the tokenizer's JSON.
  Json model;
  Json tokenizer;
  // The early stopping's state (eval.patience), when it has seen an
  // evaluation; absent otherwise, and in checkpoints of runs without it.
  std::optional<EarlyStoppingState> early_stopping;
  // Absent in checkpoints written before it was kept.
  std::optional<StepFigures> figures;
  // The data-parallel ranks of the run that wrote it (their global batch is
  // micro_batch x grad_accum x world_size); 0 in checkpoints written before
  // it was kept.
  int64_t world_size = 0;
};

struct Checkpoint {
  CheckpointMeta meta;
  std::vector<HostTensor> tensors;
};

// "step-00001234"
std::string CheckpointDirName(int64_t step);
// The step of a checkpoint directory's name ("step-<digits>"); -1 for any
// other name.
int64_t StepFromDirName(absl::string_view name);

// Writes root/step-NNNNNNNN atomically (creating root if needed) and returns
// its path. An existing checkpoint of the same step is replaced. The files
// are written in a folder of the write's own (.tmp-step-NNNNNNNN.<random>)
// and renamed into place, so writers sharing a root -- two attempts of a
// job, one of them stale, on workers sharing the checkpoint root -- never
// touch each other's files; a write that fails removes its own.
absl::StatusOr<std::string> WriteCheckpoint(const std::string& root,
                                            const Checkpoint& checkpoint);

// Reads and verifies one checkpoint directory. DATA_LOSS for corrupt or
// truncated contents, NOT_FOUND for missing files, FAILED_PRECONDITION for a
// newer version or a file that is a symlink (the engine never writes one,
// and following it could read from anywhere); every message starts with the
// offending file's path.
absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path);

// The same checks on the two files' contents held in memory; `dir` names
// the checkpoint directory in errors and, when it ends in a step-* name,
// must agree with meta.json's step.
absl::StatusOr<Checkpoint> ParseCheckpoint(absl::string_view meta_json,
                                           absl::string_view tensors,
                                           const std::string& dir);

// A checkpoint's meta.json alone, with the checks ReadCheckpoint makes of
// it (e.g. to read the early stopping's best step without the tensors).
// DATA_LOSS naming what is wrong; FAILED_PRECONDITION for a newer version.
absl::StatusOr<CheckpointMeta> ReadCheckpointMeta(absl::string_view meta_json);

// What a checkpoint's meta.json records of its model.safetensors: enough
// to check a copy of the checkpoint (e.g. one downloaded) while it is
// written, without holding the tensors in memory.
struct TensorsFileRecord {
  int64_t step = 0;
  int64_t bytes = 0;
  uint32_t crc32 = 0;
};

// DATA_LOSS naming what is wrong when `meta_json` is not a valid meta.json
// (the same checks ReadCheckpoint makes of it); FAILED_PRECONDITION for a
// newer version.
absl::StatusOr<TensorsFileRecord> ReadTensorsFileRecord(
    absl::string_view meta_json);

struct CheckpointEntry {
  int64_t step = 0;
  std::string path;
};

// The step-* directories under root, newest first (symlinks are not
// checkpoints and are skipped). Empty when root is absent.
absl::StatusOr<std::vector<CheckpointEntry>> ListCheckpoints(
    const std::string& root);

// Deletes all but the newest `keep_last` checkpoints (keep_last >= 1) and
// the one of step `also_keep_step` (checkpoint.keep_best's best; -1: none),
// and leftovers of writes that died (.tmp-step-* and .old-step-* folders
// untouched for kStaleWriteSeconds: younger ones may be another writer's,
// still at work).
inline constexpr int64_t kStaleWriteSeconds = 3600;
absl::Status PruneCheckpoints(const std::string& root, int keep_last,
                              int64_t also_keep_step = -1);

struct LatestCheckpoint {
  std::string path;
  Checkpoint checkpoint;
  // Newer checkpoints that failed to read, as "path: reason".
  std::vector<std::string> skipped;
};

// The newest checkpoint under root that reads cleanly; nullopt when root
// holds none. DATA_LOSS when there are checkpoints but none reads cleanly:
// starting over would silently throw the run's progress away.
absl::StatusOr<std::optional<LatestCheckpoint>> ReadLatestCheckpoint(
    const std::string& root);

// `dir` is one checkpoint (it holds meta.json) or a checkpoint root: that
// checkpoint, or the root's newest readable one, with its path. NOT_FOUND
// when a root holds none; ReadCheckpoint's errors otherwise.
absl::StatusOr<std::pair<std::string, Checkpoint>> ReadCheckpointOrNewest(
    const std::string& dir);

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_CHECKPOINT_H_
