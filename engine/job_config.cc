// JobSpec -> engine configs. See job_config.h.
#include "engine/job_config.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "spec/spec.h"

namespace trainyard::engine {
namespace {

using ::trainyard::v1::JobSpec;

absl::Status CheckSupported(const JobSpec& spec) {
  const bool lm_data = spec.data().has_text() || spec.data().has_tokens();
  if (spec.model().has_gpt()) {
    if (!lm_data) {
      return absl::InvalidArgumentError(
          "data: a GPT model trains on text or token data (data.text or "
          "data.tokens)");
    }
  } else if (spec.model().has_mlp()) {
    if (!spec.data().has_mnist()) {
      return absl::InvalidArgumentError(
          "data: an MLP model trains on MNIST data (data.mnist)");
    }
  } else {
    return absl::InvalidArgumentError("model: required (mlp or gpt)");
  }
#ifndef YARD_CUDA
  if (spec.resources().gpus() > 0) {
    return absl::InvalidArgumentError(
        "resources.gpus: GPU training is not supported by this build of the "
        "engine (built without CUDA; set gpus: 0 to train on CPU threads)");
  }
#endif
  return absl::OkStatus();
}

absl::StatusOr<MnistFiles> ResolveMnist(const trainyard::v1::MnistData& m,
                                        const std::string& root) {
  MnistFiles files;
  files.holdout = m.holdout();
  ASSIGN_OR_RETURN(files.images, spec::ResolveDataPath("data.mnist.images",
                                                       root, m.images(), true));
  ASSIGN_OR_RETURN(files.labels, spec::ResolveDataPath("data.mnist.labels",
                                                       root, m.labels(), true));
  if (!m.eval_images().empty()) {
    ASSIGN_OR_RETURN(files.eval_images,
                     spec::ResolveDataPath("data.mnist.eval_images", root,
                                           m.eval_images(), true));
    ASSIGN_OR_RETURN(files.eval_labels,
                     spec::ResolveDataPath("data.mnist.eval_labels", root,
                                           m.eval_labels(), true));
  }
  return files;
}

absl::StatusOr<TextFiles> ResolveText(const trainyard::v1::TextData& t,
                                      const std::string& root) {
  TextFiles files;
  files.char_tokenizer = t.tokenizer() == trainyard::v1::CHAR;
  ASSIGN_OR_RETURN(files.train, spec::ResolveDataPath("data.text.train", root,
                                                      t.train(), true));
  if (!t.eval().empty()) {
    ASSIGN_OR_RETURN(files.eval, spec::ResolveDataPath("data.text.eval", root,
                                                       t.eval(), true));
  }
  return files;
}

absl::StatusOr<TokenFiles> ResolveTokens(const trainyard::v1::TokenShards& t,
                                         const std::string& root) {
  TokenFiles files;
  for (int i = 0; i < t.train_size(); ++i) {
    ASSIGN_OR_RETURN(
        files.train.emplace_back(),
        spec::ResolveDataPath(absl::StrCat("data.tokens.train[", i, "]"), root,
                              t.train(i), true));
  }
  for (int i = 0; i < t.eval_size(); ++i) {
    ASSIGN_OR_RETURN(
        files.eval.emplace_back(),
        spec::ResolveDataPath(absl::StrCat("data.tokens.eval[", i, "]"), root,
                              t.eval(i), true));
  }
  return files;
}

absl::Status FillGpt(const JobSpec& spec, const std::string& root,
                     EngineJob* job) {
  const auto& g = spec.model().gpt();
  job->is_gpt = true;
  job->gpt = {g.n_layer(), g.n_head(), g.d_model(), g.seq_len(),
              g.vocab_size()};
  if (!g.init_from().empty()) {
    ASSIGN_OR_RETURN(job->gpt_init_from,
                     spec::ResolveModelFolder("model.gpt.init_from", root,
                                              g.init_from(), true));
  }
  if (spec.data().has_text()) {
    ASSIGN_OR_RETURN(job->text, ResolveText(spec.data().text(), root));
  } else {
    ASSIGN_OR_RETURN(job->tokens, ResolveTokens(spec.data().tokens(), root));
  }
  job->trainer.model_description = GptDescription(job->gpt);
  return absl::OkStatus();
}

TrainerConfig TrainerConfigFromSpec(const JobSpec& spec) {
  const auto& opt = spec.optimizer();
  TrainerConfig t;
  t.total_steps = spec.steps();
  t.micro_batch = spec.batch().micro_batch();
  t.grad_accum = spec.batch().grad_accum();
  t.lr = opt.lr();
  t.warmup_steps = opt.warmup_steps();
  t.min_lr_ratio = opt.min_lr_ratio();
  t.optimizer.beta1 = opt.beta1();
  t.optimizer.beta2 = opt.beta2();
  t.optimizer.eps = opt.eps();
  t.optimizer.weight_decay = opt.weight_decay();
  t.optimizer.grad_clip = opt.grad_clip();
  t.log_every_steps = spec.log_every_steps();
  t.eval_every_steps = spec.eval().every_steps();
  t.eval_max_batches = spec.eval().max_batches();
  t.early_stop_patience = spec.eval().patience();
  t.early_stop_min_delta = spec.eval().min_delta();
  t.checkpoint.every_steps = spec.checkpoint().every_steps();
  t.checkpoint.keep_last = spec.checkpoint().keep_last();
  t.checkpoint.keep_best = spec.checkpoint().keep_best();
  t.seed = spec.seed();
  t.fingerprint = SpecFingerprint(spec);
  return t;
}

uint64_t Fnv1a64(absl::string_view data) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

DType ActivationDType(trainyard::v1::Precision precision) {
  return precision == trainyard::v1::BF16 ? DType::kBF16 : DType::kF32;
}

std::string SpecFingerprint(const JobSpec& spec) {
  JobSpec shaping;
  *shaping.mutable_model() = spec.model();
  *shaping.mutable_data() = spec.data();
  *shaping.mutable_optimizer() = spec.optimizer();
  *shaping.mutable_batch() = spec.batch();
  shaping.set_steps(spec.steps());
  shaping.set_precision(spec.precision());
  shaping.set_seed(spec.seed());
  if (spec.has_warm_start()) *shaping.mutable_warm_start() = spec.warm_start();
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream raw(&bytes);
    google::protobuf::io::CodedOutputStream out(&raw);
    out.SetSerializationDeterministic(true);
    shaping.SerializeToCodedStream(&out);
  }
  return absl::StrFormat("%016x", Fnv1a64(bytes));
}

MemoryEstimate EstimateSpecMemory(const JobSpec& spec, DeviceKind device,
                                  AttentionState cuda_attention) {
  const int64_t batch = spec.batch().micro_batch();
  const int threads = std::max(1, spec.resources().cpu_threads());
  if (spec.model().has_gpt()) {
    const auto& g = spec.model().gpt();
    return EstimateGptMemory(
        {g.n_layer(), g.n_head(), g.d_model(), g.seq_len(), g.vocab_size()},
        batch, threads, device, ActivationDType(spec.precision()),
        cuda_attention);
  }
  const auto& m = spec.model().mlp();
  MlpConfig mlp{
      m.input_dim(), {m.hidden().begin(), m.hidden().end()}, m.num_classes()};
  return EstimateMlpMemory(mlp, batch, threads, device,
                           ActivationDType(spec.precision()));
}

std::string DefaultCheckpointDir(const JobSpec& spec) {
  std::string name;
  for (char c : spec.name()) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    name.push_back(ok ? c : '_');
  }
  if (name.empty() || name.find_first_not_of('.') == std::string::npos) {
    name = "run";
  }
  return "checkpoints/" + name;
}

