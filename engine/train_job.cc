// Assembling and running a training job. See train_job.h.
#include "engine/train_job.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/numbers.h"
#include "engine/checkpoint_match.h"
#include "engine/core/memory_estimate.h"
#ifdef YARD_CUDA
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/device_query.h"
#endif
#ifdef YARD_NCCL
#include "engine/dist/nccl_collective.h"
#endif

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/byte_text.h"
#include "common/field_errors.h"
#include "common/log.h"
#include "common/read_file.h"
#include "common/replace_file.h"
#include "common/status_macros.h"
#include "engine/core/checkpoint.h"
#include "engine/core/gpt.h"
#include "engine/core/mlp.h"
#include "engine/core/model_weights.h"
#include "engine/core/short_of_memory.h"
#include "engine/data/idx.h"
#include "engine/data/mnist.h"
#include "engine/data/token_data.h"
#include "engine/gpt_tools.h"
#include "engine/host_memory.h"
#include "engine/timed_choices.h"

namespace trainyard::engine {
namespace {

// An error reading the data file of `field`. One that will not parse (bad
// format, bad UTF-8, too large) is INVALID_ARGUMENT naming the field: it
// would fail again, so the job fails at once (yard-train exit 2) instead of
// being restarted. One reading it (a file gone, an I/O error) keeps its
// code: it may pass on another try or another worker.
absl::Status AsDataError(absl::string_view field, const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return s;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kResourceExhausted:
      return InvalidFieldError(field, s.message());
    default:
      return absl::Status(s.code(), absl::StrCat(field, ": ", s.message()));
  }
}

// `prefix` is "data.mnist." or "data.mnist.eval_": each file is read under
// its own field; what is wrong with the two together (their counts) is
// data.mnist's.
absl::StatusOr<std::unique_ptr<MnistExamples>> LoadMnist(
    absl::string_view prefix, const std::string& images,
    const std::string& labels) {
  absl::StatusOr<IdxArray> pixels = ReadIdxFile(images);
  if (!pixels.ok()) {
    return AsDataError(absl::StrCat(prefix, "images"), pixels.status());
  }
  absl::StatusOr<IdxArray> classes = ReadIdxFile(labels);
  if (!classes.ok()) {
    return AsDataError(absl::StrCat(prefix, "labels"), classes.status());
  }
  absl::StatusOr<std::unique_ptr<MnistExamples>> set = MnistExamples::FromIdx(
      *std::move(pixels), *std::move(classes), images, labels);
  if (!set.ok()) return AsDataError("data.mnist", set.status());
  return set;
}

// Text files up to 1 GiB; larger corpora belong in token shards.
absl::StatusOr<std::string> ReadText(absl::string_view field,
                                     const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile(path, int64_t{1} << 30);
  if (!text.ok()) return AsDataError(field, text.status());
  return text;
}

absl::Status CheckModelFitsData(const MlpConfig& mlp, const ExampleSet& data) {
  if (mlp.input_dim != data.feature_dim()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.mlp.input_dim: ", mlp.input_dim, " does not match the data's ",
        data.feature_dim(), " features per example"));
  }
  if (mlp.num_classes < data.num_classes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.mlp.num_classes: ", mlp.num_classes,
        " is fewer than the data's ", data.num_classes(), " classes"));
  }
  return absl::OkStatus();
}

absl::Status LoadShards(const TokenFiles& files, int64_t vocab_size,
                        std::vector<int32_t>* train,
                        std::vector<int32_t>* eval) {
  for (const std::string& path : files.train) {
    RETURN_IF_ERROR(
        AsDataError("data.tokens.train", ReadTokenShard(path, train)));
  }
  for (const std::string& path : files.eval) {
    RETURN_IF_ERROR(
        AsDataError("data.tokens.eval", ReadTokenShard(path, eval)));
  }
  for (const auto* set : {train, eval}) {
    const int64_t bad = FirstTokenOutside(*set, vocab_size);
    if (bad >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.gpt.vocab_size: the token shards hold token ", (*set)[bad],
          ", outside the vocabulary of ", vocab_size));
    }
  }
  return absl::OkStatus();
}

}  // namespace

