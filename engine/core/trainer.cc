// The training loop. See trainer.h.
#include "engine/core/trainer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "engine/core/checkpoint.h"
#include "engine/core/file_io.h"

namespace trainyard::engine {
namespace {

// What a data-parallel step sums besides the gradients: loss sum, examples,
// tokens, samples and the stop flag.
constexpr int64_t kFigures = 5;

absl::Status CheckConfig(const TrainerConfig& c) {
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("trainer: ", what));
  };
  if (c.total_steps < 0) return bad("total_steps must be >= 0");
  if (c.micro_batch < 1) return bad("micro_batch must be >= 1");
  if (c.grad_accum < 1) return bad("grad_accum must be >= 1");
  if (!(c.lr > 0)) return bad("lr must be > 0");
  if (c.warmup_steps < 0) return bad("warmup_steps must be >= 0");
  if (!(c.min_lr_ratio >= 0 && c.min_lr_ratio <= 1)) {
    return bad("min_lr_ratio must be in [0, 1]");
  }
  if (c.log_every_steps < 1) return bad("log_every_steps must be >= 1");
  if (c.eval_every_steps < 0 || c.eval_max_batches < 0) {
    return bad("eval_every_steps and eval_max_batches must be >= 0");
  }
  if (c.early_stop_patience < 0 ||
      !(c.early_stop_min_delta >= 0 && std::isfinite(c.early_stop_min_delta))) {
    return bad("early_stop_patience and early_stop_min_delta must be >= 0");
  }
  if ((c.early_stop_patience > 0 || c.checkpoint.keep_best) &&
      c.eval_every_steps == 0) {
    return bad(
        "early stopping and keep_best need periodic evaluations "
        "(eval_every_steps)");
  }
  if (c.checkpoint.every_steps < 0 || c.checkpoint.keep_last < 1) {
    return bad("checkpoint every_steps must be >= 0 and keep_last >= 1");
  }
  if (c.allreduce_bucket_bytes < 0) {
    return bad("allreduce_bucket_bytes must be >= 0");
  }
  return absl::OkStatus();
}

// Examples [begin, begin + count) of `b`.
Batch SliceBatch(const Batch& b, int64_t begin, int64_t count) {
  Batch out;
  out.size = count;
  out.feature_dim = b.feature_dim;
  out.seq_len = b.seq_len;
  out.next = b.next;
  auto rows = [&](const auto& v, auto& dst) {
    if (v.empty()) return;
    const int64_t width = static_cast<int64_t>(v.size()) / b.size;
    dst.assign(v.begin() + begin * width, v.begin() + (begin + count) * width);
  };
  rows(b.features, out.features);
  rows(b.tokens, out.tokens);
  rows(b.targets, out.targets);
  return out;
}

}  // namespace

Trainer::Trainer(const TrainerConfig& config, Model* model, Backend* backend,
                 BatchSource* train, const ExampleSet* eval,
                 TrainerEventSink* sink, Clock* clock, Collective* collective)
    : config_(config),
      schedule_{config.lr, config.warmup_steps, config.total_steps,
                config.min_lr_ratio},
      model_(model),
      backend_(backend),
      train_(train),
      eval_(eval),
      sink_(sink),
      clock_(clock),
      collective_(collective),
      rng_(config.seed),
      early_stopping_(config.early_stop_patience, config.early_stop_min_delta,
                      config.checkpoint.keep_best) {}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(
    const TrainerConfig& config, Model* model, Backend* backend,
    BatchSource* train, const ExampleSet* eval, TrainerEventSink* sink,
    Clock* clock, Collective* collective) {
  RETURN_IF_ERROR(CheckConfig(config));
  if (config.micro_batch > model->max_batch()) {
    return absl::InvalidArgumentError(
        absl::StrCat("trainer: micro_batch ", config.micro_batch,
                     " exceeds the model's max batch ", model->max_batch()));
  }
  if ((config.early_stop_patience > 0 || config.checkpoint.keep_best) &&
      eval == nullptr && (collective == nullptr || collective->rank() == 0)) {
    return absl::InvalidArgumentError(
        "trainer: early stopping and keep_best need an evaluation set");
  }
  std::unique_ptr<Trainer> t(new Trainer(config, model, backend, train, eval,
                                         sink, clock, collective));
  ASSIGN_OR_RETURN(t->optimizer_, AdamW::Create(config.optimizer,
                                                &model->parameters(), backend));
  if (t->world_size() > 1) {
    t->gradient_sum_ = std::make_unique<OverlappedGradientSum>(
        PlanGradientBuckets(model->parameters(),
                            config.allreduce_bucket_bytes / 4),
        model->parameters().size(), collective);
    ASSIGN_OR_RETURN(t->figures_, backend->Allocate(kFigures * 4));
  }
  RETURN_IF_ERROR(model->InitializeParameters(t->rng_));
  return t;
}