absl::StatusOr<EngineJob> EngineJobFromSpec(const JobSpec& spec,
                                            const JobConfigOptions& options) {
  RETURN_IF_ERROR(CheckSupported(spec));
  EngineJob job;
  job.name = spec.name();
  job.trainer = TrainerConfigFromSpec(spec);
  if (spec.model().has_gpt()) {
    RETURN_IF_ERROR(FillGpt(spec, options.data_root, &job));
  } else {
    const auto& mlp = spec.model().mlp();
    job.mlp.input_dim = mlp.input_dim();
    job.mlp.num_classes = mlp.num_classes();
    job.mlp.hidden.assign(mlp.hidden().begin(), mlp.hidden().end());
    ASSIGN_OR_RETURN(job.mnist,
                     ResolveMnist(spec.data().mnist(), options.data_root));
  }
  if (spec.has_warm_start() && options.warm_start.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("warm_start: a server picks job ", spec.warm_start().job(),
                     "'s checkpoint; without one, give the checkpoint itself "
                     "(yard-train run --warm-start DIR)"));
  }
  if (!options.warm_start.empty() && !job.gpt_init_from.empty()) {
    return absl::InvalidArgumentError(
        "warm_start: not with model.gpt.init_from: the weights come from one "
        "or the other");
  }
  job.warm_start = options.warm_start;
  job.trainer.checkpoint.dir = options.checkpoint_dir.empty()
                                   ? DefaultCheckpointDir(spec)
                                   : options.checkpoint_dir;
  job.threads =
      options.threads > 0 ? options.threads : spec.resources().cpu_threads();
  if (job.threads < 1) job.threads = 1;
  job.ranks_on_host = std::max(1, options.ranks_on_host);
  job.gpus = spec.resources().gpus();
  job.activation_dtype = ActivationDType(spec.precision());
  return job;
}

}  // namespace trainyard::engine