// Weights trained elsewhere that replace the fresh initialization: a
// Hugging Face folder (model.gpt.init_from) or a checkpoint (warm_start).
struct StartingWeights {
  const char* source;  // "init_from" or "warm_start", for errors
  // A GPT's sizes and its tokenizer (null for token shards); absent for an
  // MLP checkpoint.
  std::optional<HfGpt2> gpt;
  std::vector<HostTensor> tensors;  // an MLP checkpoint's
};

namespace {

// A CPU job whose memory estimate is above what the host has free is
// refused before anything is loaded: it would thrash, or be killed by the
// kernel hours in. A job's ranks on one host (EngineJob::ranks_on_host)
// start together, each seeing the same memory free: each checks for them
// all. Returns the figures, for a dry run's report; "" when the host tells
// nothing to check against.
absl::StatusOr<std::string> CheckHostMemory(const EngineJob& job) {
  const MemoryEstimate need =
      job.is_gpt
          ? EstimateGptMemory(job.gpt, job.trainer.micro_batch, job.threads,
                              DeviceKind::kCpu, job.activation_dtype)
          : EstimateMlpMemory(job.mlp, job.trainer.micro_batch, job.threads,
                              DeviceKind::kCpu, job.activation_dtype);
  absl::StatusOr<HostMemory> have = AvailableHostMemory();
  if (absl::IsNotFound(have.status())) return std::string();
  if (!have.ok()) return have.status();
  const int ranks = job.ranks_on_host;
  const int64_t all = need.total() * ranks;
  const std::string figures = absl::StrCat(
      "memory estimate ", FormatBytes(need.total()),
      ranks > 1 ? absl::StrCat(" a rank, ", FormatBytes(all), " for the ",
                               ranks, " ranks on this host")
                : "",
      ", ", FormatBytes(have->available), " available (", have->source, ")");
  if (all > have->available) {
    return ShortOfMemoryError(absl::StrCat(
        "memory: the job needs more host memory than is available: ", figures,
        "; the estimate is weights ", FormatBytes(need.weights), ", gradients ",
        FormatBytes(need.gradients), ", AdamW state ",
        FormatBytes(need.optimizer), ", activations of batch.micro_batch ",
        job.trainer.micro_batch, " ", FormatBytes(need.activations), ", other ",
        FormatBytes(need.workspace + need.overhead)));
  }
  return figures;
}

absl::StatusOr<std::optional<StartingWeights>> ReadStartingWeights(
    const EngineJob& job) {
  if (!job.gpt_init_from.empty()) {
    // A folder that will not parse fails again, as a data file does.
    absl::StatusOr<HfGpt2> hf = ReadHfGpt2(job.gpt_init_from);
    if (!hf.ok()) return AsDataError("model.gpt.init_from", hf.status());
    return StartingWeights{"init_from", *std::move(hf), {}};
  }
  if (job.warm_start.empty()) return std::nullopt;
  absl::StatusOr<std::pair<std::string, Checkpoint>> found =
      ReadCheckpointOrNewest(job.warm_start);
  if (!found.ok()) {
    // A checkpoint that is not there is a bad request, not a failure a
    // restart could mend.
    const absl::StatusCode code = absl::IsNotFound(found.status())
                                      ? absl::StatusCode::kInvalidArgument
                                      : found.status().code();
    return absl::Status(code,
                        absl::StrCat("warm_start: ", found.status().message()));
  }
  auto& [path, ckpt] = *found;
  absl::StatusOr<GptConfig> gpt = GptConfigFromDescription(ckpt.meta.model);
  const bool is_gpt = gpt.ok();
  if (is_gpt != job.is_gpt) {
    return absl::InvalidArgumentError(absl::StrCat(
        "warm_start: ", path, " holds ", is_gpt ? "a GPT" : "no GPT",
        ", and this job trains ", job.is_gpt ? "a GPT" : "an MLP"));
  }
  if (!is_gpt)
    return StartingWeights{"warm_start", std::nullopt, std::move(ckpt.tensors)};
  return StartingWeights{
      "warm_start",
      HfGpt2{*gpt, std::move(ckpt.tensors), std::move(ckpt.meta.tokenizer)},
      {}};
}

// A CHAR text job takes the vocabulary of the model it starts from: one
// rebuilt from this job's text would give characters other ids than the
// model learned, and training would go on silently from a scrambled
// embedding. BYTE needs no vocabulary (its ids are the bytes), nor do token
// shards (their ids are the model's).
absl::Status CheckStartingVocabulary(const EngineJob& job,
                                     const StartingWeights& init) {
  if (!init.gpt.has_value() ||
      init.gpt->tokenizer.type() != Json::Type::kNull ||
      !job.text.has_value() || !job.text->char_tokenizer) {
    return absl::OkStatus();
  }
  if (!job.gpt_init_from.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.gpt.init_from: ", job.gpt_init_from, " has no ",
        kHfTokenizerFile,
        ", and data.text.tokenizer CHAR needs the model's characters from it "
        "(yard-train export writes it)"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "warm_start: ", job.warm_start,
      " has no tokenizer (its model was trained on token shards), and "
      "data.text.tokenizer CHAR needs the model's characters"));
}

}  // namespace

