// Byte and character tokenizers. See tokenizer.h.
#include "engine/data/tokenizer.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/utf8.h"

namespace trainyard::engine {

bool NextCodePoint(absl::string_view text, size_t* pos, uint32_t* cp) {
  const auto byte = [&](size_t i) {
    return static_cast<uint8_t>(text[*pos + i]);
  };
  const uint8_t b0 = byte(0);
  int len;
  uint32_t min;
  if (b0 < 0x80) {
    *cp = b0;
    *pos += 1;
    return true;
  } else if ((b0 & 0xE0) == 0xC0) {
    len = 2, min = 0x80, *cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, min = 0x800, *cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, min = 0x10000, *cp = b0 & 0x07;
  } else {
    return false;
  }
  if (*pos + len > text.size()) return false;
  for (int i = 1; i < len; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return false;
    *cp = (*cp << 6) | (byte(i) & 0x3F);
  }
  if (*cp < min || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF)) {
    return false;
  }
  *pos += len;
  return true;
}

namespace {

absl::Status BadUtf8(size_t pos) {
  return absl::InvalidArgumentError(
      absl::StrCat("not valid UTF-8 at byte offset ", pos,
                   " (use the byte tokenizer for binary text)"));
}

}  // namespace

Tokenizer Tokenizer::Bytes() { return Tokenizer(); }

absl::StatusOr<Tokenizer> Tokenizer::CharsFromText(absl::string_view text) {
  if (text.empty()) {
    return absl::InvalidArgumentError("no text to build a vocabulary from");
  }
  std::set<uint32_t> seen;
  for (size_t pos = 0; pos < text.size();) {
    uint32_t cp;
    const size_t at = pos;
    if (!NextCodePoint(text, &pos, &cp)) return BadUtf8(at);
    seen.insert(cp);
  }
  Tokenizer t;
  t.is_char_ = true;
  t.vocab_.assign(seen.begin(), seen.end());
  for (size_t i = 0; i < t.vocab_.size(); ++i) {
    t.index_[t.vocab_[i]] = static_cast<int32_t>(i);
  }
  return t;
}

absl::StatusOr<Tokenizer> Tokenizer::FromJson(const Json& json) {
  auto bad = [](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer: ", why));
  };
  ASSIGN_OR_RETURN(const Json* kind, RequireField(json, "kind"));
  absl::StatusOr<std::string> k = kind->AsString("tokenizer.kind");
  if (!k.ok()) return k.status();
  if (*k == "byte") return Bytes();
  if (*k != "char") return bad(absl::StrCat("unknown kind \"", *k, "\""));
  ASSIGN_OR_RETURN(const Json* vocab, RequireField(json, "vocab"));
  if (!vocab->is_array() || vocab->array().empty()) {
    return bad("vocab must be a non-empty list of code points");
  }
  Tokenizer t;
  t.is_char_ = true;
  for (const Json& v : vocab->array()) {
    ASSIGN_OR_RETURN(int64_t cp, v.AsInt("tokenizer.vocab[]"));
    if (cp < 0 || cp > 0x10FFFF ||
        (!t.vocab_.empty() && cp <= static_cast<int64_t>(t.vocab_.back()))) {
      return bad("vocab must list code points in ascending order");
    }
    t.index_[static_cast<uint32_t>(cp)] = static_cast<int32_t>(t.vocab_.size());
    t.vocab_.push_back(static_cast<uint32_t>(cp));
  }
  return t;
}

Json Tokenizer::ToJson() const {
  if (!is_char_) return Json::MakeObject({{"kind", Json::String("byte")}});
  Json vocab = Json::MakeArray();
  for (uint32_t cp : vocab_) vocab.Append(Json::Int(cp));
  return Json::MakeObject(
      {{"kind", Json::String("char")}, {"vocab", std::move(vocab)}});
}

int64_t Tokenizer::vocab_size() const {
  return is_char_ ? static_cast<int64_t>(vocab_.size()) : 256;
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(
    absl::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size());
  if (!is_char_) {
    for (char c : text) out.push_back(static_cast<uint8_t>(c));
    return out;
  }
  for (size_t pos = 0; pos < text.size();) {
    uint32_t cp;
    const size_t at = pos;
    if (!NextCodePoint(text, &pos, &cp)) return BadUtf8(at);
    auto it = index_.find(cp);
    if (it == index_.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "character U+%04X at byte offset %d is not in the vocabulary", cp,
          at));
    }
    out.push_back(it->second);
  }
  return out;
}

std::string Tokenizer::Decode(std::span<const int32_t> tokens) const {
  std::string out;
  for (int32_t t : tokens) {
    if (t < 0 || t >= vocab_size()) {
      AppendUtf8(0xFFFD, &out);
    } else if (is_char_) {
      AppendUtf8(vocab_[t], &out);
    } else {
      out.push_back(static_cast<char>(t));
    }
  }
  return out;
}

}  // namespace trainyard::engine
