#include "engine/timed_choices.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/log.h"
#include "common/read_file.h"
#include "common/replace_file.h"
#include "common/status_macros.h"

#ifdef YARD_CUDA
#include "engine/cuda/attention_tc_kernels.h"
#include "engine/cuda/device_query.h"
#include "engine/cuda/lt_gemm.h"
#endif

namespace trainyard::engine {

#ifdef YARD_CUDA
namespace {

std::string DeviceHeader(absl::string_view device) {
  return absl::StrCat("# device: ", device);
}

void NameDevice(int cuda_device, TimedChoicesPlan* plan) {
  if (!plan->device.empty()) return;
  plan->device = "an unnamed GPU";
  if (absl::StatusOr<std::vector<cuda::CudaDeviceInfo>> devices =
          cuda::ListCudaDevices();
      devices.ok() && cuda_device < static_cast<int>(devices->size())) {
    plan->device = (*devices)[cuda_device].name;
  }
}

// The plan of one setting whose choices `read` reads from a file (its error
// naming the file): time them, unless the job's checkpoint dir keeps
// choices timed before on this GPU model. `what` names the setting in the
// log ("gemm choices").
template <typename Read>
TimedChoice PlanChoice(const EngineJob& job, int ranks,
                       const TimedChoicesPlan& plan, const char* variable,
                       const char* what, const char* file_name,
                       const Read& read) {
  TimedChoice choice;
  if (ranks > 1) {
    YARD_LOG(WARNING) << variable << "=auto is for single-GPU jobs; this one "
                      << "of " << ranks << " ranks runs the defaults";
    return choice;
  }
  choice.tune = true;
  if (job.trainer.checkpoint.dir.empty()) return choice;  // nowhere to keep
  choice.file = absl::StrCat(job.trainer.checkpoint.dir, "/", file_name);
  absl::StatusOr<std::string> text = read(choice.file);
  if (!text.ok()) {
    if (!absl::IsNotFound(text.status())) {
      YARD_LOG(WARNING) << what << ": " << text.status().message()
                        << "; timing them again";
    }
    return choice;
  }
  if (!absl::StartsWith(*text, DeviceHeader(plan.device) + "\n")) {
    YARD_LOG(WARNING) << what << ": " << choice.file
                      << " was not timed on this GPU model (" << plan.device
                      << "); timing them again";
    return choice;
  }
  YARD_LOG(INFO) << what << ": the ones this job timed before, from "
                 << choice.file;
  choice.tune = false;
  choice.kept = *std::move(text);
  return choice;
}

// Writes `text` under the device's header to choice.file, if there is one;
// what the log line should add about it.
absl::StatusOr<std::string> Keep(const TimedChoice& choice,
                                 const TimedChoicesPlan& plan,
                                 const std::string& text) {
  if (choice.file.empty()) return std::string(" (checkpoints off: not kept)");
  RETURN_IF_ERROR(ReplaceFileDurably(
      choice.file, absl::StrCat(DeviceHeader(plan.device), "\n", text)));
  return absl::StrCat("; kept in ", choice.file);
}

std::string SecondsSince(absl::Time start) {
  return absl::StrFormat("%.2f s", absl::ToDoubleSeconds(absl::Now() - start));
}

}  // namespace

absl::StatusOr<std::string> ReadGemmChoices(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path, int64_t{1} << 20));
  if (absl::Status s = cuda::LtGemm::CheckChoices(text); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  }
  return text;
}

absl::StatusOr<AttentionTilings> AttentionTilingsOfFile(
    const std::string& text) {
  std::vector<absl::string_view> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  }
  if (lines.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention tilings: ", lines.size(),
        " lines that are not comments, where one names the tilings"));
  }
  return ParseAttentionTilings(lines[0]);
}

void PlanGemmChoices(const EngineJob& job, int ranks, int cuda_device,
                     TimedChoicesPlan* plan) {
  NameDevice(cuda_device, plan);
  plan->gemms = PlanChoice(job, ranks, *plan, "YARD_GEMM_CHOICES",
                           "gemm choices", kGemmChoicesFile, ReadGemmChoices);
}