absl::Status TrainJob::LoadMnistData(const EngineJob& job) {
  ASSIGN_OR_RETURN(
      std::unique_ptr<MnistExamples> all,
      LoadMnist("data.mnist.", job.mnist.images, job.mnist.labels));
  if (!job.mnist.eval_images.empty()) {
    ASSIGN_OR_RETURN(std::unique_ptr<MnistExamples> eval,
                     LoadMnist("data.mnist.eval_", job.mnist.eval_images,
                               job.mnist.eval_labels));
    if (eval->feature_dim() != all->feature_dim()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.mnist.eval_images: ", eval->rows(), "x", eval->cols(),
          " images, the training images are ", all->rows(), "x", all->cols()));
    }
    train_ = std::move(all);
    eval_ = std::move(eval);
  } else {
    absl::StatusOr<MnistSplit> split = SplitHoldout(*all, job.mnist.holdout);
    if (!split.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.mnist.holdout: ", split.status().message()));
    }
    train_ = std::move(split->train);
    if (split->eval->size() > 0) eval_ = std::move(split->eval);
  }
  return CheckModelFitsData(job.mlp, *train_);
}

std::string TrainJob::VocabularyOrigin() const {
  if (!tokenizer_.has_value() || !tokenizer_->is_char()) return "";
  return *tokenizer_source_ == '\0'
             ? " (the vocabulary is the characters of data.text.train)"
             : absl::StrCat(" (the vocabulary is the ", tokenizer_source_,
                            " model's)");
}

absl::Status TrainJob::LoadText(const TextFiles& files, const GptConfig& gpt,
                                std::vector<int32_t>* train,
                                std::vector<int32_t>* eval) {
  ASSIGN_OR_RETURN(std::string text, ReadText("data.text.train", files.train));
  if (tokenizer_.has_value()) {
    // From init_from or warm_start: the model's own vocabulary.
    if (tokenizer_->is_char() != files.char_tokenizer) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.text.tokenizer: differs from the ",
                       tokenizer_source_, " model's tokenizer"));
    }
  } else if (files.char_tokenizer) {
    absl::StatusOr<Tokenizer> chars = Tokenizer::CharsFromText(text);
    if (!chars.ok()) {
      return InvalidFieldError("data.text.train", chars.status().message());
    }
    tokenizer_ = *std::move(chars);
  } else {
    tokenizer_ = Tokenizer::Bytes();
  }
  if (tokenizer_->vocab_size() > gpt.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.gpt.vocab_size: ", gpt.vocab_size, " is smaller than the ",
        tokenizer_->vocab_size(),
        files.char_tokenizer ? " distinct characters of data.text.train"
                             : " tokens of the byte tokenizer"));
  }
  absl::StatusOr<std::vector<int32_t>> encoded_train = tokenizer_->Encode(text);
  if (!encoded_train.ok()) {
    return InvalidFieldError(
        "data.text.train",
        absl::StrCat(encoded_train.status().message(), VocabularyOrigin()));
  }
  *train = *std::move(encoded_train);
  if (!files.eval.empty()) {
    ASSIGN_OR_RETURN(std::string eval_text,
                     ReadText("data.text.eval", files.eval));
    absl::StatusOr<std::vector<int32_t>> encoded =
        tokenizer_->Encode(eval_text);
    if (!encoded.ok()) {
      return InvalidFieldError(
          "data.text.eval",
          absl::StrCat(encoded.status().message(), VocabularyOrigin()));
    }
    *eval = *std::move(encoded);
  }
  return absl::OkStatus();
}

