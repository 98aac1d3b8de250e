// What a model trains on: a Batch of examples on the host, the ExampleSet it
// is gathered from, and the BatchSource that hands training batches to the
// trainer in a deterministic order. engine/data implements them for MNIST
// images and for windows of token streams (language models).
//
// DataCursor is the position in the training stream (epoch, example within
// the epoch's order); it is checkpointed, so the batch order after a resume
// is the order of an uninterrupted run.
#ifndef TRAINYARD_ENGINE_CORE_BATCH_H_
#define TRAINYARD_ENGINE_CORE_BATCH_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard::engine {

struct DataCursor {
  int64_t epoch = 0;
  int64_t position = 0;  // examples of this epoch already drawn
  bool operator==(const DataCursor&) const = default;
};

// Classifier batches fill features and one target per example; token
// batches (language models) fill tokens and one target per token, the next
// token of each window.
struct Batch {
  int64_t size = 0;
  int64_t feature_dim = 0;
  std::vector<float> features;  // [size, feature_dim]
  int64_t seq_len = 0;
  std::vector<int32_t> tokens;   // [size, seq_len]
  std::vector<int32_t> targets;  // [size] or [size, seq_len]
  // Where the stream stands after this batch (valid for training batches).
  DataCursor next;
};

// A fixed, indexable set of examples. Gather is const and safe to call from
// several threads at once.
class ExampleSet {
 public:
  virtual ~ExampleSet() = default;
  virtual int64_t size() const = 0;
  virtual int64_t feature_dim() const = 0;
  virtual int32_t num_classes() const = 0;
  // Fills `batch` with the examples at `indices` (each < size()).
  virtual void Gather(std::span<const int64_t> indices, Batch* batch) const = 0;
};

// An endless stream of training batches. Not thread-safe: one consumer.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // The next Next() returns the batch that starts at `cursor`.
  virtual absl::Status Seek(const DataCursor& cursor) = 0;
  virtual absl::StatusOr<Batch> Next() = 0;
};

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_BATCH_H_
