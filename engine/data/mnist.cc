// MNIST loading and splitting. See mnist.h.
#include "engine/data/mnist.h"

#include <array>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/data/idx.h"

namespace trainyard::engine {
namespace {

const std::array<float, 256>& PixelTable() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int p = 0; p < 256; ++p) t[p] = (p / 255.0f - 0.1307f) / 0.3081f;
    return t;
  }();
  return table;
}

}  // namespace

MnistExamples::MnistExamples(int64_t rows, int64_t cols,
                             std::vector<uint8_t> pixels,
                             std::vector<uint8_t> labels)
    : rows_(rows),
      cols_(cols),
      pixels_(std::move(pixels)),
      labels_(std::move(labels)) {}

absl::StatusOr<std::unique_ptr<MnistExamples>> MnistExamples::Load(
    const std::string& images_path, const std::string& labels_path) {
  ASSIGN_OR_RETURN(IdxArray images, ReadIdxFile(images_path));
  ASSIGN_OR_RETURN(IdxArray labels, ReadIdxFile(labels_path));
  return FromIdx(std::move(images), std::move(labels), images_path,
                 labels_path);
}

absl::StatusOr<std::unique_ptr<MnistExamples>> MnistExamples::FromIdx(
    IdxArray images, IdxArray labels, absl::string_view images_name,
    absl::string_view labels_name) {
  if (images.dims.size() != 3 || images.dims[1] == 0 || images.dims[2] == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        images_name, ": expected an image array [count, rows, cols], got ",
        images.dims.size(), " dimensions"));
  }
  if (labels.dims.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(labels_name, ": expected a label vector [count], got ",
                     labels.dims.size(), " dimensions"));
  }
  if (images.dims[0] != labels.dims[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat(images_name, " holds ", images.dims[0], " images but ",
                     labels_name, " holds ", labels.dims[0], " labels"));
  }
  if (images.dims[0] == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(images_name, ": no examples"));
  }
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= kMnistClasses) {
      return absl::InvalidArgumentError(
          absl::StrCat(labels_name, ": label ", int{labels.data[i]},
                       " of example ", i, " is not a digit 0-9"));
    }
  }
  return std::make_unique<MnistExamples>(images.dims[1], images.dims[2],
                                         std::move(images.data),
                                         std::move(labels.data));
}

std::unique_ptr<MnistExamples> MnistExamples::Slice(int64_t begin,
                                                    int64_t end) const {
  const int64_t d = feature_dim();
  return std::make_unique<MnistExamples>(
      rows_, cols_,
      std::vector<uint8_t>(pixels_.begin() + begin * d,
                           pixels_.begin() + end * d),
      std::vector<uint8_t>(labels_.begin() + begin, labels_.begin() + end));
}

void MnistExamples::Gather(std::span<const int64_t> indices,
                           Batch* batch) const {
  const int64_t d = feature_dim();
  const std::array<float, 256>& table = PixelTable();
  batch->size = static_cast<int64_t>(indices.size());
  batch->feature_dim = d;
  batch->features.resize(indices.size() * d);
  batch->targets.resize(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    const uint8_t* src = pixels_.data() + indices[i] * d;
    float* dst = batch->features.data() + i * d;
    for (int64_t j = 0; j < d; ++j) dst[j] = table[src[j]];
    batch->targets[i] = labels_[indices[i]];
  }
}

absl::StatusOr<MnistSplit> SplitHoldout(const MnistExamples& all,
                                        int64_t holdout) {
  if (holdout < 0 || holdout >= all.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("holdout of ", holdout, " examples must be in [0, ",
                     all.size(), ") (the data has ", all.size(), " examples)"));
  }
  MnistSplit split;
  split.train = all.Slice(0, all.size() - holdout);
  split.eval = all.Slice(all.size() - holdout, all.size());
  return split;
}

}  // namespace trainyard::engine