absl::StatusOr<Trainer::Outcome> Trainer::Run(const std::atomic<bool>* stop) {
  stop_ = stop;
  RETURN_IF_ERROR(Start());
  while (!done()) {
    // One rank alone must not stop: the others would wait for it forever.
    const bool stopping =
        world_size() > 1 ? agreed_stop_ : stop != nullptr && stop->load();
    if (stopping) {
      RETURN_IF_ERROR(Interrupt());
      return Outcome::kInterrupted;
    }
    RETURN_IF_ERROR(Advance());
  }
  RETURN_IF_ERROR(Finish());
  return Outcome::kFinished;
}

absl::Status Trainer::Start() {
  run_start_ = window_start_ = clock_->Now();
  std::string resumed_from;
  if (!config_.checkpoint.dir.empty()) {
    // Fail now, not at the first checkpoint many steps in.
    RETURN_IF_ERROR(MakeDirectories(config_.checkpoint.dir));
    ASSIGN_OR_RETURN(std::optional<LatestCheckpoint> latest,
                     ReadLatestCheckpoint(config_.checkpoint.dir));
    if (latest.has_value()) {
      for (const std::string& why : latest->skipped) {
        YARD_LOG(WARNING) << "skipping unreadable checkpoint: " << why;
      }
      RETURN_IF_ERROR(Restore(latest->path, latest->checkpoint));
      resumed_from = latest->path;
    }
  }
  RETURN_IF_ERROR(train_->Seek(cursor_));
  Emit(TrainStartedEvent{step_, config_.total_steps, model_->num_parameters(),
                         resumed_from, std::string(backend_->name())});
  if (before_first_step_ && !done()) return before_first_step_();
  return absl::OkStatus();
}

absl::Status Trainer::RehearseStep() {
  ASSIGN_OR_RETURN(Batch batch, NextMicroBatch());
  const absl::StatusOr<ForwardStats> stats =
      model_->ForwardBackward(batch, config_.grad_accum * world_size());
  const absl::Status ran = backend_->Synchronize();
  model_->ZeroGradients();
  RETURN_IF_ERROR(stats.status());
  RETURN_IF_ERROR(ran);
  return train_->Seek(cursor_);
}

