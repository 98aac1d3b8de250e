// TrainJob: one EngineJob put together — the MNIST data loaded and split,
// the CPU backend, the MLP, the shuffled loader and the trainer — ready to
// run. yard-train is a thin shell around it; tests run jobs in-process.
//
// Thread-safety: not thread-safe; the `stop` flag passed to Run may be set
// from any thread or a signal handler.
#ifndef TRAINYARD_ENGINE_TRAIN_JOB_H_
#define TRAINYARD_ENGINE_TRAIN_JOB_H_

#include <atomic>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/core/mlp.h"
#include "engine/core/trainer.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/data/mnist.h"
#include "engine/data/shuffled_loader.h"
#include "engine/job_config.h"

namespace trainyard::engine {

class TrainJob {
 public:
  // Errors: INVALID_ARGUMENT (message starts with the spec field) when the
  // spec does not fit the data, e.g. a holdout larger than the data or an
  // input_dim other than the images' size; DATA_LOSS or NOT_FOUND when a
  // data file cannot be read. `sink` must outlive the job.
  static absl::StatusOr<std::unique_ptr<TrainJob>> Create(
      const EngineJob& job, TrainerEventSink* sink);

  // Trains to the end (resuming from the job's checkpoint dir when it holds
  // a checkpoint) or until *stop turns true.
  absl::StatusOr<Trainer::Outcome> Run(const std::atomic<bool>* stop) {
    return trainer_->Run(stop);
  }

  Trainer& trainer() { return *trainer_; }

 private:
  TrainJob() = default;
  absl::Status LoadData(const EngineJob& job);

  // Declaration order is teardown order reversed: the trainer and model free
  // their buffers before the backend goes.
  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<MnistExamples> train_, eval_;
  std::unique_ptr<MlpModel> model_;
  std::unique_ptr<ShuffledLoader> loader_;
  std::unique_ptr<Trainer> trainer_;
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_TRAIN_JOB_H_
