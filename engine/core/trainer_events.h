// What the trainer reports while it trains, as plain structs (the engine has
// no protobuf inside). They mirror trainyard.v1.TrainerEvent field for field;
// yard-train converts them to that message. A TrainerEventSink receives them
// on the training thread, in order.
#ifndef TRAINYARD_ENGINE_CORE_TRAINER_EVENTS_H_
#define TRAINYARD_ENGINE_CORE_TRAINER_EVENTS_H_

#include <cstdint>
#include <string>
#include <variant>

namespace trainyard::engine {

struct TrainStartedEvent {
  int64_t start_step = 0;
  int64_t total_steps = 0;
  int64_t parameters = 0;
  std::string resumed_from;  // checkpoint path; empty for a fresh run
  std::string backend;
};

struct TrainProgressEvent {
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;  // mean over the steps since the last report
  double lr = 0;
  double grad_norm = 0;  // of the last step, before clipping
  double samples_per_second = 0;
  double tokens_per_second = 0;
  int64_t memory_bytes = 0;
};

struct EvalResultEvent {
  int64_t step = 0;
  double loss = 0;
  double accuracy = 0;
  int64_t examples = 0;
};

struct CheckpointSavedEvent {
  int64_t step = 0;
  std::string path;
};

struct TrainFinishedEvent {
  int64_t step = 0;
  double train_loss = 0;
  double eval_loss = 0;
  double eval_accuracy = 0;
  std::string checkpoint_path;
  double wall_seconds = 0;
  // Why early stopping ended the run before its last step; empty when it
  // ran to the end.
  std::string stopped_early;
  // checkpoint.keep_best: the best evaluation's checkpoint ("" without).
  std::string best_checkpoint_path;
  int64_t best_step = 0;
  double best_eval_loss = 0;
};

struct TrainInterruptedEvent {
  int64_t step = 0;
  std::string checkpoint_path;
};

using TrainerEvent = std::variant<TrainStartedEvent, TrainProgressEvent,
                                  EvalResultEvent, CheckpointSavedEvent,
                                  TrainFinishedEvent, TrainInterruptedEvent>;

class TrainerEventSink {
 public:
  virtual ~TrainerEventSink() = default;
  virtual void Emit(const TrainerEvent& event) = 0;
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_TRAINER_EVENTS_H_
