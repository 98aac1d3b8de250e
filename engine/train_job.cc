// Assembling and running a training job. See train_job.h.
#include "engine/train_job.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace trainyard::engine {
namespace {

// A data file that will not parse is a runtime failure of the job, not a
// malformed request: report it as DATA_LOSS so callers can tell the two
// apart from INVALID_ARGUMENT (the spec does not fit the data).
absl::Status AsDataError(const absl::Status& s) {
  if (s.ok() || s.code() == absl::StatusCode::kNotFound) return s;
  return absl::DataLossError(s.message());
}

absl::StatusOr<std::unique_ptr<MnistExamples>> LoadMnist(
    const std::string& images, const std::string& labels) {
  absl::StatusOr<std::unique_ptr<MnistExamples>> set =
      MnistExamples::Load(images, labels);
  if (!set.ok()) return AsDataError(set.status());
  return set;
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

}  // namespace

absl::Status TrainJob::LoadData(const EngineJob& job) {
  ASSIGN_OR_RETURN(std::unique_ptr<MnistExamples> all,
                   LoadMnist(job.mnist.images, job.mnist.labels));
  if (!job.mnist.eval_images.empty()) {
    train_ = std::move(all);
    ASSIGN_OR_RETURN(eval_,
                     LoadMnist(job.mnist.eval_images, job.mnist.eval_labels));
    if (eval_->feature_dim() != train_->feature_dim()) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.mnist.eval_images: ", eval_->rows(), "x",
                       eval_->cols(), " images, the training images are ",
                       train_->rows(), "x", train_->cols()));
    }
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

absl::StatusOr<std::unique_ptr<TrainJob>> TrainJob::Create(
    const EngineJob& job, TrainerEventSink* sink) {
  std::unique_ptr<TrainJob> t(new TrainJob());
  RETURN_IF_ERROR(t->LoadData(job));
  CpuBackendOptions backend_options;
  backend_options.threads = job.threads;
  ASSIGN_OR_RETURN(t->backend_, CpuBackend::Create(backend_options));
  ASSIGN_OR_RETURN(t->model_, MlpModel::Create(job.mlp, job.trainer.micro_batch,
                                               t->backend_.get()));
  ShuffledLoaderOptions loader_options;
  loader_options.batch_size = job.trainer.micro_batch;
  loader_options.seed = job.trainer.seed;
  ASSIGN_OR_RETURN(t->loader_,
                   ShuffledLoader::Create(t->train_.get(), loader_options));
  ASSIGN_OR_RETURN(
      t->trainer_,
      Trainer::Create(job.trainer, t->model_.get(), t->backend_.get(),
                      t->loader_.get(), t->eval_.get(), sink));
  return t;
}

}  // namespace trainyard::engine
