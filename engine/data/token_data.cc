// Token windows and llm.c token shards. See token_data.h.
#include "engine/data/token_data.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/core/file_io.h"

namespace trainyard::engine {
namespace {

// Larger shards than llm.c writes (100M tokens, 200 MB) by a wide margin.
constexpr int64_t kMaxShardBytes = int64_t{8} << 30;

int32_t LoadInt32(const char* p) {
  const auto* b = reinterpret_cast<const uint8_t*>(p);
  return static_cast<int32_t>(uint32_t{b[0]} | uint32_t{b[1]} << 8 |
                              uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24);
}

}  // namespace

TokenWindows::TokenWindows(std::shared_ptr<const std::vector<int32_t>> tokens,
                           int64_t seq_len, int64_t stride, int32_t vocab_size)
    : tokens_(std::move(tokens)),
      seq_len_(seq_len),
      stride_(stride),
      vocab_size_(vocab_size) {}

int64_t TokenWindows::size() const {
  const int64_t n = num_tokens();
  if (n < seq_len_ + 1) return 0;
  return (n - seq_len_ - 1) / stride_ + 1;
}

void TokenWindows::Gather(std::span<const int64_t> indices,
                          Batch* batch) const {
  const int64_t T = seq_len_;
  batch->size = static_cast<int64_t>(indices.size());
  batch->seq_len = T;
  batch->feature_dim = 0;
  batch->features.clear();
  batch->tokens.resize(indices.size() * T);
  batch->targets.resize(indices.size() * T);
  for (size_t i = 0; i < indices.size(); ++i) {
    const int32_t* src = tokens_->data() + indices[i] * stride_;
    std::memcpy(batch->tokens.data() + i * T, src, T * 4);
    std::memcpy(batch->targets.data() + i * T, src + 1, T * 4);
  }
}

absl::Status ReadTokenShard(const std::string& path,
                            std::vector<int32_t>* out) {
  ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path, kMaxShardBytes));
  return ParseTokenShard(bytes, path, out);
}

absl::Status ParseTokenShard(absl::string_view bytes, absl::string_view source,
                             std::vector<int32_t>* out) {
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(source, ": ", why));
  };
  const int64_t header_bytes = kTokenShardHeaderInts * 4;
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (size < header_bytes) {
    return bad(absl::StrCat("truncated header: ", size,
                            " bytes, a token "
                            "shard starts with a ",
                            header_bytes, "-byte header"));
  }
  const int32_t magic = LoadInt32(bytes.data());
  const int32_t version = LoadInt32(bytes.data() + 4);
  const int64_t count = LoadInt32(bytes.data() + 8);
  if (magic != kTokenShardMagic) {
    return bad(absl::StrCat("bad magic ", magic, " (expected ",
                            kTokenShardMagic,
                            "): not an llm.c uint16 token shard"));
  }
  if (version != kTokenShardVersion) {
    return bad(absl::StrCat("version ", version, " is not supported (only ",
                            kTokenShardVersion, ": uint16 tokens)"));
  }
  if (count < 0) return bad(absl::StrCat("negative token count ", count));
  // The declared count against the bytes present, before allocating for it.
  const int64_t body = size - header_bytes;
  if (body < 2 * count) {
    return bad(absl::StrCat("truncated: the header promises ", count,
                            " tokens (", 2 * count, " bytes), the file holds ",
                            body, " bytes after the header"));
  }
  if (body > 2 * count) {
    return bad(absl::StrCat(body - 2 * count, " bytes after the ", count,
                            " tokens the header promises"));
  }
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data() + header_bytes);
  out->reserve(out->size() + count);
  for (int64_t i = 0; i < count; ++i) {
    out->push_back(static_cast<int32_t>(p[2 * i] | p[2 * i + 1] << 8));
  }
  return absl::OkStatus();
}

absl::Status WriteTokenShard(const std::string& path,
                             std::span<const int32_t> tokens) {
  std::string bytes(kTokenShardHeaderInts * 4 + 2 * tokens.size(), '\0');
  auto put32 = [&](int64_t i, int32_t v) {
    for (int b = 0; b < 4; ++b) {
      bytes[i * 4 + b] =
          static_cast<char>((static_cast<uint32_t>(v) >> (8 * b)) & 0xFF);
    }
  };
  put32(0, kTokenShardMagic);
  put32(1, kTokenShardVersion);
  put32(2, static_cast<int32_t>(tokens.size()));
  char* p = bytes.data() + kTokenShardHeaderInts * 4;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", tokens[i], " does not fit in uint16"));
    }
    p[2 * i] = static_cast<char>(tokens[i] & 0xFF);
    p[2 * i + 1] = static_cast<char>(tokens[i] >> 8);
  }
  return WriteFileDurably(path, bytes);
}

int64_t FirstTokenOutside(std::span<const int32_t> tokens, int64_t vocab_size) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size)
      return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace trainyard::engine
