// TrainJob: one EngineJob put together — the data loaded and split, the
// backend (CPU, or CUDA on one GPU), the model (MLP or GPT), the loader, the
// trainer and, for a job of several GPUs, this rank's NCCL collective —
// ready to run. yard-train is a thin shell around it; tests run jobs
// in-process.
//
// Thread-safety: not thread-safe; the `stop` flag passed to Run may be set
// from any thread or a signal handler.
#ifndef TRAINYARD_ENGINE_TRAIN_JOB_H_
#define TRAINYARD_ENGINE_TRAIN_JOB_H_

#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/collective.h"
#include "engine/core/model.h"
#include "engine/core/profiling_backend.h"
#include "engine/core/trainer.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/data/shuffled_loader.h"
#include "engine/data/tokenizer.h"
#include "engine/dist/socket_collective.h"
#include "engine/job_config.h"

namespace trainyard::engine {

struct StartingWeights;  // train_job.cc

class TrainJob {
 public:
  // Errors: INVALID_ARGUMENT (message starts with the spec field) when the
  // spec does not fit the data, e.g. a holdout larger than the data, an
  // input_dim other than the images' size, a vocabulary larger than
  // vocab_size or a text shorter than one window; DATA_LOSS or NOT_FOUND
  // when a data file cannot be read. `sink` must outlive the job, and so
  // must `ranks` when given (data parallel: this process is one rank; see
  // Trainer). CPU ranks sum their gradients through `ranks`; a job of
  // resources.gpus = N > 1 needs N ranks, one per GPU, and sums through
  // NCCL, whose communicator `ranks` helps form. `cuda_device` is the GPU
  // this process trains on (an ordinal among the CUDA-visible devices).
  static absl::StatusOr<std::unique_ptr<TrainJob>> Create(
      const EngineJob& job, TrainerEventSink* sink,
      SocketCollective* ranks = nullptr, int cuda_device = 0);

  // The checks Create makes before training, without training or joining
  // other ranks: the spec against the data (sizes, vocabulary), the starting
  // weights, a CPU job's memory estimate against the host's available
  // memory (see host_memory.h), and the checkpoint dir's newest checkpoint
  // against the spec and `world_size` (checkpoint_match.h; a GPU job's
  // tensors are not compared, as no GPU is taken). Returns one line saying
  // what was found; Create's errors otherwise.
  static absl::StatusOr<std::string> DryRun(const EngineJob& job,
                                            int world_size);

  // Trains to the end (resuming from the job's checkpoint dir when it holds
  // a checkpoint) or until *stop turns true.
  absl::StatusOr<Trainer::Outcome> Run(const std::atomic<bool>* stop) {
    return trainer_->Run(stop);
  }

  Trainer& trainer() { return *trainer_; }
  Model& model() { return *model_; }
  Backend& backend() { return *backend_; }
  // The op timer around backend(), when the job asked for one
  // (EngineJob::profile_ops); null otherwise.
  ProfilingBackend* profiler() { return profiler_; }
  // Text data only.
  const std::optional<Tokenizer>& tokenizer() const { return tokenizer_; }

 private:
  TrainJob() = default;
  // The host memory check, the starting weights (into *init) and the data;
  // returns the memory figures (memory estimate and available), "" when
  // none were checked.
  absl::StatusOr<std::string> LoadInputs(const EngineJob& job,
                                         std::optional<StartingWeights>* init);
  absl::Status LoadMnistData(const EngineJob& job);
  absl::Status LoadTokenData(const EngineJob& job);
  absl::Status LoadText(const TextFiles& files, const GptConfig& gpt,
                        std::vector<int32_t>* train,
                        std::vector<int32_t>* eval);
  // Where the vocabulary of a CHAR tokenizer came from, for errors about
  // characters outside it.
  std::string VocabularyOrigin() const;

  // Declaration order is teardown order reversed: the trainer and model free
  // their buffers before the backend goes.
  std::unique_ptr<Backend> backend_;
  ProfilingBackend* profiler_ = nullptr;  // backend_ itself, or null
  // GPU ranks: the NCCL collective (on backend_'s device and stream).
  std::unique_ptr<Collective> gpu_collective_;
  std::unique_ptr<ExampleSet> train_, eval_;
  std::optional<Tokenizer> tokenizer_;
  // Where tokenizer_ came from when the starting weights brought it
  // ("init_from", "warm_start"); empty when the data made it.
  const char* tokenizer_source_ = "";
  std::unique_ptr<Model> model_;
  std::unique_ptr<ShuffledLoader> loader_;
  std::unique_ptr<Trainer> trainer_;
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_TRAIN_JOB_H_
