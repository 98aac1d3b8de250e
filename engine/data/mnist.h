// MNIST as an ExampleSet: images and labels from a pair of IDX files,
// checked against each other, with the last `holdout` examples split off
// for evaluation. Pixels become features (p / 255 - 0.1307) / 0.3081, the
// usual MNIST normalization. MnistExamples is immutable after loading and
// safe for concurrent Gather calls.
#ifndef TRAINYARD_ENGINE_DATA_MNIST_H_
#define TRAINYARD_ENGINE_DATA_MNIST_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/batch.h"
#include "engine/data/idx.h"

namespace trainyard::engine {

inline constexpr int32_t kMnistClasses = 10;

class MnistExamples : public ExampleSet {
 public:
  // Loads an images file (IDX [count, rows, cols]) and a labels file (IDX
  // [count], values 0..9). INVALID_ARGUMENT naming the file when they are
  // malformed or disagree on the count.
  static absl::StatusOr<std::unique_ptr<MnistExamples>> Load(
      const std::string& images_path, const std::string& labels_path);

  // The same checks on arrays already read (as ParseIdx returns them: data
  // holds prod(dims) bytes); the names are for errors.
  static absl::StatusOr<std::unique_ptr<MnistExamples>> FromIdx(
      IdxArray images, IdxArray labels, absl::string_view images_name,
      absl::string_view labels_name);

  // Builds a set from memory (tests). REQUIRES: pixels.size() ==
  // labels.size() * rows * cols and labels < 10.
  MnistExamples(int64_t rows, int64_t cols, std::vector<uint8_t> pixels,
                std::vector<uint8_t> labels);

  // Examples [begin, end) as a new set.
  std::unique_ptr<MnistExamples> Slice(int64_t begin, int64_t end) const;

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  int64_t feature_dim() const override { return rows_ * cols_; }
  int32_t num_classes() const override { return kMnistClasses; }
  void Gather(std::span<const int64_t> indices, Batch* batch) const override;

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int label(int64_t i) const { return labels_[i]; }

 private:
  int64_t rows_, cols_;
  std::vector<uint8_t> pixels_;
  std::vector<uint8_t> labels_;
};

struct MnistSplit {
  std::unique_ptr<MnistExamples> train;
  std::unique_ptr<MnistExamples> eval;
};

// Holds out the last `holdout` examples. INVALID_ARGUMENT unless
// 0 <= holdout < all.size() (something must be left to train on).
absl::StatusOr<MnistSplit> SplitHoldout(const MnistExamples& all,
                                        int64_t holdout);

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_DATA_MNIST_H_
