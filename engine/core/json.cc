// Strict recursive-descent JSON parser and compact writer. See json.h.
#include "engine/core/json.h"

#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json_string.h"
#include "common/utf8.h"

namespace trainyard::engine {

Json Json::Bool(bool b) {
  Json j;
  j.type_ = Type::kBool;
  j.bool_ = b;
  return j;
}

Json Json::Int(int64_t v) {
  Json j;
  j.type_ = Type::kNumber;
  j.text_ = absl::StrCat(v);
  return j;
}

Json Json::Number(double v) {
  Json j;
  j.type_ = Type::kNumber;
  j.text_ = absl::StrFormat("%.17g", v);
  return j;
}

Json Json::String(std::string s) {
  Json j;
  j.type_ = Type::kString;
  j.text_ = std::move(s);
  return j;
}

Json Json::MakeArray(Array items) {
  Json j;
  j.type_ = Type::kArray;
  j.array_ = std::move(items);
  return j;
}

Json Json::MakeObject(Object members) {
  Json j;
  j.type_ = Type::kObject;
  j.object_ = std::move(members);
  return j;
}

absl::StatusOr<int64_t> Json::AsInt(absl::string_view what) const {
  int64_t v = 0;
  if (type_ != Type::kNumber || !absl::SimpleAtoi(text_, &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected an integer"));
  }
  return v;
}

absl::StatusOr<double> Json::AsNumber(absl::string_view what) const {
  double v = 0;
  if (type_ != Type::kNumber || !absl::SimpleAtod(text_, &v) ||
      !std::isfinite(v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected a finite number"));
  }
  return v;
}

absl::StatusOr<std::string> Json::AsString(absl::string_view what) const {
  if (type_ != Type::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected a string"));
  }
  return text_;
}

const Json* Json::Find(absl::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const auto& [k, v] : object_) {
    if (k == key) return &v;
  }
  return nullptr;
}

Json& Json::Set(std::string key, Json value) {
  object_.emplace_back(std::move(key), std::move(value));
  return object_.back().second;
}

Json& Json::Append(Json value) {
  array_.push_back(std::move(value));
  return array_.back();
}

namespace {

void WriteValue(const Json& j, std::string* out) {
  switch (j.type()) {
    case Json::Type::kNull:
      out->append("null");
      return;
    case Json::Type::kBool:
    case Json::Type::kNumber:
      out->append(j.Serialize());
      return;
    case Json::Type::kString:
      AppendJsonString(*j.AsString(""), out);
      return;
    case Json::Type::kArray: {
      out->push_back('[');
      for (size_t i = 0; i < j.array().size(); ++i) {
        if (i > 0) out->push_back(',');
        WriteValue(j.array()[i], out);
      }
      out->push_back(']');
      return;
    }
    case Json::Type::kObject: {
      out->push_back('{');
      bool first = true;
      for (const auto& [k, v] : j.object()) {
        if (!first) out->push_back(',');
        first = false;
        AppendJsonString(k, out);
        out->push_back(':');
        WriteValue(v, out);
      }
      out->push_back('}');
      return;
    }
  }
}

}  // namespace

std::string Json::Serialize() const {
  if (type_ == Type::kBool) return bool_ ? "true" : "false";
  if (type_ == Type::kNumber) return text_;
  std::string out;
  WriteValue(*this, &out);
  return out;
}

class JsonParser {
 public:
  JsonParser(absl::string_view text, const JsonLimits& limits)
      : s_(text), limits_(limits) {}

  absl::StatusOr<Json> ParseDocument() {
    Json value;
    if (absl::Status st = ParseValue(0, &value); !st.ok()) return st;
    SkipSpace();
    if (pos_ != s_.size()) return Error("trailing characters after the value");
    return value;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid JSON at byte ", pos_, ": ", what));
  }

  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' ||
                                s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool Consume(absl::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  absl::Status ParseValue(int depth, Json* out) {
    if (depth > limits_.max_depth) return Error("nesting too deep");
    if (++values_ > limits_.max_values) {
      return Error(absl::StrCat("more than ", limits_.max_values, " values"));
    }
    SkipSpace();
    if (pos_ >= s_.size()) return Error("unexpected end of input");
    char c = s_[pos_];
    if (c == '{') return ParseObject(depth, out);
    if (c == '[') return ParseArray(depth, out);
    if (c == '"') {
      out->type_ = Json::Type::kString;
      return ParseString(&out->text_);
    }
    if (Consume("true")) {
      *out = Json::Bool(true);
      return absl::OkStatus();
    }
    if (Consume("false")) {
      *out = Json::Bool(false);
      return absl::OkStatus();
    }
    if (Consume("null")) {
      *out = Json();
      return absl::OkStatus();
    }
    if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber(out);
    return Error(
        absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  absl::Status ParseObject(int depth, Json* out) {
    *out = Json::MakeObject();
    ++pos_;
    SkipSpace();
    if (Consume("}")) return absl::OkStatus();
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '"') return Error("expected a key");
      std::string key;
      if (absl::Status st = ParseString(&key); !st.ok()) return st;
      SkipSpace();
      if (!Consume(":")) return Error("expected ':'");
      Json value;
      if (absl::Status st = ParseValue(depth + 1, &value); !st.ok()) return st;
      out->Set(std::move(key), std::move(value));
      SkipSpace();
      if (Consume("}")) return absl::OkStatus();
      if (!Consume(",")) return Error("expected ',' or '}'");
    }
  }

  absl::Status ParseArray(int depth, Json* out) {
    *out = Json::MakeArray();
    ++pos_;
    SkipSpace();
    if (Consume("]")) return absl::OkStatus();
    while (true) {
      Json value;
      if (absl::Status st = ParseValue(depth + 1, &value); !st.ok()) return st;
      out->Append(std::move(value));
      SkipSpace();
      if (Consume("]")) return absl::OkStatus();
      if (!Consume(",")) return Error("expected ',' or ']'");
    }
  }

  absl::Status ParseNumber(Json* out) {
    size_t start = pos_;
    auto digits = [&] {
      size_t d = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - d;
    };
    if (s_[pos_] == '-') ++pos_;
    if (digits() == 0) return Error("malformed number");
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) return Error("malformed number");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digits() == 0) return Error("malformed number");
    }
    out->type_ = Json::Type::kNumber;
    out->text_ = std::string(s_.substr(start, pos_ - start));
    return absl::OkStatus();
  }

