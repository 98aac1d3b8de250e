// ShuffledLoader: the training BatchSource. It walks an ExampleSet in a
// fresh random order each epoch (a Fisher-Yates shuffle seeded by the run's
// seed and the epoch number alone) and prepares the next batches on a
// background thread while the current step trains. Batches are always full:
// one that crosses an epoch boundary continues into the next epoch's order.
//
// With `with_replacement` it draws examples independently instead (draw i
// is a pure function of (seed, i)); the cursor's epoch stays 0 and its
// position counts draws. Language-model windows use this: every token
// offset is an example, too many to permute each epoch.
//
// Because the order is a pure function of (seed, epoch), the DataCursor
// (epoch, position) is all a checkpoint needs to continue the same stream.
//
// Thread-safety: one consumer calls Next/Seek; the prefetch thread is
// internal and stops in the destructor.
#ifndef TRAINYARD_ENGINE_DATA_SHUFFLED_LOADER_H_
#define TRAINYARD_ENGINE_DATA_SHUFFLED_LOADER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/core/batch.h"

namespace trainyard::engine {

struct ShuffledLoaderOptions {
  int64_t batch_size = 32;
  uint64_t seed = 0;
  int prefetch = 2;  // batches prepared ahead
  bool with_replacement = false;
};

class ShuffledLoader : public BatchSource {
 public:
  // INVALID_ARGUMENT for an empty set, batch_size < 1 or prefetch < 1.
  // `examples` must outlive the loader.
  static absl::StatusOr<std::unique_ptr<ShuffledLoader>> Create(
      const ExampleSet* examples, const ShuffledLoaderOptions& options);
  ~ShuffledLoader() override;

  // INVALID_ARGUMENT for a cursor outside the data (position > size).
  absl::Status Seek(const DataCursor& cursor) override;
  absl::StatusOr<Batch> Next() override;

  // The example order of `epoch`; a pure function of (seed, epoch, size).
  static std::vector<int64_t> EpochOrder(uint64_t seed, int64_t epoch,
                                         int64_t size);
  // The example of draw `draw` when sampling with replacement.
  static int64_t DrawnExample(uint64_t seed, int64_t draw, int64_t size);

 private:
  ShuffledLoader(const ExampleSet* examples, const ShuffledLoaderOptions& o);
  void ProduceLoop();
  // Builds the batch starting at `cursor`. Prefetch thread only.
  Batch Build(DataCursor cursor);

  const ExampleSet* const examples_;
  const ShuffledLoaderOptions options_;

  // Prefetch thread's cache of the current epoch's order.
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;

  absl::Mutex mu_;
  DataCursor produce_at_ ABSL_GUARDED_BY(mu_);
  // Bumped by Seek so a batch built for the old position is dropped.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Batch> ready_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_DATA_SHUFFLED_LOADER_H_
