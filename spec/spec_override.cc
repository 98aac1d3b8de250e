// Field overrides: the path is resolved on a copy of the message, creating
// sub-messages through reflection, and the value is read into the field at
// its end. Working on a copy keeps a failed override from leaving
// half-made sub-messages or a switched oneof behind.
#include "spec/spec_override.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "google/protobuf/descriptor.h"

namespace trainyard::spec {
namespace {

using ::google::protobuf::Descriptor;
using ::google::protobuf::EnumDescriptor;
using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::Message;
using ::google::protobuf::Reflection;

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

// "lr, beta1, ..." for errors that should say what would have been right.
std::string FieldNames(const Descriptor& d) {
  std::vector<std::string> names;
  for (int i = 0; i < d.field_count(); ++i) names.push_back(d.field(i)->name());
  return absl::StrJoin(names, ", ");
}

// Spec files may use either name, as protobuf's JSON mapping allows.
const FieldDescriptor* FindField(const Descriptor& d, absl::string_view name) {
  const FieldDescriptor* f = d.FindFieldByName(std::string(name));
  if (f == nullptr) f = d.FindFieldByCamelcaseName(std::string(name));
  return f;
}

// Walks `path` down from `root`, creating messages on the way, and returns
// the message that holds the scalar field at the end, stored in *leaf.
absl::StatusOr<Message*> Walk(Message& root, absl::string_view root_label,
                              absl::string_view path,
                              const FieldDescriptor** leaf) {
  const std::vector<absl::string_view> parts = absl::StrSplit(path, '.');
  Message* m = &root;
  std::string parent(root_label);  // what `m` is, for errors
  std::string walked;              // the canonical path down to here
  for (size_t i = 0;; ++i) {
    const absl::string_view part = parts[i];
    if (part.empty()) {
      return Invalid(path.empty()
                         ? std::string("empty field name")
                         : absl::StrCat("empty field name in \"", path, "\""));
    }
    const Descriptor& d = *m->GetDescriptor();
    const FieldDescriptor* f = FindField(d, part);
    if (f == nullptr) {
      return Invalid(absl::StrCat("no field \"", part, "\" in ", parent,
                                  " (fields: ", FieldNames(d), ")"));
    }
    walked = i == 0 ? f->name() : absl::StrCat(walked, ".", f->name());
    const bool message = f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    if (message && f->is_repeated()) {
      return Invalid(absl::StrCat(
          walked, " is a list of messages, which an override cannot set"));
    }
    if (i + 1 == parts.size()) {
      if (message) {
        return Invalid(absl::StrCat(walked,
                                    " is a message; set one of its fields (",
                                    FieldNames(*f->message_type()), ")"));
      }
      *leaf = f;
      return m;
    }
    if (!message) {
      return Invalid(absl::StrCat(
          walked, " is not a message; it has no field \"", parts[i + 1], "\""));
    }
    // A member of a oneof clears its siblings here, as any setter does.
    m = m->GetReflection()->MutableMessage(m, f);
    parent = walked;
  }
}

// Decimal notation only: strtod would also take hex, "inf" and "nan",
// none of which a spec file can hold as a number.
bool IsDecimalNumber(absl::string_view s) {
  return s.find_first_of("0123456789") != absl::string_view::npos &&
         s.find_first_not_of("0123456789+-.eE") == absl::string_view::npos;
}

// Integers as the JSON mapping takes them: decimal, or a number with an
// exponent that is a whole one ("2e3", as a YAML spec may write steps).
template <typename T>
absl::StatusOr<T> ParseInteger(absl::string_view text) {
  constexpr T kMin = std::numeric_limits<T>::min();
  constexpr T kMax = std::numeric_limits<T>::max();
  auto out_of_range = [&] {
    return Invalid(
        absl::StrCat("out of range: must be in [", kMin, ", ", kMax, "]"));
  };
  absl::string_view digits = text;
  if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) {
    digits.remove_prefix(1);
  }
  T value;
  if (!digits.empty() &&
      digits.find_first_not_of("0123456789") == absl::string_view::npos) {
    if (!absl::SimpleAtoi(text, &value)) return out_of_range();
    return value;
  }
  double d = 0;
  if (!IsDecimalNumber(text) || !absl::SimpleAtod(text, &d) ||
      std::trunc(d) != d) {
    return Invalid("not an integer");
  }
  // kMax + 1 is a power of two, exact as a double, unlike kMax itself.
  if (d < static_cast<double>(kMin) || d >= static_cast<double>(kMax) + 1.0) {
    return out_of_range();
  }
  return static_cast<T>(d);
}

absl::StatusOr<double> ParseNumber(absl::string_view text, bool is_float) {
  double d = 0;
  if (!IsDecimalNumber(text) || !absl::SimpleAtod(text, &d)) {
    return Invalid("not a number");
  }
  const double max = is_float ? std::numeric_limits<float>::max()
                              : std::numeric_limits<double>::max();
  // An overflowing double reads as infinity.
  if (!std::isfinite(d) || std::abs(d) > max) {
    return Invalid(absl::StrCat("out of range: must be within +-", max));
  }
  return d;
}

absl::StatusOr<bool> ParseBool(absl::string_view text) {
  if (text == "true") return true;
  if (text == "false") return false;
  return Invalid("not true or false");
}

absl::StatusOr<int> ParseEnum(absl::string_view text, const EnumDescriptor& e) {
  if (const auto* v = e.FindValueByName(std::string(text)); v != nullptr) {
    return v->number();
  }
  std::vector<std::string> names;
  for (int i = 0; i < e.value_count(); ++i) {
    // The zero value means "unset"; a spec never needs to name it.
    if (e.value(i)->number() != 0) names.push_back(e.value(i)->name());
  }
  return Invalid(absl::StrCat("not one of ", absl::StrJoin(names, ", ")));
}

// Reads one value of `f` from `text` and sets it, or appends it to a
// repeated field.
absl::Status Store(Message& m, const FieldDescriptor& f,
                   absl::string_view text) {
  const Reflection& r = *m.GetReflection();
  const bool add = f.is_repeated();
  if (f.cpp_type() != FieldDescriptor::CPPTYPE_STRING) {
    text = absl::StripAsciiWhitespace(text);
  }
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      ASSIGN_OR_RETURN(int32_t v, ParseInteger<int32_t>(text));
      add ? r.AddInt32(&m, &f, v) : r.SetInt32(&m, &f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      ASSIGN_OR_RETURN(int64_t v, ParseInteger<int64_t>(text));
      add ? r.AddInt64(&m, &f, v) : r.SetInt64(&m, &f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      ASSIGN_OR_RETURN(uint32_t v, ParseInteger<uint32_t>(text));
      add ? r.AddUInt32(&m, &f, v) : r.SetUInt32(&m, &f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      ASSIGN_OR_RETURN(uint64_t v, ParseInteger<uint64_t>(text));
      add ? r.AddUInt64(&m, &f, v) : r.SetUInt64(&m, &f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      ASSIGN_OR_RETURN(double v, ParseNumber(text, false));
      add ? r.AddDouble(&m, &f, v) : r.SetDouble(&m, &f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_FLOAT: {
      ASSIGN_OR_RETURN(double v, ParseNumber(text, true));
      const float fv = static_cast<float>(v);
      add ? r.AddFloat(&m, &f, fv) : r.SetFloat(&m, &f, fv);
      break;
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      ASSIGN_OR_RETURN(bool v, ParseBool(text));
      add ? r.AddBool(&m, &f, v) : r.SetBool(&m, &f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_ENUM: {
      ASSIGN_OR_RETURN(int v, ParseEnum(text, *f.enum_type()));
      add ? r.AddEnumValue(&m, &f, v) : r.SetEnumValue(&m, &f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING:
      // Protobuf would refuse to parse the message on the server's side.
      if (f.type() == FieldDescriptor::TYPE_STRING &&
          !IsValidUtf8(std::string_view(text.data(), text.size()))) {
        return Invalid("not valid UTF-8");
      }
      add ? r.AddString(&m, &f, std::string(text))
          : r.SetString(&m, &f, std::string(text));
      break;
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return Invalid(absl::StrCat(f.name(), " is a message"));  // Walk's job
  }
  return absl::OkStatus();
}

// A repeated field takes a comma-separated list that replaces it, in
// brackets or not ("512,256", "[512,256]"; "[]" or nothing empties it).
absl::Status SetLeaf(Message& m, const FieldDescriptor& f,
                     absl::string_view value) {
  const bool opens = absl::StartsWith(value, "[");
  const bool closes = absl::EndsWith(value, "]");
  if (!f.is_repeated()) {
    if (opens && f.cpp_type() != FieldDescriptor::CPPTYPE_STRING) {
      return Invalid("brackets are for a list, and this field takes one value");
    }
    return Store(m, f, value);
  }
  if (opens != closes) {  // "[" alone opens and does not close
    return Invalid(opens ? "a '[' without its ']'" : "a ']' without its '['");
  }
  if (opens) value = value.substr(1, value.size() - 2);
  m.GetReflection()->ClearField(&m, &f);
  if (value.empty()) return absl::OkStatus();
  int n = 0;
  for (absl::string_view item : absl::StrSplit(value, ',')) {
    ++n;
    absl::Status s = Store(m, f, item);
    if (!s.ok()) {
      return Invalid(
          absl::StrCat("item ", n, " (\"", item, "\"): ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status Apply(absl::string_view assignment, Message& message,
                   absl::string_view root_label) {
  if (assignment.empty())
    return Invalid("empty override; expected FIELD=VALUE");
  const size_t eq = assignment.find('=');
  if (eq == absl::string_view::npos) {
    return Invalid(absl::StrCat(assignment, ": expected FIELD=VALUE"));
  }
  std::unique_ptr<Message> copy(message.New());
  copy->CopyFrom(message);
  const FieldDescriptor* leaf = nullptr;
  absl::StatusOr<Message*> holder =
      Walk(*copy, root_label, assignment.substr(0, eq), &leaf);
  absl::Status s = holder.ok()
                       ? SetLeaf(**holder, *leaf, assignment.substr(eq + 1))
                       : holder.status();
  if (!s.ok()) return Invalid(absl::StrCat(assignment, ": ", s.message()));
  message.GetReflection()->Swap(&message, copy.get());
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplySpecOverride(std::string_view assignment,
                               trainyard::v1::JobSpec& spec) {
  return Apply(absl::string_view(assignment.data(), assignment.size()), spec,
               "the spec");
}

absl::Status ApplyFieldOverride(std::string_view assignment,
                                google::protobuf::Message& message) {
  return Apply(absl::string_view(assignment.data(), assignment.size()), message,
               message.GetDescriptor()->name());
}

}  // namespace trainyard::spec
