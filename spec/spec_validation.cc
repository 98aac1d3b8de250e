// JobSpec validation: every field against explicit limits, data paths inside
// the data root. All problems found are reported together, each starting
// with its field path, so a user fixes a spec in one round. Thread-safe.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/field_errors.h"
#include "common/utf8.h"
#include "spec/limits.h"
#include "spec/spec.h"

namespace trainyard::spec {
namespace {

using ::trainyard::v1::JobSpec;

constexpr int32_t kMnistInputs = 784;
constexpr int32_t kMnistClasses = 10;

// The options' limits, none above spec/limits.h: the overflow guarantees
// there hold only up to those.
Limits Effective(const Limits& l) {
  Limits e;
  e.max_steps = std::min(l.max_steps, kMaxSteps);
  e.max_parameters = std::min(l.max_parameters, kMaxParameters);
  e.max_layer_width = std::min(l.max_layer_width, kMaxLayerWidth);
  e.max_layers = std::min(l.max_layers, kMaxLayers);
  e.max_micro_batch = std::min(l.max_micro_batch, kMaxMicroBatch);
  e.max_grad_accum = std::min(l.max_grad_accum, kMaxGradAccum);
  e.max_micro_batch_tokens =
      std::min(l.max_micro_batch_tokens, kMaxMicroBatchTokens);
  e.max_gpus = std::min(l.max_gpus, kMaxGpus);
  e.max_cpu_threads = std::min(l.max_cpu_threads, kMaxCpuThreads);
  e.max_name_length = std::min(l.max_name_length, kMaxNameLength);
  e.max_path_length = std::min(l.max_path_length, kMaxPathLength);
  return e;
}

// "3.2e9": short and unambiguous for counts far beyond a human's reading.
std::string FormatCount(int64_t n) {
  if (n < 1'000'000) return absl::StrCat(n);
  std::string s = absl::StrFormat("%.2g", static_cast<double>(n));
  return absl::StrReplaceAll(s, {{"e+0", "e"}, {"e+", "e"}});
}

// Collects the problems of a spec, each about a field.
class Problems {
 public:
  void Add(absl::string_view field, absl::string_view msg) {
    list_.push_back({std::string(field), std::string(msg)});
  }
  // A data path's problems (ResolveDataPath's errors name their field).
  void Add(const absl::Status& s) {
    if (s.ok()) return;
    std::vector<FieldViolation> about = FieldViolations(s);
    if (about.empty()) about.push_back({"", std::string(s.message())});
    list_.insert(list_.end(), about.begin(), about.end());
  }
  void Range(absl::string_view field, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) {
      Add(field, absl::StrCat("must be in [", lo, ", ", hi, "], got ", v));
    }
  }
  size_t size() const { return list_.size(); }
  absl::Status ToStatus() const {
    if (list_.empty()) return absl::OkStatus();
    return FieldErrors(absl::StatusCode::kInvalidArgument, list_);
  }

