// Per-epoch shuffled batches with background prefetch. See shuffled_loader.h.
#include "engine/data/shuffled_loader.h"

#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/core/rng.h"

namespace trainyard::engine {

ShuffledLoader::ShuffledLoader(const ExampleSet* examples,
                               const ShuffledLoaderOptions& o)
    : examples_(examples), options_(o) {}

absl::StatusOr<std::unique_ptr<ShuffledLoader>> ShuffledLoader::Create(
    const ExampleSet* examples, const ShuffledLoaderOptions& options) {
  if (examples == nullptr || examples->size() == 0) {
    return absl::InvalidArgumentError("loader: no training examples");
  }
  if (options.batch_size < 1 || options.prefetch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("loader: batch_size and prefetch must be >= 1, got ",
                     options.batch_size, " and ", options.prefetch));
  }
  std::unique_ptr<ShuffledLoader> loader(new ShuffledLoader(examples, options));
  loader->thread_ = std::thread([l = loader.get()] { l->ProduceLoop(); });
  return loader;
}

ShuffledLoader::~ShuffledLoader() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

std::vector<int64_t> ShuffledLoader::EpochOrder(uint64_t seed, int64_t epoch,
                                                int64_t size) {
  std::vector<int64_t> order(static_cast<size_t>(size));
  std::iota(order.begin(), order.end(), 0);
  // Stream epoch + 1: stream 0 is the trainer's own generator.
  Rng rng(seed, static_cast<uint64_t>(epoch) + 1);
  for (int64_t i = size - 1; i > 0; --i) {
    const int64_t j =
        static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

int64_t ShuffledLoader::DrawnExample(uint64_t seed, int64_t draw,
                                     int64_t size) {
  // Streams from 2^62 up: far above the per-epoch shuffle streams.
  Rng rng(seed, (uint64_t{1} << 62) + static_cast<uint64_t>(draw));
  return static_cast<int64_t>(rng.Below(static_cast<uint64_t>(size)));
}

Batch ShuffledLoader::Build(DataCursor cursor) {
  const int64_t n = examples_->size();
  std::vector<int64_t> indices;
  indices.reserve(static_cast<size_t>(options_.batch_size));
  for (int64_t i = 0; i < options_.batch_size; ++i) {
    if (options_.with_replacement) {
      indices.push_back(DrawnExample(options_.seed, cursor.position++, n));
      continue;
    }
    if (cursor.position >= n) {
      ++cursor.epoch;
      cursor.position = 0;
    }
    if (order_epoch_ != cursor.epoch) {
      order_ = EpochOrder(options_.seed, cursor.epoch, n);
      order_epoch_ = cursor.epoch;
    }
    indices.push_back(order_[cursor.position++]);
  }
  Batch batch;
  examples_->Gather(indices, &batch);
  batch.next = cursor;
  return batch;
}

void ShuffledLoader::ProduceLoop() {
  while (true) {
    DataCursor at;
    uint64_t generation;
    {
      absl::MutexLock lock(&mu_);
      auto room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || static_cast<int>(ready_.size()) < options_.prefetch;
      };
      mu_.Await(absl::Condition(&room));
      if (stopping_) return;
      at = produce_at_;
      generation = generation_;
    }
    Batch batch = Build(at);  // outside the lock: this is the slow part
    absl::MutexLock lock(&mu_);
    if (generation != generation_) continue;  // a Seek moved the stream
    produce_at_ = batch.next;
    ready_.push_back(std::move(batch));
  }
}

absl::Status ShuffledLoader::Seek(const DataCursor& cursor) {
  const bool outside = options_.with_replacement
                           ? cursor.epoch != 0 || cursor.position < 0
                           : cursor.epoch < 0 || cursor.position < 0 ||
                                 cursor.position > examples_->size();
  if (outside) {
    return absl::InvalidArgumentError(
        absl::StrCat("loader: data cursor (epoch ", cursor.epoch, ", position ",
                     cursor.position, ") is outside the ", examples_->size(),
                     " training examples"));
  }
  absl::MutexLock lock(&mu_);
  ready_.clear();
  produce_at_ = cursor;
  ++generation_;
  return absl::OkStatus();
}

absl::StatusOr<Batch> ShuffledLoader::Next() {
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !ready_.empty();
  };
  mu_.Await(absl::Condition(&ready));
  Batch batch = std::move(ready_.front());
  ready_.pop_front();
  return batch;
}

}  // namespace trainyard::engine
