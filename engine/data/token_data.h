// Token data for language models: windows of a token stream as an
// ExampleSet, and the readers that produce streams — llm.c token shards
// (.bin: a header of 256 little-endian int32 {magic 20240520, version 1,
// token count, unused...} followed by that many uint16 tokens) and plain
// text files.
//
// TokenWindows example i is the window of seq_len + 1 tokens starting at
// i * stride: its first seq_len tokens are the input and its last seq_len
// the targets (next-token prediction). Training uses stride 1 (every offset
// is an example, drawn at random by the loader); evaluation uses stride
// seq_len (disjoint windows, each token predicted once). Immutable after
// construction; Gather is safe from several threads.
#ifndef TRAINYARD_ENGINE_DATA_TOKEN_DATA_H_
#define TRAINYARD_ENGINE_DATA_TOKEN_DATA_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/batch.h"

namespace trainyard::engine {

inline constexpr int32_t kTokenShardMagic = 20240520;
inline constexpr int32_t kTokenShardVersion = 1;
inline constexpr int64_t kTokenShardHeaderInts = 256;

class TokenWindows : public ExampleSet {
 public:
  // REQUIRES: seq_len >= 1, stride >= 1, every token in [0, vocab_size).
  TokenWindows(std::shared_ptr<const std::vector<int32_t>> tokens,
               int64_t seq_len, int64_t stride, int32_t vocab_size);

  int64_t size() const override;
  int64_t feature_dim() const override { return 0; }
  int32_t num_classes() const override { return vocab_size_; }
  void Gather(std::span<const int64_t> indices, Batch* batch) const override;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens_->size()); }

 private:
  std::shared_ptr<const std::vector<int32_t>> tokens_;
  int64_t seq_len_, stride_;
  int32_t vocab_size_;
};

// Reads one llm.c token shard and appends its tokens to *out. DATA_LOSS
// naming the file for a short or bad header (magic, version, count), a
// truncated token section or trailing bytes; NOT_FOUND when missing.
absl::Status ReadTokenShard(const std::string& path, std::vector<int32_t>* out);

// The same on a shard held in memory; `source` names it in errors. Nothing
// is appended unless the whole shard is valid.
absl::Status ParseTokenShard(absl::string_view bytes, absl::string_view source,
                             std::vector<int32_t>* out);

// Writes a shard (tests and tools). INVALID_ARGUMENT for tokens > 65535.
absl::Status WriteTokenShard(const std::string& path,
                             std::span<const int32_t> tokens);

// The first token >= vocab_size, or -1 when all are below it.
int64_t FirstTokenOutside(std::span<const int32_t> tokens, int64_t vocab_size);

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_DATA_TOKEN_DATA_H_
