// Fuzz target: MNIST IDX files, raw or gzip-compressed (one or more
// members), through the in-memory reader that ReadIdxFile uses, then the
// MNIST checks with the decoded array as the images (beside labels made to
// match) and as the labels (beside images made to match), and a batch
// gathered from whatever set passes. Decompression is capped at 16 MiB here
// so a bomb is cut short as the production cap (1 GiB) would cut it, only
// sooner.
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/core/batch.h"
#include "engine/data/idx.h"
#include "engine/data/mnist.h"
#include "fuzz/fuzz_report.h"

namespace {

using namespace trainyard::engine;  // NOLINT: a fuzz target of one module

void GatherEnds(const char* as,
                const absl::StatusOr<std::unique_ptr<MnistExamples>>& set) {
  trainyard::fuzz::Report(as, set.status());
  if (!set.ok()) return;
  const std::vector<int64_t> indices = {0, (*set)->size() - 1};
  Batch batch;
  (*set)->Gather(indices, &batch);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)ParseIdx(bytes, "raw.idx");
  absl::StatusOr<IdxArray> array = DecodeIdx(bytes, "in.gz", int64_t{16} << 20);
  trainyard::fuzz::Report("decode", array.status());
  if (!array.ok()) return 0;
  // A count both files can have: the array's first dimension, kept small
  // enough for the made-up partner to be cheap.
  const int64_t count = array->dims[0];
  if (count > (int64_t{1} << 16)) return 0;
  IdxArray labels{{count}, std::vector<uint8_t>(count, 7)};
  GatherEnds("as images",
             MnistExamples::FromIdx(*array, labels, "images", "labels"));
  IdxArray images{{count, 2, 2}, std::vector<uint8_t>(count * 4, 255)};
  GatherEnds("as labels",
             MnistExamples::FromIdx(images, *array, "images", "labels"));
  return 0;
}