 private:
  std::vector<FieldViolation> list_;
};

// Free text shown in listings (CheckFreeText).
void CheckText(absl::string_view field, const std::string& text,
               int64_t max_length, Problems* p) {
  p->Add(CheckFreeText(field, text, max_length));
}

void CheckName(const JobSpec& spec, const Limits& limits, Problems* p) {
  CheckText("name", spec.name(), limits.max_name_length, p);
}

void CheckConcurrency(const JobSpec& spec, Problems* p) {
  const auto& c = spec.concurrency();
  if (c.group().empty() && c.max_running() == 0) return;
  if (c.group().empty()) {
    p->Add("concurrency.group", "required with concurrency.max_running");
  } else {
    CheckText("concurrency.group", c.group(), kMaxNameLength, p);
  }
  p->Range("concurrency.max_running", c.max_running(), 1, kMaxGroupRunning);
}

// The encoded message, so that one spec cannot fill the store however its
// bytes are spread over repeated fields.
void CheckSize(const JobSpec& spec, Problems* p) {
  const size_t bytes = spec.ByteSizeLong();
  if (bytes > static_cast<size_t>(kMaxSpecBytes)) {
    // The whole spec: no field of it (a request's "spec").
    p->Add("", absl::StrCat("the spec is ", bytes,
                            " bytes encoded; the limit is ", kMaxSpecBytes));
  }
}

// Length and encoding first, so the file system only sees sane strings.
bool CheckPathText(absl::string_view field, const std::string& path,
                   const Limits& limits, Problems* p) {
  if (static_cast<int64_t>(path.size()) > limits.max_path_length) {
    p->Add(field, absl::StrCat("at most ", limits.max_path_length, " bytes"));
    return false;
  }
  if (!IsValidUtf8(path)) {
    p->Add(field, "must be valid UTF-8");
    return false;
  }
  return true;
}

void CheckPath(absl::string_view field, const std::string& path,
               const ValidationOptions& options, Problems* p) {
  if (!CheckPathText(field, path, options.limits, p)) return;
  p->Add(ResolveDataPath(std::string_view(field.data(), field.size()),
                         options.data_root, path, options.check_files_exist)
             .status());
}

void CheckModelFolder(const std::string& path, const ValidationOptions& options,
                      Problems* p) {
  constexpr char kField[] = "model.gpt.init_from";
  if (!CheckPathText(kField, path, options.limits, p)) return;
  p->Add(ResolveModelFolder(kField, options.data_root, path,
                            options.check_files_exist)
             .status());
}

void CheckMlp(const JobSpec& spec, const Limits& limits, Problems* p) {
  const auto& mlp = spec.model().mlp();
  if (mlp.hidden_size() == 0) {
    p->Add("model.mlp.hidden", "at least one hidden layer is required");
  } else if (mlp.hidden_size() > limits.max_layers) {
    p->Add("model.mlp.hidden",
           absl::StrCat("at most ", limits.max_layers, " layers, got ",
                        mlp.hidden_size()));
  } else {
    for (int i = 0; i < mlp.hidden_size(); ++i) {
      p->Range(absl::StrCat("model.mlp.hidden[", i, "]"), mlp.hidden(i), 1,
               limits.max_layer_width);
    }
  }
  p->Range("model.mlp.input_dim", mlp.input_dim(), 0, limits.max_layer_width);
  if (mlp.num_classes() != 0) {
    p->Range("model.mlp.num_classes", mlp.num_classes(), 2,
             limits.max_layer_width);
  }
  if (!spec.data().has_mnist() &&
      (spec.data().has_text() || spec.data().has_tokens())) {
    p->Add("model.mlp", "trains on MNIST data, not text or tokens");
  }
  if (spec.data().has_mnist()) {
    if (mlp.input_dim() != 0 && mlp.input_dim() != kMnistInputs) {
      p->Add("model.mlp.input_dim",
             absl::StrCat("must be 784 (or 0) for MNIST data, got ",
                          mlp.input_dim()));
    }
    if (mlp.num_classes() != 0 && mlp.num_classes() != kMnistClasses) {
      p->Add("model.mlp.num_classes",
             absl::StrCat("must be 10 (or 0) for MNIST data, got ",
                          mlp.num_classes()));
    }
  }
}

void CheckGpt(const JobSpec& spec, const ValidationOptions& options,
              Problems* p) {
  const Limits& limits = options.limits;
  const auto& gpt = spec.model().gpt();
  size_t before = p->size();
  p->Range("model.gpt.n_layer", gpt.n_layer(), 1, limits.max_layers);
  p->Range("model.gpt.n_head", gpt.n_head(), 1, kMaxHeads);
  p->Range("model.gpt.d_model", gpt.d_model(), 1, limits.max_layer_width);
  p->Range("model.gpt.seq_len", gpt.seq_len(), 1, kMaxSeqLen);
  p->Range("model.gpt.vocab_size", gpt.vocab_size(), 1, kMaxVocab);
  if (p->size() == before && gpt.d_model() % gpt.n_head() != 0) {
    p->Add("model.gpt.d_model",
           absl::StrCat("must be a multiple of n_head (", gpt.n_head(),
                        "), got ", gpt.d_model()));
  }
  if (p->size() == before &&
      gpt.seq_len() * int64_t{spec.batch().micro_batch()} >
          limits.max_micro_batch_tokens) {
    p->Add("batch.micro_batch",
           absl::StrCat("micro_batch x model.gpt.seq_len must be at most ",
                        limits.max_micro_batch_tokens, " tokens, got ",
                        gpt.seq_len() * int64_t{spec.batch().micro_batch()}));
  }
  if (!gpt.init_from().empty()) {
    CheckModelFolder(gpt.init_from(), options, p);
  }
  const auto& data = spec.data();
  if (data.has_mnist()) {
    p->Add("model.gpt", "trains on text or token data, not MNIST");
  } else if (data.has_text() &&
             data.text().tokenizer() != trainyard::v1::CHAR &&
             gpt.vocab_size() < 256) {
    p->Add("model.gpt.vocab_size",
           absl::StrCat("must be >= 256 for the byte tokenizer, got ",
                        gpt.vocab_size()));
  }
}

void CheckModel(const JobSpec& spec, const ValidationOptions& options,
                Problems* p) {
  const Limits& limits = options.limits;
  size_t before = p->size();
  if (spec.model().has_mlp()) {
    CheckMlp(spec, limits, p);
  } else if (spec.model().has_gpt()) {
    CheckGpt(spec, options, p);
  } else {
    p->Add("model", "required (mlp or gpt)");
    return;
  }
  if (p->size() != before) return;  // sizes are meaningless; skip the count
  int64_t params = CountParameters(spec);
  if (params > limits.max_parameters) {
    p->Add("model", absl::StrCat(FormatCount(params),
                                 " parameters exceeds the limit of ",
                                 FormatCount(limits.max_parameters)));
  }
}

void CheckMnist(const JobSpec& spec, const ValidationOptions& options,
                Problems* p) {
  const auto& m = spec.data().mnist();
  CheckPath("data.mnist.images", m.images(), options, p);
  CheckPath("data.mnist.labels", m.labels(), options, p);
  p->Range("data.mnist.holdout", m.holdout(), 0, kMaxHoldout);
  bool has_eval = !m.eval_images().empty() || !m.eval_labels().empty();
  if (has_eval) {
    CheckPath("data.mnist.eval_images", m.eval_images(), options, p);
    CheckPath("data.mnist.eval_labels", m.eval_labels(), options, p);
    if (m.holdout() != 0) {
      p->Add("data.mnist.holdout", "must be 0 when eval_images is set");
    }
  }
}

// Whether the data has an evaluation set (a held-out split or eval files).
// Text and token data always have one: without data.text.eval or
// data.tokens.eval the last 10% of the tokens is held out.
bool HasEvalSet(const trainyard::v1::DataSpec& data) {
  if (data.has_mnist()) {
    return data.mnist().holdout() > 0 || !data.mnist().eval_images().empty();
  }
  return data.has_text() || data.has_tokens();
}

void CheckEarlyStopping(const JobSpec& spec, Problems* p) {
  const auto& e = spec.eval();
  p->Range("eval.patience", e.patience(), 0, kMaxPatience);
  if (!(std::isfinite(e.min_delta()) && e.min_delta() >= 0)) {
    p->Add("eval.min_delta", "must be a finite number >= 0");
  }
  if (e.patience() <= 0 && e.min_delta() != 0) {
    p->Add("eval.min_delta", "needs eval.patience");
  }
  // Both follow the best periodic evaluation.
  for (const auto& [field, on] :
       {std::pair<const char*, bool>{"eval.patience", e.patience() > 0},
        {"checkpoint.keep_best", spec.checkpoint().keep_best()}}) {
    if (!on) continue;
    if (e.every_steps() <= 0) {
      p->Add(field, "needs periodic evaluations (eval.every_steps > 0)");
    }
    if (!HasEvalSet(spec.data())) {
      p->Add(field,
             "needs an evaluation set (data.mnist.holdout or "
             "data.mnist.eval_images)");
    }
  }
}

// A rung needs a periodic evaluation past it, and one below the last step.
// The factor's default is WithDefaults'; an unset one is checked as it.
void CheckHalving(const JobSpec& spec, Problems* p) {
  if (!spec.has_halving()) return;
  const auto& h = spec.halving();
  if (h.group().empty()) {
    p->Add("halving.group", "required");
  } else {
    CheckText("halving.group", h.group(), kMaxNameLength, p);
  }
  if (h.min_steps() < 1) {
    p->Add("halving.min_steps",
           absl::StrCat("must be at least 1, got ", h.min_steps()));
  } else if (spec.steps() > 0 && h.min_steps() >= spec.steps()) {
    p->Add("halving.min_steps",
           absl::StrCat("must be below steps (", spec.steps(), "), got ",
                        h.min_steps(), ": the first rung is never reached"));
  }
  if (h.factor() != 0) {
    p->Range("halving.factor", h.factor(), 2, kMaxHalvingFactor);
  }
  if (spec.eval().every_steps() <= 0) {
    p->Add("halving", "needs periodic evaluations (eval.every_steps > 0)");
  }
  if (!HasEvalSet(spec.data())) {
    p->Add("halving",
           "needs an evaluation set (data.mnist.holdout or "
           "data.mnist.eval_images)");
  }
}

void CheckData(const JobSpec& spec, const ValidationOptions& options,
               Problems* p) {
  const auto& data = spec.data();
  if (data.has_mnist()) {
    CheckMnist(spec, options, p);
  } else if (data.has_text()) {
    CheckPath("data.text.train", data.text().train(), options, p);
    if (!data.text().eval().empty()) {
      CheckPath("data.text.eval", data.text().eval(), options, p);
    }
    if (!trainyard::v1::Tokenizer_IsValid(data.text().tokenizer())) {
      p->Add("data.text.tokenizer", "must be BYTE or CHAR");
    }
  } else if (data.has_tokens()) {
    const auto& t = data.tokens();
    if (t.train_size() == 0) p->Add("data.tokens.train", "at least one shard");
    if (t.train_size() + t.eval_size() > kMaxTokenShards) {
      p->Add("data.tokens",
             absl::StrCat("at most ", kMaxTokenShards, " shards"));
    } else {
      for (int i = 0; i < t.train_size(); ++i) {
        CheckPath(absl::StrCat("data.tokens.train[", i, "]"), t.train(i),
                  options, p);
      }
      for (int i = 0; i < t.eval_size(); ++i) {
        CheckPath(absl::StrCat("data.tokens.eval[", i, "]"), t.eval(i), options,
                  p);
      }
    }
  } else {
    p->Add("data", "required (mnist, text or tokens)");
  }
}

void CheckOptimizer(const JobSpec& spec, int64_t max_steps, Problems* p) {
  const auto& o = spec.optimizer();
  auto positive = [&](absl::string_view f, bool has, double v) {
    if (has && !(std::isfinite(v) && v > 0)) {
      p->Add(f, "must be a finite number > 0");
    }
  };
  auto non_negative = [&](absl::string_view f, bool has, double v) {
    if (has && !(std::isfinite(v) && v >= 0)) {
      p->Add(f, "must be a finite number >= 0");
    }
  };
  auto beta = [&](absl::string_view f, bool has, double v) {
    if (has && !(v >= 0 && v < 1)) p->Add(f, "must be in [0, 1)");
  };
  positive("optimizer.lr", o.has_lr(), o.lr());
  beta("optimizer.beta1", o.has_beta1(), o.beta1());
  beta("optimizer.beta2", o.has_beta2(), o.beta2());
  positive("optimizer.eps", o.has_eps(), o.eps());
  non_negative("optimizer.weight_decay", o.has_weight_decay(),
               o.weight_decay());
  non_negative("optimizer.grad_clip", o.has_grad_clip(), o.grad_clip());
  if (o.has_min_lr_ratio() &&
      !(o.min_lr_ratio() >= 0 && o.min_lr_ratio() <= 1)) {
    p->Add("optimizer.min_lr_ratio", "must be in [0, 1]");
  }
  p->Range("optimizer.warmup_steps", o.warmup_steps(), 0, max_steps);
}

void CheckDependsOn(const JobSpec& spec, Problems* p) {
  if (spec.depends_on_size() > kMaxDependencies) {
    p->Add("depends_on", absl::StrCat("at most ", kMaxDependencies,
                                      " jobs, got ", spec.depends_on_size()));
    return;
  }
  std::set<std::string> seen;
  for (int i = 0; i < spec.depends_on_size(); ++i) {
    const std::string& id = spec.depends_on(i);
    const std::string field = absl::StrCat("depends_on[", i, "]");
    if (!IsJobIdForm(id)) {
      p->Add(field, NotAJobId(id));
    } else if (!seen.insert(id).second) {
      p->Add(field, absl::StrCat(id, " is listed twice"));
    }
  }
}

void CheckWarmStart(const JobSpec& spec, Problems* p) {
  if (!spec.has_warm_start()) return;
  const auto& w = spec.warm_start();
  if (w.job().empty()) {
    p->Add("warm_start.job", "required");
  } else if (!IsJobIdForm(w.job())) {
    p->Add("warm_start.job", NotAJobId(w.job()));
  }
  p->Range("warm_start.step", w.step(), 0, kMaxSteps);
  if (w.best() && w.step() != 0) {
    p->Add("warm_start.best",
           "not with warm_start.step: give one or the other");
  }
  if (spec.model().has_gpt() && !spec.model().gpt().init_from().empty()) {
    p->Add("warm_start",
           "not with model.gpt.init_from: the weights come from one or the "
           "other");
  }
}

void CheckRun(const JobSpec& spec, const Limits& limits, Problems* p) {
  p->Range("steps", spec.steps(), 1, limits.max_steps);
  // Periods longer than the run are allowed up to the run's limit.
  int64_t max_steps = limits.max_steps;
  p->Range("batch.micro_batch", spec.batch().micro_batch(), 1,
           limits.max_micro_batch);
  if (spec.batch().has_grad_accum()) {
    p->Range("batch.grad_accum", spec.batch().grad_accum(), 1,
             limits.max_grad_accum);
  }
  CheckOptimizer(spec, max_steps, p);
  p->Range("eval.every_steps", spec.eval().every_steps(), 0, max_steps);
  p->Range("eval.max_batches", spec.eval().max_batches(), 0, kMaxEvalBatches);
  CheckEarlyStopping(spec, p);
  p->Range("checkpoint.every_steps", spec.checkpoint().every_steps(), 0,
           max_steps);
  if (spec.checkpoint().has_keep_last()) {
    p->Range("checkpoint.keep_last", spec.checkpoint().keep_last(), 1,
             kMaxKeepLast);
  }
  p->Range("log_every_steps", spec.log_every_steps(), 0, max_steps);
  p->Range("priority", spec.priority(), -kMaxPriority, kMaxPriority);
  p->Range("max_restarts", spec.max_restarts(), 0, kMaxRestarts);
  p->Range("time_limit_s", spec.time_limit_s(), 0, kMaxTimeLimitSeconds);
  CheckDependsOn(spec, p);
  CheckWarmStart(spec, p);
  CheckConcurrency(spec, p);
  CheckHalving(spec, p);
}

// Entries are matched against NVML names as substrings without regard to
// case (scheduler/gpu_models.h): an empty one would match every GPU, and
// a control character or non-ASCII byte no NVML name has.
void CheckGpuModels(const trainyard::v1::Resources& r, Problems* p) {
  if (r.gpu_models_size() == 0) return;
  if (r.gpus() == 0) {
    p->Add("resources.gpu_models", "needs a GPU (resources.gpus >= 1)");
  }
  if (r.gpu_models_size() > kMaxGpuModels) {
    p->Add("resources.gpu_models",
           absl::StrCat("at most ", kMaxGpuModels, " models, got ",
                        r.gpu_models_size()));
    return;
  }
  for (int i = 0; i < r.gpu_models_size(); ++i) {
    const std::string& m = r.gpu_models(i);
    const std::string field = absl::StrCat("resources.gpu_models[", i, "]");
    if (m.empty()) {
      p->Add(field, "must not be empty");
    } else if (static_cast<int64_t>(m.size()) > kMaxGpuModelLength) {
      p->Add(field, absl::StrCat("at most ", kMaxGpuModelLength, " bytes, got ",
                                 m.size()));
    } else if (!std::all_of(m.begin(), m.end(),
                            [](char c) { return c >= 0x20 && c < 0x7f; })) {
      p->Add(field, "printable ASCII only (as NVML names are)");
    }
  }
}

void CheckResources(const JobSpec& spec, const Limits& limits, Problems* p) {
  const auto& r = spec.resources();
  p->Range("resources.gpus", r.gpus(), 0, limits.max_gpus);
  if (r.has_cpu_threads()) {
    p->Range("resources.cpu_threads", r.cpu_threads(), 1,
             limits.max_cpu_threads);
  }
  if (r.has_cpu_ranks()) {
    p->Range("resources.cpu_ranks", r.cpu_ranks(), 1, kMaxCpuRanks);
    if (r.gpus() > 0 && r.cpu_ranks() > 1) {
      p->Add("resources.cpu_ranks",
             "applies to CPU jobs only (a GPU job runs one rank per GPU)");
    }
  }
  if (r.has_max_nodes()) {
    // 0 means "as many as it takes"; more workers than ranks is pointless
    // but harmless, so the bound is the most ranks any job may have.
    p->Range("resources.max_nodes", r.max_nodes(), 0,
             std::max<int64_t>(limits.max_gpus, kMaxCpuRanks));
  }
  CheckGpuModels(r, p);
  if (r.has_gpu_compute_milli()) {
    p->Range("resources.gpu_compute_milli", r.gpu_compute_milli(), 1, 1000);
    if (r.gpus() == 0) {
      p->Add("resources.gpu_compute_milli",
             "needs a GPU (resources.gpus >= 1)");
    }
  }
  if (!trainyard::v1::Precision_IsValid(spec.precision())) {
    p->Add("precision",
           absl::StrCat("must be FP32 or BF16, got ", spec.precision()));
  } else if (spec.precision() == trainyard::v1::BF16 && r.gpus() == 0) {
    p->Add("precision", "BF16 needs a GPU (resources.gpus >= 1)");
  }
}

}  // namespace

absl::Status ValidateJobSpec(const JobSpec& spec,
                             const ValidationOptions& given) {
  ValidationOptions options = given;
  options.limits = Effective(given.limits);
  Problems problems;
  CheckSize(spec, &problems);
  CheckName(spec, options.limits, &problems);
  CheckModel(spec, options, &problems);
  CheckData(spec, options, &problems);
  CheckRun(spec, options.limits, &problems);
  CheckResources(spec, options.limits, &problems);
  return problems.ToStatus();
}

bool IsJobIdForm(const std::string& id) {
  return !id.empty() && static_cast<int64_t>(id.size()) <= kMaxJobIdLength &&
         std::all_of(id.begin(), id.end(), [](char c) {
           return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                  c == '-' || c == '_' || c == '.';
         });
}

std::string NotAJobId(const std::string& id) {
  return absl::StrCat("\"", absl::CHexEscape(id.substr(0, 64)),
                      id.size() > 64 ? "...\"" : "\"", " is not a job id");
}

}  // namespace trainyard::spec