void PlanAttentionTilings(const EngineJob& job, int ranks, int cuda_device,
                          TimedChoicesPlan* plan) {
  const int64_t head_size = job.is_gpt ? job.gpt.d_model / job.gpt.n_head : 0;
  if (!job.is_gpt || job.activation_dtype != DType::kBF16 ||
      !cuda::AttentionTcSupportsHeadSize(head_size)) {
    YARD_LOG(INFO) << "YARD_ATTENTION_TILING=auto: this job runs no "
                      "tensor-core attention (a bf16 GPT with heads of 32, "
                      "64 or 128 channels); nothing to time";
    return;
  }
  NameDevice(cuda_device, plan);
  plan->attention = PlanChoice(
      job, ranks, *plan, "YARD_ATTENTION_TILING", "attention tilings",
      kAttentionTilingsFile,
      [](const std::string& path) -> absl::StatusOr<std::string> {
        ASSIGN_OR_RETURN(std::string text,
                         ReadWholeFile(path, int64_t{1} << 16));
        if (absl::StatusOr<AttentionTilings> t = AttentionTilingsOfFile(text);
            !t.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ": ", t.status().message()));
        }
        return text;
      });
}

absl::Status TimeChoices(Trainer& trainer, CudaBackend* cuda,
                         const TimedChoicesPlan& plan) {
  constexpr int kCandidates = 16, kReps = 3;
  const absl::Time start = absl::Now();
  if (plan.gemms.tune) {
    RETURN_IF_ERROR(cuda->StartGemmTuning(kCandidates, kReps));
  }
  if (plan.attention.tune) RETURN_IF_ERROR(cuda->StartAttentionTuning(kReps));
  const absl::Status rehearsed = trainer.RehearseStep();
  // Both finish (and stop timing) whatever the rehearsal did.
  absl::StatusOr<CudaBackend::GemmTuning> gemms;
  if (plan.gemms.tune) gemms = cuda->FinishGemmTuning();
  absl::StatusOr<CudaBackend::AttentionTuning> attention;
  if (plan.attention.tune) attention = cuda->FinishAttentionTuning();
  RETURN_IF_ERROR(rehearsed);
  const std::string took = SecondsSince(start);
  if (plan.gemms.tune) {
    RETURN_IF_ERROR(gemms.status());
    ASSIGN_OR_RETURN(
        const std::string kept,
        Keep(plan.gemms, plan,
             absl::StrCat("# YARD_GEMM_CHOICES=auto: the fastest of "
                          "cuBLASLt's first ",
                          kCandidates, " candidates, median of ", kReps,
                          " runs\n", gemms->choices)));
    YARD_LOG(INFO) << "gemm choices: timed " << gemms->candidates
                   << " candidates of " << gemms->products << " products on "
                   << plan.device << " in " << took << kept;
  }
  if (plan.attention.tune) {
    RETURN_IF_ERROR(attention.status());
    if (!attention->forward_timed || !attention->backward_timed) {
      return absl::InternalError(
          "attention tilings: the rehearsal ran no tensor-core attention "
          "forward and backward to time");
    }
    std::string text = absl::StrCat(
        "# YARD_ATTENTION_TILING=auto: the fastest tiling of the forward and "
        "of the backward, median of ",
        kReps, " runs each\n");
    for (const std::string& line : attention->timings) {
      absl::StrAppend(&text, "# ", line, "\n");
      YARD_LOG(INFO) << "attention tilings: " << line;
    }
    const std::string tilings = AttentionTilingsText(attention->tilings);
    absl::StrAppend(&text, tilings, "\n");
    ASSIGN_OR_RETURN(const std::string kept, Keep(plan.attention, plan, text));
    YARD_LOG(INFO) << "attention tilings: timed " << attention->timings.size()
                   << " candidates on " << plan.device << " in " << took
                   << ", taking " << tilings << kept;
  }
  return absl::OkStatus();
}
#endif

}  // namespace trainyard::engine