absl::Status TrainJob::LoadTokenData(const EngineJob& job) {
  std::vector<int32_t> train, eval;
  if (job.text.has_value()) {
    RETURN_IF_ERROR(LoadText(*job.text, job.gpt, &train, &eval));
  } else {
    RETURN_IF_ERROR(LoadShards(*job.tokens, job.gpt.vocab_size, &train, &eval));
  }
  const bool held_out =
      job.text.has_value() ? job.text->eval.empty() : job.tokens->eval.empty();
  if (held_out) {
    // The tail, not a random sample: held-out windows never overlap
    // training windows.
    const size_t keep =
        train.size() - static_cast<size_t>(static_cast<double>(train.size()) *
                                           kTokenHoldoutFraction);
    eval.assign(train.begin() + keep, train.end());
    train.resize(keep);
  }
  const char* field =
      job.text.has_value() ? "data.text.train" : "data.tokens.train";
  const int64_t T = job.gpt.seq_len;
  auto train_tokens =
      std::make_shared<const std::vector<int32_t>>(std::move(train));
  auto windows = std::make_unique<TokenWindows>(
      train_tokens, T, 1, static_cast<int32_t>(job.gpt.vocab_size));
  if (windows->size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", train_tokens->size(),
                     " training tokens are fewer than "
                     "model.gpt.seq_len + 1 (",
                     T + 1, ")"));
  }
  train_ = std::move(windows);
  auto eval_windows = std::make_unique<TokenWindows>(
      std::make_shared<const std::vector<int32_t>>(std::move(eval)), T, T,
      static_cast<int32_t>(job.gpt.vocab_size));
  if (eval_windows->size() > 0) {
    eval_ = std::move(eval_windows);
    return absl::OkStatus();
  }
  const std::string eval_field =
      held_out               ? absl::StrCat("the held-out last 10% of ", field)
      : job.text.has_value() ? "data.text.eval"
                             : "data.tokens.eval";
  const std::string why =
      absl::StrCat(eval_field, " is shorter than one window of ", T + 1,
                   " tokens (model.gpt.seq_len + 1)");
  // An evaluation file given but too short is a mistake in the spec, not a
  // reason to train without evaluations; what needs evaluations cannot run
  // without them either: both said now, by field.
  if (!held_out) {
    return InvalidFieldError(eval_field,
                             absl::StrCat("shorter than one window of ", T + 1,
                                          " tokens (model.gpt.seq_len + 1)"));
  }
  if (job.trainer.early_stop_patience > 0) {
    return InvalidFieldError("eval.patience",
                             absl::StrCat("no evaluation set: ", why));
  }
  if (job.trainer.checkpoint.keep_best) {
    return InvalidFieldError("checkpoint.keep_best",
                             absl::StrCat("no evaluation set: ", why));
  }
  YARD_LOG(WARNING) << why << "; evaluation is off";
  return absl::OkStatus();
}