absl::Status Trainer::Restore(const std::string& path, const Checkpoint& ckpt) {
  auto refuse = [&](absl::string_view why) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot resume from ", path, ": ", why));
  };
  if (!config_.fingerprint.empty() &&
      ckpt.meta.fingerprint != config_.fingerprint) {
    return refuse(absl::StrCat(
        "it was written for a different job configuration (fingerprint ",
        ckpt.meta.fingerprint, ", this job has ", config_.fingerprint,
        "); use another checkpoint directory"));
  }
  if (ckpt.meta.step > config_.total_steps) {
    return refuse(absl::StrCat("its step ", ckpt.meta.step,
                               " is past the job's ", config_.total_steps,
                               " steps"));
  }
  // Weights then moments, each matched by name; all checked before any is
  // copied so a refused checkpoint leaves the fresh state untouched.
  std::vector<std::tuple<std::string, Shape, float*>> wanted;
  for (const Parameter& p : model_->parameters()) {
    wanted.emplace_back(p.name, p.shape, p.value);
  }
  for (const AdamW::MomentRef& m : optimizer_->moments()) {
    wanted.emplace_back(m.name, m.shape, m.data);
  }
  if (wanted.size() != ckpt.tensors.size()) {
    return refuse(absl::StrCat("it holds ", ckpt.tensors.size(),
                               " tensors, the model and optimizer have ",
                               wanted.size()));
  }
  std::map<std::string, const HostTensor*> by_name;
  for (const HostTensor& t : ckpt.tensors) by_name[t.name] = &t;
  for (const auto& [name, shape, data] : wanted) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return refuse(absl::StrCat("tensor ", name, " is missing"));
    }
    if (it->second->shape != shape) {
      return refuse(absl::StrCat("tensor ", name, " has shape ",
                                 ShapeString(it->second->shape), ", expected ",
                                 ShapeString(shape)));
    }
  }
  ASSIGN_OR_RETURN(rng_, Rng::FromState(ckpt.meta.rng_state));
  for (const auto& [name, shape, data] : wanted) {
    const HostTensor& t = *by_name[name];
    backend_->CopyToDevice(data, t.data.data(), t.data.size() * 4);
  }
  if (ckpt.meta.early_stopping.has_value()) {
    if (absl::Status s = early_stopping_.Restore(*ckpt.meta.early_stopping);
        !s.ok()) {
      return refuse(s.message());
    }
    // A run that stopped early and is resumed stops again at once.
    stop_early_ = early_stopping_.should_stop();
  }
  step_ = ckpt.meta.step;
  cursor_ = ckpt.meta.cursor;
  if (ckpt.meta.figures.has_value()) {
    last_train_loss_ = ckpt.meta.figures->train_loss;
    // The report under way goes on where it was, so its loss is the
    // straight run's (the throughput counts from the resume only).
    window_loss_sum_ = ckpt.meta.figures->window_loss_sum;
    window_examples_ = ckpt.meta.figures->window_loss_terms;
    if (ckpt.meta.figures->eval_examples > 0) {
      // Evaluated (and seen by the early stopping) before it was saved.
      last_eval_ = {ckpt.meta.figures->eval_loss,
                    ckpt.meta.figures->eval_accuracy,
                    ckpt.meta.figures->eval_examples};
      last_eval_step_ = step_;
    }
  }
  optimizer_->set_step_count(step_);
  last_checkpoint_path_ = path;
  last_checkpoint_step_ = step_;
  return backend_->Synchronize();
}

absl::StatusOr<Batch> Trainer::NextMicroBatch() {
  ASSIGN_OR_RETURN(Batch batch, train_->Next());
  const int world = world_size();
  if (world == 1) return batch;
  if (batch.size != config_.micro_batch * world) {
    return absl::InternalError(absl::StrCat(
        "trainer: the data gave a batch of ", batch.size, " examples, ",
        "expected micro_batch x ranks = ", config_.micro_batch * world));
  }
  return SliceBatch(batch, collective_->rank() * config_.micro_batch,
                    config_.micro_batch);
}

absl::StatusOr<ForwardStats> Trainer::ForwardBackward(const Batch& batch,
                                                      bool last_micro_batch) {
  // The step's loss is the mean over all its loss terms (examples, or
  // predicted tokens for language models) on all ranks.
  const int64_t parts = config_.grad_accum * world_size();
  if (gradient_sum_ == nullptr || !last_micro_batch) {
    return model_->ForwardBackward(batch, parts);
  }
  gradient_sum_->Begin();
  model_->set_gradients_final_callback([this](size_t begin, size_t end) {
    gradient_sum_->MarkFinal(begin, end);
  });
  absl::StatusOr<ForwardStats> stats = model_->ForwardBackward(batch, parts);
  model_->set_gradients_final_callback(nullptr);
  return stats;
}

