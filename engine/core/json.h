// A small JSON value with a strict parser and a compact writer, enough for
// checkpoint metadata and safetensors headers (the engine stays free of
// protobuf). Numbers keep their source text so 64-bit integers round-trip
// exactly. Values are plain data; no synchronization.
#ifndef TRAINYARD_ENGINE_CORE_JSON_H_
#define TRAINYARD_ENGINE_CORE_JSON_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainyard::engine {

class Json {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  using Array = std::vector<Json>;
  // Objects keep insertion order so written files read naturally.
  using Object = std::vector<std::pair<std::string, Json>>;

  Json() = default;
  static Json Bool(bool b);
  static Json Int(int64_t v);
  static Json Number(double v);
  static Json String(std::string s);
  static Json MakeArray(Array items = {});
  static Json MakeObject(Object members = {});

  Type type() const { return type_; }
  bool is_object() const { return type_ == Type::kObject; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_number() const { return type_ == Type::kNumber; }

  // Accessors return an error naming `what` when the type does not match.
  absl::StatusOr<int64_t> AsInt(absl::string_view what) const;
  // Numbers written by Number() read back bitwise equal.
  absl::StatusOr<double> AsNumber(absl::string_view what) const;
  absl::StatusOr<std::string> AsString(absl::string_view what) const;
  const Array& array() const { return array_; }
  const Object& object() const { return object_; }

  // Object member lookup; nullptr when absent or not an object.
  const Json* Find(absl::string_view key) const;
  // Appends a member (objects) or an item (arrays).
  Json& Set(std::string key, Json value);
  Json& Append(Json value);

  std::string Serialize() const;

 private:
  friend class JsonParser;
  Type type_ = Type::kNull;
  bool bool_ = false;
  std::string text_;  // number text or string value
  Array array_;
  Object object_;
};

// Bounds for parsing untrusted text. A parsed value takes about 100 bytes
// however short its text ("0," is two), so the number of values is capped,
// not only the text's size: the default admits a char tokenizer over every
// Unicode code point plus a checkpoint's tensor list, and holds a hostile
// document to a few hundred MB.
struct JsonLimits {
  int max_depth = 64;
  int64_t max_values = int64_t{1} << 21;
};

// Parses exactly one JSON value (surrounding whitespace allowed). Errors give
// the byte offset; nesting deeper or more values than `limits` allow are
// errors too.
absl::StatusOr<Json> ParseJson(absl::string_view text,
                               const JsonLimits& limits = {});

// Object member `key` of `obj`, or an error "missing field `key`".
absl::StatusOr<const Json*> RequireField(const Json& obj,
                                         absl::string_view key);

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_JSON_H_
