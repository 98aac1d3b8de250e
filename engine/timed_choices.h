// The speed settings a GPU job may choose by timing its own candidates,
// in a rehearsal of its first step, instead of taking them from the
// environment: YARD_GEMM_CHOICES=auto (the linear layers' cuBLASLt
// algorithms) and YARD_ATTENTION_TILING=auto (the bf16 attention's
// tilings). What a job chose is kept in its checkpoint dir under the GPU
// model's name, so that a resumed run on the same model runs the same
// kernels (the same bits as a run never stopped) without timing them
// again; a file timed on another model, or one that does not read, is
// timed again. Single-GPU jobs only: ranks could time different winners.
// Not thread-safe.
#ifndef TRAINYARD_ENGINE_TIMED_CHOICES_H_
#define TRAINYARD_ENGINE_TIMED_CHOICES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/job_config.h"

#ifdef YARD_CUDA
#include "engine/core/trainer.h"
#include "engine/cuda/cuda_backend.h"
#endif

namespace trainyard::engine {

// One setting's plan.
struct TimedChoice {
  bool tune = false;  // time the candidates before the first step
  std::string file;   // where the choices are kept; "": nowhere
  std::string kept;   // the choices kept before, when not timing
};

struct TimedChoicesPlan {
  std::string device;  // the GPU model the choices are timed on
  TimedChoice gemms;
  TimedChoice attention;
  bool tune() const { return gemms.tune || attention.tune; }
};

#ifdef YARD_CUDA
// The file in a job's checkpoint dir where YARD_GEMM_CHOICES=auto keeps
// the choices it timed (LtGemm::SetChoices's lines), and where
// YARD_ATTENTION_TILING=auto keeps its tilings (a line as that variable
// takes them: "FORWARD,BACKWARD"); each begins "# device: MODEL".
inline constexpr char kGemmChoicesFile[] = "gemm-choices";
inline constexpr char kAttentionTilingsFile[] = "attention-tilings";

// A file of gemm choices (a line a product), checked as
// LtGemm::SetChoices reads it: its read error (which names the file), or
// INVALID_ARGUMENT "PATH: gemm choices, line N: ...".
absl::StatusOr<std::string> ReadGemmChoices(const std::string& path);

// The tilings in the text of an attention-tilings file: its one line that
// is not a comment ('#'), as YARD_ATTENTION_TILING reads it;
// INVALID_ARGUMENT naming what is wrong otherwise.
absl::StatusOr<AttentionTilings> AttentionTilingsOfFile(
    const std::string& text);

// Fills plan->device (once) and plans YARD_GEMM_CHOICES=auto for `job`
// (plan->gemms), or YARD_ATTENTION_TILING=auto (plan->attention: nothing to
// time, and a line in the log saying why, for a job without tensor-core
// attention: not a GPT, fp32, or a head size the kernels do not take).
// Never fails: what cannot be read is timed again.
void PlanGemmChoices(const EngineJob& job, int ranks, int cuda_device,
                     TimedChoicesPlan* plan);
void PlanAttentionTilings(const EngineJob& job, int ranks, int cuda_device,
                          TimedChoicesPlan* plan);

// Times what `plan` says to in a rehearsal of the job's first step
// (Trainer::RehearseStep; the backend keeps the fastest from then on) and
// keeps the choices in their files.
absl::Status TimeChoices(Trainer& trainer, CudaBackend* cuda,
                         const TimedChoicesPlan& plan);
#endif

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_TIMED_CHOICES_H_