namespace {

// The CPU backend, or for a GPU job the CUDA backend on `cuda_device` with
// its whole memory taken at once: the job's grant on a shared GPU
// (YARD_GPU_MEMORY_BYTES, set by the worker), else what the memory estimate
// says the job needs. A job that needs more than its grant fails here,
// never mid-run. A GPU job runs one rank per GPU. YARD_ATTENTION_TILING
// ("32x4", say, or "wgmma"; or "FORWARD,BACKWARD"; or "auto":
// PlanAttentionTilings) picks the bf16 attention's tilings, a speed setting
// (every tiling gives the same bits but wgmma's, which agree to fp32
// rounding); YARD_ATTENTION_BACKWARD
// ("two-kernel" or "ordered-dq") its backward's split, also a speed
// setting (the two agree to fp32 rounding; the second takes B T C floats
// more memory, in the estimate); YARD_BIAS_GRADIENT ("column-sums" or
// "epilogue") where the linear layers' bias gradients are summed, a speed
// setting too (the two agree to fp32 rounding); YARD_GEMM_CHOICES
// names a file of cuBLASLt algorithm choices (LtGemm::SetChoices; made by
// gemm_bench --choices on the GPU model they are for), or is "auto":
// PlanGemmChoices. What "auto" plans to time goes to *timed
// (timed_choices.h).
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
    const EngineJob& job, const Collective* collective,
    [[maybe_unused]] int cuda_device,
    [[maybe_unused]] TimedChoicesPlan* timed) {
  if (job.gpus == 0) {
    CpuBackendOptions options;
    options.threads = job.threads;
    options.activation_dtype = job.activation_dtype;
    ASSIGN_OR_RETURN(std::unique_ptr<CpuBackend> cpu,
                     CpuBackend::Create(options));
    return cpu;
  }
  const int ranks = collective == nullptr ? 1 : collective->world_size();
  if (job.gpus != ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("resources.gpus: ", job.gpus, " GPUs run as ", job.gpus,
                     " ranks, one per GPU (yard-train --world-size ", job.gpus,
                     "), but this process is one of ", ranks, " ranks"));
  }
#ifndef YARD_NCCL
  if (ranks > 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("resources.gpus: ", job.gpus,
                     " GPUs need NCCL, and this build of the engine has none"));
  }
#endif
#ifdef YARD_CUDA
  CudaBackendOptions options;
  if (const char* backward = std::getenv("YARD_ATTENTION_BACKWARD");
      backward != nullptr && *backward != '\0') {
    absl::StatusOr<cuda::AttentionTcBackward> b =
        ParseAttentionBackward(backward);
    if (!b.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("YARD_ATTENTION_BACKWARD: ", b.status().message()));
    }
    options.attention_backward = *b;
  }
  const MemoryEstimate need =
      job.is_gpt
          ? EstimateGptMemory(job.gpt, job.trainer.micro_batch, job.threads,
                              DeviceKind::kCuda, job.activation_dtype,
                              CudaAttentionState(options.attention_backward))
          : EstimateMlpMemory(job.mlp, job.trainer.micro_batch, job.threads,
                              DeviceKind::kCuda, job.activation_dtype);
  options.activation_dtype = job.activation_dtype;
  options.arena_bytes = need.allocated() + need.workspace;
  if (const char* grant = std::getenv("YARD_GPU_MEMORY_BYTES");
      grant != nullptr && *grant != '\0') {
    int64_t granted = 0;
    if (!absl::SimpleAtoi(grant, &granted) || granted <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "YARD_GPU_MEMORY_BYTES must be a positive byte count, got '", grant,
          "'"));
    }
    if (granted < options.arena_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the job needs ", options.arena_bytes,
                       " bytes of GPU memory but "
                       "its grant on the shared GPU is ",
                       granted, " bytes"));
    }
    options.arena_bytes = granted;
  }
  if (const char* tiling = std::getenv("YARD_ATTENTION_TILING");
      tiling != nullptr && *tiling != '\0') {
    absl::StatusOr<AttentionTilings> t = AttentionTilings{
        options.attention_tiling, options.attention_backward_tiling};
    if (std::string_view(tiling) != "auto") {
      t = ParseAttentionTilings(tiling);
    } else {
      // The tilings timed before, or (while the job times them) the
      // defaults; the kept file was read through AttentionTilingsOfFile.
      PlanAttentionTilings(job, ranks, cuda_device, timed);
      if (!timed->attention.kept.empty()) {
        t = AttentionTilingsOfFile(timed->attention.kept);
      }
    }
    if (!t.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("YARD_ATTENTION_TILING: ", t.status().message(),
                       "; or auto, timed by the job"));
    }
    options.attention_tiling = t->forward;
    options.attention_backward_tiling = t->backward;
  }
  if (const char* way = std::getenv("YARD_BIAS_GRADIENT");
      way != nullptr && *way != '\0') {
    absl::StatusOr<BiasGradient> b = ParseBiasGradient(way);
    if (!b.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("YARD_BIAS_GRADIENT: ", b.status().message()));
    }
    options.bias_gradient = *b;
  }
  if (const char* path = std::getenv("YARD_GEMM_CHOICES");
      path != nullptr && std::string_view(path) == "auto") {
    PlanGemmChoices(job, ranks, cuda_device, timed);
    options.gemm_choices = timed->gemms.kept;
  } else if (path != nullptr && *path != '\0') {
    absl::StatusOr<std::string> text = ReadGemmChoices(path);
    if (!text.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("YARD_GEMM_CHOICES: ", text.status().message()));
    }
    options.gemm_choices = *std::move(text);
  }
  options.device = cuda_device;
  return CreateCudaBackend(options);