absl::Status Trainer::ReduceStep(ForwardStats* step, int64_t* samples) {
  // Loss figures ride along with the gradients, and so does this rank's
  // wish to stop, so agreeing costs no extra round trip.
  const bool wants_stop = stop_ != nullptr && stop_->load();
  float figures[kFigures] = {
      static_cast<float>(step->loss_sum), static_cast<float>(step->examples),
      static_cast<float>(step->tokens), static_cast<float>(*samples),
      wants_stop ? 1.0f : 0.0f};
  backend_->CopyToDevice(figures_->data(), figures, sizeof(figures));
  // Every started bucket is waited for, even when a later one fails: the
  // collective must not touch the gradients once this returns.
  if (absl::Status s = gradient_sum_->Finish({{figures_->f32(), kFigures}});
      !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("step ", step_ + 1, ": summing gradients over ",
                               world_size(), " ranks: ", s.message()));
  }
  backend_->CopyToHost(figures, figures_->data(), sizeof(figures));
  RETURN_IF_ERROR(backend_->Synchronize());
  step->loss_sum = figures[0];
  step->examples = static_cast<int64_t>(figures[1]);
  step->tokens = static_cast<int64_t>(figures[2]);
  *samples = static_cast<int64_t>(figures[3]);
  agreed_stop_ = figures[4] > 0;
  return absl::OkStatus();
}

absl::Status Trainer::Advance() {
  const double lr = schedule_.At(step_);
  const int world = world_size();
  model_->ZeroGradients();
  ForwardStats step;
  int64_t samples = 0;
  for (int64_t micro = 0; micro < config_.grad_accum; ++micro) {
    ASSIGN_OR_RETURN(Batch batch, NextMicroBatch());
    ASSIGN_OR_RETURN(ForwardStats stats,
                     ForwardBackward(batch, micro + 1 == config_.grad_accum));
    step.loss_sum += stats.loss_sum;
    step.examples += stats.examples;
    step.tokens += stats.tokens;
    samples += batch.size;
    cursor_ = batch.next;
  }
  if (world > 1) RETURN_IF_ERROR(ReduceStep(&step, &samples));
  window_loss_sum_ += step.loss_sum;
  window_examples_ += step.examples;
  window_tokens_ += step.tokens;
  window_samples_ += samples;
  ASSIGN_OR_RETURN(OptimizerStepStats opt, optimizer_->Step(lr));
  ++step_;
  ++window_steps_;
  if (step_ % config_.log_every_steps == 0 || done()) {
    ReportProgress(lr, opt.grad_norm);
  }
  if (done()) return absl::OkStatus();  // Finish evaluates and saves
  bool new_best = false;
  if (config_.eval_every_steps > 0 && step_ % config_.eval_every_steps == 0) {
    RETURN_IF_ERROR(EvaluateAndReport());
    RETURN_IF_ERROR(AfterEvaluation(&new_best));
  }
  if ((config_.checkpoint.every_steps > 0 &&
       step_ % config_.checkpoint.every_steps == 0) ||
      (new_best && config_.checkpoint.keep_best)) {
    RETURN_IF_ERROR(SaveCheckpoint().status());
  }
  // Throughput counts training only, not the evaluation or checkpoint that
  // followed a report.
  if (window_steps_ == 0) window_start_ = clock_->Now();
  return absl::OkStatus();
}