  absl::Status ParseHex4(uint32_t* cp) {
    if (pos_ + 4 > s_.size()) return Error("truncated \\u escape");
    *cp = 0;
    for (int i = 0; i < 4; ++i) {
      char h = s_[pos_++];
      *cp <<= 4;
      if (h >= '0' && h <= '9')
        *cp |= h - '0';
      else if (h >= 'a' && h <= 'f')
        *cp |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F')
        *cp |= h - 'A' + 10;
      else
        return Error("bad \\u escape");
    }
    return absl::OkStatus();
  }

  absl::Status ParseEscape(std::string* out) {
    if (pos_ >= s_.size()) return Error("truncated escape");
    char e = s_[pos_++];
    switch (e) {
      case '"':
        out->push_back('"');
        return absl::OkStatus();
      case '\\':
        out->push_back('\\');
        return absl::OkStatus();
      case '/':
        out->push_back('/');
        return absl::OkStatus();
      case 'b':
        out->push_back('\b');
        return absl::OkStatus();
      case 'f':
        out->push_back('\f');
        return absl::OkStatus();
      case 'n':
        out->push_back('\n');
        return absl::OkStatus();
      case 'r':
        out->push_back('\r');
        return absl::OkStatus();
      case 't':
        out->push_back('\t');
        return absl::OkStatus();
      case 'u':
        break;
      default:
        return Error("bad escape");
    }
    uint32_t cp = 0;
    if (absl::Status st = ParseHex4(&cp); !st.ok()) return st;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      uint32_t lo = 0;
      if (!Consume("\\u")) return Error("unpaired surrogate");
      if (absl::Status st = ParseHex4(&lo); !st.ok()) return st;
      if (lo < 0xDC00 || lo > 0xDFFF) return Error("unpaired surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
      return Error("unpaired surrogate");
    }
    ::trainyard::AppendUtf8(cp, out);
    return absl::OkStatus();
  }

  absl::Status ParseString(std::string* out) {
    ++pos_;  // opening quote
    while (true) {
      if (pos_ >= s_.size()) return Error("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[pos_++]);
      if (c == '"') return absl::OkStatus();
      if (c < 0x20) return Error("control character in string");
      if (c == '\\') {
        if (absl::Status st = ParseEscape(out); !st.ok()) return st;
      } else {
        out->push_back(static_cast<char>(c));
      }
    }
  }

  absl::string_view s_;
  const JsonLimits limits_;
  size_t pos_ = 0;
  int64_t values_ = 0;
};

absl::StatusOr<Json> ParseJson(absl::string_view text,
                               const JsonLimits& limits) {
  return JsonParser(text, limits).ParseDocument();
}

absl::StatusOr<const Json*> RequireField(const Json& obj,
                                         absl::string_view key) {
  const Json* v = obj.Find(key);
  if (v == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing field `", key, "`"));
  }
  return v;
}

}  // namespace trainyard::engine
