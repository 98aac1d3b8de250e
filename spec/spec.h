// JobSpec parsing, defaults and validation, shared by the CLI (reads the
// user's file), yard-server (validates every submission) and yard-train
// (runs a spec alone). No gRPC inside; the spec is the protobuf message.
#ifndef TRAINYARD_SPEC_SPEC_H_
#define TRAINYARD_SPEC_SPEC_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "spec/limits.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard::spec {

// Parses a JobSpec from YAML or JSON text (protobuf's JSON mapping; YAML is
// converted to JSON first). Malformed text, unknown fields and wrong types
// are INVALID_ARGUMENT with a message naming the field or line; text over
// kMaxSpecBytes is refused before parsing.
absl::StatusOr<trainyard::v1::JobSpec> ParseJobSpec(std::string_view text);

// Reads and parses a spec file; NOT_FOUND / INVALID_ARGUMENT name the file.
// A file over kMaxSpecBytes is refused without reading it.
absl::StatusOr<trainyard::v1::JobSpec> ReadJobSpecFile(const std::string& path);

// The spec as protobuf JSON (one line unless `pretty`).
std::string JobSpecToJson(const trainyard::v1::JobSpec& spec,
                          bool pretty = false);

// Returns the spec with every documented default filled in (see spec.proto).
trainyard::v1::JobSpec WithDefaults(const trainyard::v1::JobSpec& spec);

// Explicit upper bounds on what one job may ask for; spec/limits.h explains
// the defaults. A deployment may lower them, never raise them past those.
struct Limits {
  int64_t max_steps = kMaxSteps;
  int64_t max_parameters = kMaxParameters;
  int64_t max_layer_width = kMaxLayerWidth;
  int64_t max_layers = kMaxLayers;
  int64_t max_micro_batch = kMaxMicroBatch;
  int64_t max_grad_accum = kMaxGradAccum;
  int64_t max_micro_batch_tokens = kMaxMicroBatchTokens;
  int64_t max_gpus = kMaxGpus;
  int64_t max_cpu_threads = kMaxCpuThreads;
  int64_t max_name_length = kMaxNameLength;
  int64_t max_path_length = kMaxPathLength;
};

struct ValidationOptions {
  // Data paths in the spec are relative to this root and must resolve
  // (after symlinks) inside it.
  std::string data_root = ".";
  // Also require that the data files exist and are readable.
  bool check_files_exist = true;
  Limits limits;
};

// Checks a spec (defaults already applied or not). Returns INVALID_ARGUMENT
// whose message starts with the field path, e.g.
// "batch.micro_batch: must be in [1, 65536], got 0".
absl::Status ValidateJobSpec(const trainyard::v1::JobSpec& spec,
                             const ValidationOptions& options);

// Whether `id` has the form of a job id: 1 to kMaxJobIdLength characters of
// [A-Za-z0-9._-] (the server hands out "j-" and digits; a check of form
// only, before a lookup).
bool IsJobIdForm(const std::string& id);
// "\"<id, escaped, at most 64 bytes of it>\" is not a job id".
std::string NotAJobId(const std::string& id);

// Resolves `relative` under `data_root` (following symlinks) and checks the
// result stays inside the root. `field` names the spec field for errors.
// INVALID_ARGUMENT for absolute paths, control characters, paths longer
// than kMaxPathLength and escapes (a "../" or a symlink anywhere on the way,
// a dangling one included, that leads out of the root); NOT_FOUND-worded
// INVALID_ARGUMENT when the file is missing and must exist. With must_exist
// false the path may name a file yet to be created: the part that exists is
// resolved and the rest must not pass through a dangling symlink.
absl::StatusOr<std::string> ResolveDataPath(std::string_view field,
                                            const std::string& data_root,
                                            const std::string& relative,
                                            bool must_exist);

// Resolves a Hugging Face GPT-2 folder (model.gpt.init_from) like
// ResolveDataPath, but the path names a directory, and with must_exist its
// files must be there and resolve inside the root as well: config.json and
// model.safetensors, and trainyard_tokenizer.json when present (a link
// inside the folder must not lead out of the root either).
absl::StatusOr<std::string> ResolveModelFolder(std::string_view field,
                                               const std::string& data_root,
                                               const std::string& relative,
                                               bool must_exist);

// Number of trainable parameters of the spec's model (data-derived sizes
// taken from the spec or, for MNIST, 784 inputs and 10 classes).
int64_t CountParameters(const trainyard::v1::JobSpec& spec);

}  // namespace trainyard::spec

#endif  // TRAINYARD_SPEC_SPEC_H_