void Trainer::ReportProgress(double lr, double grad_norm) {
  const absl::Time now = clock_->Now();
  const double seconds = absl::ToDoubleSeconds(now - window_start_);
  TrainProgressEvent e;
  e.step = step_;
  e.total_steps = config_.total_steps;
  e.loss = window_examples_ > 0 ? window_loss_sum_ / window_examples_ : 0;
  e.lr = lr;
  e.grad_norm = grad_norm;
  e.samples_per_second = seconds > 0 ? window_samples_ / seconds : 0;
  e.tokens_per_second = seconds > 0 ? window_tokens_ / seconds : 0;
  e.memory_bytes = backend_->peak_allocated_bytes();
  last_train_loss_ = e.loss;
  Emit(e);
  window_loss_sum_ = 0;
  window_examples_ = 0;
  window_tokens_ = 0;
  window_samples_ = 0;
  window_steps_ = 0;
  window_start_ = now;
}

absl::StatusOr<EvalMetrics> Trainer::Evaluate() {
  EvalMetrics m;
  if (eval_ == nullptr || eval_->size() == 0) return m;
  const int64_t batch_size = model_->max_batch();
  int64_t limit = eval_->size();
  if (config_.eval_max_batches > 0) {
    limit = std::min(limit, config_.eval_max_batches * batch_size);
  }
  double loss_sum = 0;
  int64_t correct = 0;
  std::vector<int64_t> indices;
  Batch batch;
  for (int64_t begin = 0; begin < limit; begin += batch_size) {
    const int64_t n = std::min(batch_size, limit - begin);
    indices.resize(n);
    for (int64_t i = 0; i < n; ++i) indices[i] = begin + i;
    eval_->Gather(indices, &batch);
    ASSIGN_OR_RETURN(ForwardStats stats, model_->Forward(batch));
    loss_sum += stats.loss_sum;
    correct += stats.correct;
    m.examples += stats.examples;
  }
  m.loss = loss_sum / m.examples;
  m.accuracy = static_cast<double>(correct) / m.examples;
  return m;
}

absl::Status Trainer::EvaluateAndReport() {
  if (eval_ == nullptr || !leader()) return absl::OkStatus();
  ASSIGN_OR_RETURN(last_eval_, Evaluate());
  last_eval_step_ = step_;
  Emit(EvalResultEvent{step_, last_eval_.loss, last_eval_.accuracy,
                       last_eval_.examples});
  return absl::OkStatus();
}

bool Trainer::EvaluatedThisStep() const {
  return leader() && last_eval_step_ == step_ && last_eval_.examples > 0;
}

absl::Status Trainer::AfterEvaluation(bool* new_best) {
  if (!early_stopping_.enabled()) return absl::OkStatus();
  bool stop = false;
  if (EvaluatedThisStep()) {
    const EarlyStopping::Verdict verdict =
        early_stopping_.Observe(step_, last_eval_.loss);
    stop = verdict.stop;
    *new_best = verdict.improved;
  }
  if (world_size() > 1 && config_.early_stop_patience > 0) {
    // Only rank 0 evaluates; every rank must stop after the same step.
    float figures[kFigures] = {stop ? 1.0f : 0.0f};
    backend_->CopyToDevice(figures_->data(), figures, sizeof(figures));
    const FloatSpan span{figures_->f32(), kFigures};
    if (absl::Status s = collective_->AllReduceSum({&span, 1}); !s.ok()) {
      return absl::Status(
          s.code(),
          absl::StrCat("step ", step_, ": agreeing on early stopping over ",
                       world_size(), " ranks: ", s.message()));
    }
    backend_->CopyToHost(figures, figures_->data(), sizeof(figures));
    RETURN_IF_ERROR(backend_->Synchronize());
    stop = figures[0] > 0;
  }
  stop_early_ = stop;
  return absl::OkStatus();
}

std::vector<HostTensor> Trainer::StateTensors() const {
  std::vector<HostTensor> out;
  auto add = [&](const std::string& name, const Shape& shape, const float* d) {
    HostTensor t{name, shape, std::vector<float>(NumElements(shape))};
    backend_->CopyToHost(t.data.data(), d, t.data.size() * 4);
    out.push_back(std::move(t));
  };
  for (const Parameter& p : model_->parameters()) add(p.name, p.shape, p.value);
  for (const AdamW::MomentRef& m : optimizer_->moments()) {
    add(m.name, m.shape, m.data);
  }
  return out;
}

