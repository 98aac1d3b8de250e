// Trainer: the training loop. Each optimizer step zeroes the gradients, runs
// `grad_accum` micro-batches forward and backward, clips by global norm and
// applies AdamW at the scheduled learning rate; every few steps it reports
// progress, evaluates on the held-out set and writes a checkpoint.
//
// Resume is exact: a checkpoint holds the weights, the AdamW moments, the
// step, the RNG state, the data cursor and the loss summed since the last
// progress report, so a run stopped at any checkpoint and resumed ends
// bitwise equal to an uninterrupted run, having reported the same train
// losses.
//
// Data parallel: with a Collective of N ranks, every rank draws the same
// global micro-batch of micro_batch x N examples and trains on its own
// slice of micro_batch; after backward the ranks sum their gradients (and
// the step's loss figures), so all apply the same update and stay bitwise
// equal. Only rank 0 evaluates, writes checkpoints and emits events; all
// ranks resume from the same checkpoint. A stop request is agreed on with
// the next step's sums, so every rank stops after the same step.
//
// The gradient sums overlap the last backward of each step: the gradients
// go in buckets (gradient_buckets.h), each started as soon as backward has
// finished it; the step's figures follow the last bucket. Bucketing never
// changes the result: every element is summed the same way however the
// elements are grouped.
//
// Thread-safety: not thread-safe; one thread drives a Trainer (the
// BatchSource may prefetch on its own thread behind the scenes).
#ifndef TRAINYARD_ENGINE_CORE_TRAINER_H_
#define TRAINYARD_ENGINE_CORE_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "engine/core/adamw.h"
#include "engine/core/backend.h"
#include "engine/core/batch.h"
#include "engine/core/checkpoint.h"
#include "engine/core/collective.h"
#include "engine/core/early_stopping.h"
#include "engine/core/gradient_buckets.h"
#include "engine/core/lr_schedule.h"
#include "engine/core/model.h"
#include "engine/core/rng.h"
#include "engine/core/tensor.h"
#include "engine/core/trainer_events.h"

namespace trainyard::engine {

struct CheckpointPolicy {
  // Checkpoint root; empty turns checkpoints (and resume) off.
  std::string dir;
  int64_t every_steps = 0;  // 0: only at the end and when interrupted
  int keep_last = 3;
  // Also checkpoint each periodic evaluation that is the best so far (as
  // early stopping judges it) and keep the best one past keep_last. Needs
  // eval_every_steps > 0 and an evaluation set.
  bool keep_best = false;
};

struct TrainerConfig {
  int64_t total_steps = 1;
  int64_t micro_batch = 32;
  int64_t grad_accum = 1;
  double lr = 1e-3;
  int64_t warmup_steps = 0;
  double min_lr_ratio = 0.1;
  AdamWConfig optimizer;
  int64_t log_every_steps = 10;
  int64_t eval_every_steps = 0;  // 0: only at the end
  int64_t eval_max_batches = 0;  // 0: the whole eval set
  // Early stopping (early_stopping.h): end the run once this many periodic
  // evaluations in a row have not lowered the best eval loss by more than
  // early_stop_min_delta. 0: off; otherwise needs eval_every_steps > 0 and
  // an evaluation set. With several ranks, rank 0 decides and the others
  // learn it from a one-float all-reduce after each evaluation.
  int64_t early_stop_patience = 0;
  double early_stop_min_delta = 0;
  CheckpointPolicy checkpoint;
  uint64_t seed = 0;
  // Data parallel: gradients are summed across ranks in buckets of about
  // this many bytes, each started while backward computes the layers before
  // it. 0: one all-reduce of everything after backward (no overlap).
  int64_t allreduce_bucket_bytes = int64_t{25} << 20;
  // Identifies the job's configuration; a checkpoint with a different one is
  // refused on resume.
  std::string fingerprint;
  // Written into every checkpoint's metadata (see CheckpointMeta).
  Json model_description;
  Json tokenizer;
};

struct EvalMetrics {
  double loss = 0;
  double accuracy = 0;
  int64_t examples = 0;
};

class Trainer {
 public:
  enum class Outcome { kFinished, kInterrupted };

  // Initializes the model's weights from config.seed. Everything passed in
  // must outlive the trainer; `eval` may be null (no evaluation), and so may
  // `collective` (one rank). With N ranks, `train` must yield batches of
  // micro_batch x N examples.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(
      const TrainerConfig& config, Model* model, Backend* backend,
      BatchSource* train, const ExampleSet* eval, TrainerEventSink* sink,
      Clock* clock = Clock::Real(), Collective* collective = nullptr);

  // Start(), then Advance() until done or until *stop turns true (checked
  // between steps; with several ranks, once any rank saw it), then Finish()
  // or Interrupt().
  absl::StatusOr<Outcome> Run(const std::atomic<bool>* stop);