#else
  return absl::FailedPreconditionError(
      "resources.gpus: this build of the engine has no CUDA backend");
#endif
}

// The NCCL collective of a GPU rank, on the CUDA backend's stream.
absl::StatusOr<std::unique_ptr<Collective>> CreateGpuCollective(
    Backend* backend, SocketCollective* ranks) {
#ifdef YARD_NCCL
  auto* cuda = dynamic_cast<CudaBackend*>(backend);
  if (cuda == nullptr) {
    return absl::InternalError("a GPU rank without the CUDA backend");
  }
  NcclCollectiveOptions options;
  options.device = cuda->device();
  options.compute_stream = cuda->stream();
  ASSIGN_OR_RETURN(std::unique_ptr<NcclCollective> nccl,
                   NcclCollective::Create(ranks, options));
  return nccl;
#else
  (void)backend;
  (void)ranks;
  return absl::FailedPreconditionError("this engine was built without NCCL");
#endif
}

// The job's model on `backend`; *gpt points at it for a GPT job.
absl::StatusOr<std::unique_ptr<Model>> CreateModel(const EngineJob& job,
                                                   Backend* backend,
                                                   GptModel** gpt) {
  if (job.is_gpt) {
    ASSIGN_OR_RETURN(
        std::unique_ptr<GptModel> model,
        GptModel::Create(job.gpt, job.trainer.micro_batch, backend));
    *gpt = model.get();
    return model;
  }
  return MlpModel::Create(job.mlp, job.trainer.micro_batch, backend);
}

}  // namespace

absl::StatusOr<std::string> TrainJob::LoadInputs(
    const EngineJob& job, std::optional<StartingWeights>* init) {
  std::string memory;
  if (job.gpus == 0) {
    ASSIGN_OR_RETURN(memory, CheckHostMemory(job));
  }
  ASSIGN_OR_RETURN(*init, ReadStartingWeights(job));
  if (init->has_value()) RETURN_IF_ERROR(CheckStartingVocabulary(job, **init));
  if (init->has_value() && (*init)->gpt.has_value() &&
      (*init)->gpt->tokenizer.type() != Json::Type::kNull) {
    absl::StatusOr<Tokenizer> tok =
        Tokenizer::FromJson((*init)->gpt->tokenizer);
    if (!tok.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat((*init)->source, ": ", tok.status().message()));
    }
    tokenizer_ = *std::move(tok);
    tokenizer_source_ = (*init)->source;
  }
  RETURN_IF_ERROR(job.is_gpt ? LoadTokenData(job) : LoadMnistData(job));
  // Trainer::Create's check, made here for a dry run too.
  if ((job.trainer.early_stop_patience > 0 ||
       job.trainer.checkpoint.keep_best) &&
      eval_ == nullptr) {
    return absl::InvalidArgumentError(
        "trainer: early stopping and keep_best need an evaluation set");
  }
  return memory;
}