absl::StatusOr<std::string> Trainer::SaveCheckpoint() {
  if (config_.checkpoint.dir.empty() || !leader()) return std::string();
  Checkpoint ckpt;
  ckpt.meta = {step_,
               rng_.SerializeState(),
               cursor_,
               config_.fingerprint,
               config_.model_description,
               config_.tokenizer,
               std::nullopt,
               std::nullopt};
  if (early_stopping_.enabled() && early_stopping_.state().best_step >= 0) {
    ckpt.meta.early_stopping = early_stopping_.state();
  }
  StepFigures figures;
  figures.train_loss = CurrentTrainLoss();
  figures.window_loss_sum = window_loss_sum_;
  figures.window_loss_terms = window_examples_;
  if (EvaluatedThisStep() && std::isfinite(last_eval_.loss)) {
    figures.eval_loss = last_eval_.loss;
    figures.eval_accuracy = last_eval_.accuracy;
    figures.eval_examples = last_eval_.examples;
  }
  ckpt.meta.figures = figures;
  ckpt.meta.world_size = world_size();
  ckpt.tensors = StateTensors();
  RETURN_IF_ERROR(backend_->Synchronize());
  ASSIGN_OR_RETURN(std::string path,
                   WriteCheckpoint(config_.checkpoint.dir, ckpt));
  RETURN_IF_ERROR(PruneCheckpoints(
      config_.checkpoint.dir, config_.checkpoint.keep_last, BestStepKept()));
  last_checkpoint_path_ = path;
  last_checkpoint_step_ = step_;
  Emit(CheckpointSavedEvent{step_, path});
  return path;
}

int64_t Trainer::BestStepKept() const {
  if (!config_.checkpoint.keep_best) return -1;
  return early_stopping_.state().best_step;
}

double Trainer::CurrentTrainLoss() const {
  return window_examples_ > 0 ? window_loss_sum_ / window_examples_
                              : last_train_loss_;
}

absl::Status Trainer::Finish() {
  if (last_eval_step_ != step_) {
    RETURN_IF_ERROR(EvaluateAndReport());
    // The final evaluation may be the best one (only keep_best cares: the
    // run ends here either way).
    if (config_.checkpoint.keep_best && EvaluatedThisStep()) {
      early_stopping_.Observe(step_, last_eval_.loss);
    }
  }
  if (last_checkpoint_step_ != step_)
    RETURN_IF_ERROR(SaveCheckpoint().status());
  TrainFinishedEvent e;
  e.step = step_;
  e.train_loss = CurrentTrainLoss();
  e.eval_loss = last_eval_.loss;
  e.eval_accuracy = last_eval_.accuracy;
  e.checkpoint_path = last_checkpoint_path_;
  e.wall_seconds = absl::ToDoubleSeconds(clock_->Now() - run_start_);
  if (stop_early_ && step_ < config_.total_steps) {
    e.stopped_early = early_stopping_.Reason();
  }
  if (BestStepKept() >= 0 && !config_.checkpoint.dir.empty()) {
    e.best_step = BestStepKept();
    e.best_eval_loss = early_stopping_.state().best_loss;
    e.best_checkpoint_path = absl::StrCat(config_.checkpoint.dir, "/",
                                          CheckpointDirName(e.best_step));
  }
  Emit(e);
  return absl::OkStatus();
}

absl::Status Trainer::Interrupt() {
  if (last_checkpoint_step_ != step_)
    RETURN_IF_ERROR(SaveCheckpoint().status());
  Emit(TrainInterruptedEvent{step_, last_checkpoint_path_});
  return absl::OkStatus();
}

}  // namespace trainyard::engine