  // The pieces of Run, for callers that drive steps themselves.
  // Resumes from the newest readable checkpoint when there is one and emits
  // TrainStarted; then, unless the run is done already, runs the
  // before-first-step work (set_before_first_step).
  absl::Status Start();
  // Work for Start to do before the first step (a rehearsal, say): its
  // error is Start's.
  void set_before_first_step(std::function<absl::Status()> fn) {
    before_first_step_ = std::move(fn);
  }
  // Runs one micro-batch's forward and backward without training on it:
  // the data stream is put back where it stood and the gradients are
  // zeroed again, so the steps that follow are those of a run without it.
  // For a backend to see every product of a step, e.g. to time their
  // algorithms (CudaBackend::StartGemmTuning). REQUIRES: Start() ran (from
  // before_first_step too).
  absl::Status RehearseStep();
  // The last step is done, or early stopping ended the run.
  bool done() const { return step_ >= config_.total_steps || stop_early_; }
  // One optimizer step plus its periodic report, evaluation and checkpoint.
  absl::Status Advance();
  // Final evaluation and checkpoint; emits TrainFinished.
  absl::Status Finish();
  // Checkpoint (unless one exists for this step); emits TrainInterrupted.
  absl::Status Interrupt();

  absl::StatusOr<EvalMetrics> Evaluate();
  // Writes a checkpoint of the current state (emits CheckpointSaved) and
  // returns its path; "" when checkpoints are off.
  absl::StatusOr<std::string> SaveCheckpoint();

  int64_t step() const { return step_; }
  // Rank 0, or the only rank: the one that evaluates, saves and reports.
  bool leader() const {
    return collective_ == nullptr || collective_->rank() == 0;
  }
  int world_size() const {
    return collective_ == nullptr ? 1 : collective_->world_size();
  }
  // Host copies of the whole training state: weights, then AdamW moments.
  std::vector<HostTensor> StateTensors() const;

 private:
  Trainer(const TrainerConfig& config, Model* model, Backend* backend,
          BatchSource* train, const ExampleSet* eval, TrainerEventSink* sink,
          Clock* clock, Collective* collective);
  // This rank's share of a global micro-batch.
  absl::StatusOr<Batch> NextMicroBatch();
  // One micro-batch's forward and backward (Model::ForwardBackward); the
  // last of a data-parallel step starts the gradient buckets as backward
  // finishes them.
  absl::StatusOr<ForwardStats> ForwardBackward(const Batch& batch,
                                               bool last_micro_batch);
  // Sums the remaining gradients and the step's figures over the ranks.
  absl::Status ReduceStep(ForwardStats* step, int64_t* samples);
  void Emit(const TrainerEvent& event) {
    if (leader()) sink_->Emit(event);
  }
  absl::Status Restore(const std::string& path, const Checkpoint& ckpt);
  void ReportProgress(double lr, double grad_norm);
  absl::Status EvaluateAndReport();
  // This rank evaluated the current step on a non-empty set (rank 0 only):
  // there is a loss for early stopping to observe.
  bool EvaluatedThisStep() const;
  // The train loss a run ending now reports: the mean since the last
  // progress report, else the last reported.
  double CurrentTrainLoss() const;
  // After a periodic evaluation: whether early stopping ends the run here,
  // agreed by all ranks; sets *new_best when it was the best so far (rank
  // 0 only).
  absl::Status AfterEvaluation(bool* new_best);
  // checkpoint.keep_best: the best evaluation's step, else -1.
  int64_t BestStepKept() const;

  const TrainerConfig config_;
  const LrSchedule schedule_;
  Model* const model_;
  Backend* const backend_;
  BatchSource* const train_;
  const ExampleSet* const eval_;
  TrainerEventSink* const sink_;
  Clock* const clock_;
  Collective* const collective_;
  // Set by Run; read by Advance, which tells the other ranks.
  const std::atomic<bool>* stop_ = nullptr;
  bool agreed_stop_ = false;  // some rank asked to stop (several ranks)
  std::unique_ptr<AdamW> optimizer_;
  Rng rng_;
  // Several ranks only: the bucketed sums, and device room for the step's
  // figures (the collective works on the backend's memory).
  std::unique_ptr<OverlappedGradientSum> gradient_sum_;
  std::unique_ptr<DeviceBuffer> figures_;

  int64_t step_ = 0;
  DataCursor cursor_;
  std::string last_checkpoint_path_;
  int64_t last_checkpoint_step_ = -1;
  EvalMetrics last_eval_;
  int64_t last_eval_step_ = -1;
  EarlyStopping early_stopping_;
  bool stop_early_ = false;

  // Progress window since the last report.
  double window_loss_sum_ = 0;
  int64_t window_examples_ = 0;
  int64_t window_tokens_ = 0;
  int64_t window_samples_ = 0;
  int64_t window_steps_ = 0;
  absl::Time window_start_;
  double last_train_loss_ = 0;
  absl::Time run_start_;
  std::function<absl::Status()> before_first_step_;
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_TRAINER_H_
