// Tokenizer: text <-> token ids for language models. Two kinds:
//   byte  every byte is a token (vocabulary 256), any input is encodable;
//   char  every Unicode character (UTF-8 code point) seen in the training
//         text is a token, numbered in ascending code point order.
// A char tokenizer's vocabulary belongs to the trained model, so it travels
// as JSON ({"kind": "char", "vocab": [10, 32, ...]}) in checkpoints and
// exports. Immutable after construction; safe to share between threads.
#ifndef TRAINYARD_ENGINE_DATA_TOKENIZER_H_
#define TRAINYARD_ENGINE_DATA_TOKENIZER_H_

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/json.h"

namespace trainyard::engine {

class Tokenizer {
 public:
  static Tokenizer Bytes();
  // INVALID_ARGUMENT when `text` is empty or not valid UTF-8 (the message
  // gives the byte offset).
  static absl::StatusOr<Tokenizer> CharsFromText(absl::string_view text);
  // From ToJson()'s form; INVALID_ARGUMENT naming what is wrong.
  static absl::StatusOr<Tokenizer> FromJson(const Json& json);

  Json ToJson() const;
  bool is_char() const { return is_char_; }
  int64_t vocab_size() const;

  // INVALID_ARGUMENT for invalid UTF-8 or a character outside the
  // vocabulary (char), naming the character and its byte offset.
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const;
  // Tokens outside the vocabulary decode to U+FFFD.
  std::string Decode(std::span<const int32_t> tokens) const;

 private:
  Tokenizer() = default;
  bool is_char_ = false;
  std::vector<uint32_t> vocab_;  // char: code point of each token
  std::unordered_map<uint32_t, int32_t> index_;
};

// Decodes one UTF-8 code point at text[*pos], advancing *pos; false for an
// invalid sequence (overlong, surrogate, truncated, > U+10FFFF).
bool NextCodePoint(absl::string_view text, size_t* pos, uint32_t* cp);

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_DATA_TOKENIZER_H_