absl::StatusOr<std::string> TrainJob::DryRun(const EngineJob& job,
                                             int world_size) {
  std::unique_ptr<TrainJob> t(new TrainJob());
  std::optional<StartingWeights> init;
  ASSIGN_OR_RETURN(std::string memory, t->LoadInputs(job, &init));
  std::vector<Parameter> parameters;
  if (job.gpus == 0) {
    // The model's tensors, for naming one a checkpoint holds in another
    // shape; its memory was found to fit above.
    TimedChoicesPlan timed;
    ASSIGN_OR_RETURN(t->backend_, CreateBackend(job, nullptr, 0, &timed));
    GptModel* gpt = nullptr;
    ASSIGN_OR_RETURN(t->model_, CreateModel(job, t->backend_.get(), &gpt));
    parameters = t->model_->parameters();
  }
  RETURN_IF_ERROR(CheckCheckpointMatchesSpec(job, parameters, world_size));
  return absl::StrCat("dry run: the job would start: ", t->train_->size(),
                      job.is_gpt ? " training windows" : " training examples",
                      ", ", t->eval_ == nullptr ? 0 : t->eval_->size(),
                      " for evaluation",
                      memory.empty() ? "" : absl::StrCat("; ", memory));
}

absl::StatusOr<std::unique_ptr<TrainJob>> TrainJob::Create(
    const EngineJob& job, TrainerEventSink* sink, SocketCollective* ranks,
    int cuda_device) {
  std::unique_ptr<TrainJob> t(new TrainJob());
  TrainerConfig trainer_config = job.trainer;
  std::optional<StartingWeights> init;
  RETURN_IF_ERROR(t->LoadInputs(job, &init).status());
  if (t->tokenizer_.has_value()) {
    trainer_config.tokenizer = t->tokenizer_->ToJson();
  }
  TimedChoicesPlan timed;
  ASSIGN_OR_RETURN(t->backend_, CreateBackend(job, ranks, cuda_device, &timed));
#ifdef YARD_CUDA
  auto* cuda = dynamic_cast<CudaBackend*>(t->backend_.get());
#endif
  Collective* collective = ranks;
  if (job.gpus > 1) {
    ASSIGN_OR_RETURN(t->gpu_collective_,
                     CreateGpuCollective(t->backend_.get(), ranks));
    collective = t->gpu_collective_.get();
  }
  if (job.profile_ops) {
    // After the collective, which keeps the CUDA backend itself.
    auto profiler = std::make_unique<ProfilingBackend>(std::move(t->backend_));
    t->profiler_ = profiler.get();
    t->backend_ = std::move(profiler);
  }
  ShuffledLoaderOptions loader_options;
  // Every rank draws the same global micro-batch and trains on its slice.
  const int world = collective == nullptr ? 1 : collective->world_size();
  loader_options.batch_size = job.trainer.micro_batch * world;
  loader_options.seed = job.trainer.seed;
  loader_options.with_replacement = job.is_gpt;
  GptModel* gpt = nullptr;
  ASSIGN_OR_RETURN(t->model_, CreateModel(job, t->backend_.get(), &gpt));
  // Before the trainer: a checkpoint of another spec is refused as the
  // spec's mistake, naming what differs, not found out when the run starts.
  RETURN_IF_ERROR(
      CheckCheckpointMatchesSpec(job, t->model_->parameters(), world));
  ASSIGN_OR_RETURN(t->loader_,
                   ShuffledLoader::Create(t->train_.get(), loader_options));
  ASSIGN_OR_RETURN(
      t->trainer_,
      Trainer::Create(trainer_config, t->model_.get(), t->backend_.get(),
                      t->loader_.get(), t->eval_.get(), sink, Clock::Real(),
                      collective));
#ifdef YARD_CUDA
  if (timed.tune() && cuda != nullptr) {
    Trainer* trainer = t->trainer_.get();
    t->trainer_->set_before_first_step(
        [trainer, cuda, timed] { return TimeChoices(*trainer, cuda, timed); });
  }
#endif
  // Fine-tuning or a warm start: the weights replace the fresh
  // initialization (a checkpoint of the job's own, found when the run
  // starts, replaces both).
  if (init.has_value() && init->gpt.has_value()) {
    RETURN_IF_ERROR(
        LoadHfWeights(*init->gpt, init->source, gpt, t->backend_.get()));
  } else if (init.has_value()) {
    RETURN_IF_ERROR(CopyWeightsInto(init->tensors, init->source,
                                    t->model_.get(), t->backend_.get()));
  }
  return t;
}

}  // namespace trainyard::engine
