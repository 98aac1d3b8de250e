// Reading a JobSpec from YAML or JSON text: YAML -> JSON (yaml_to_json.h),
// then protobuf's JSON parser with unknown fields refused. Protobuf's error
// text is reworded so that it names the offending field plainly.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "spec/json_syntax.h"
#include "spec/limits.h"
#include "spec/spec.h"
#include "spec/yaml_to_json.h"

namespace trainyard::spec {
namespace {

using ::trainyard::v1::JobSpec;

// What a protobuf JSON type name means to someone writing a spec.
std::string Expected(absl::string_view type) {
  if (absl::StartsWith(type, "TYPE_UINT") ||
      absl::StartsWith(type, "TYPE_FIXED")) {
    return "a non-negative integer";
  }
  if (type == "TYPE_STRING") return "a string";
  if (type == "TYPE_BOOL") return "true or false";
  if (type == "TYPE_DOUBLE" || type == "TYPE_FLOAT") return "a number";
  if (absl::StartsWith(type, "TYPE_INT") || absl::StartsWith(type, "TYPE_S")) {
    return "an integer";
  }
  absl::string_view name = type;
  if (absl::ConsumePrefix(&name, "type.googleapis.com/")) {
    const auto* pool = google::protobuf::DescriptorPool::generated_pool();
    if (const auto* e = pool->FindEnumTypeByName(std::string(name))) {
      std::vector<std::string> values;
      for (int i = 0; i < e->value_count(); ++i) {
        if (e->value(i)->number() != 0) values.push_back(e->value(i)->name());
      }
      return absl::StrCat("one of ", absl::StrJoin(values, ", "));
    }
    if (pool->FindMessageTypeByName(std::string(name)) != nullptr) {
      return "a mapping of field names to values";
    }
  }
  return std::string(type);
}

// Names of the fields of the oneof `group` in the message at `path` (a
// dotted JobSpec field path, list indexes allowed).
std::string OneofChoices(absl::string_view path, absl::string_view group) {
  const google::protobuf::Descriptor* d = JobSpec::descriptor();
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    part = part.substr(0, part.find('['));
    const auto* f = d->FindFieldByName(std::string(part));
    if (f == nullptr) f = d->FindFieldByCamelcaseName(std::string(part));
    if (f == nullptr || f->message_type() == nullptr) return "";
    d = f->message_type();
  }
  const auto* oneof = d->FindOneofByName(std::string(group));
  if (oneof == nullptr) return "";
  std::vector<std::string> names;
  for (int i = 0; i < oneof->field_count(); ++i) {
    names.push_back(oneof->field(i)->name());
  }
  return absl::StrJoin(names, ", ");
}

// A JSON parse error as a spec's author reads it, and the field it is
// about (its dotted path as the parser names it; "" when not known).
struct ProtoError {
  std::string field;
  std::string text;
};

// Protobuf 3.21 words its JSON errors for protobuf developers, e.g.
// "(model.mlp) foo: Cannot find field." or "(steps): invalid value \"abc\"
// for type TYPE_INT64". Reword the known shapes as "field: problem".
ProtoError ReadableProtoError(absl::string_view msg) {
  std::string text(absl::StripAsciiWhitespace(msg));
  std::string path;
  absl::string_view rest = text;
  if (absl::ConsumePrefix(&rest, "(")) {
    size_t close = rest.find(')');
    if (close == absl::string_view::npos) return {"", text};
    path = std::string(rest.substr(0, close));
    rest.remove_prefix(close + 1);
    absl::ConsumePrefix(&rest, " ");
  }
  auto join = [&](absl::string_view child) {
    return path.empty() ? std::string(child) : absl::StrCat(path, ".", child);
  };
  size_t sep = rest.find(": ");
  if (sep != absl::string_view::npos && sep > 0) {
    absl::string_view name = rest.substr(0, sep);
    absl::string_view detail = rest.substr(sep + 2);
    if (detail == "Cannot find field.") {
      return {join(name), absl::StrCat(path.empty() ? "" : path + ": ",
                                       "unknown field \"", name, "\"")};
    }
    if (absl::StartsWith(detail, "Proto field is not repeating")) {
      return {join(name), absl::StrCat(join(name), ": must not be a list")};
    }
    return {join(name), absl::StrCat(join(name), ": ", detail)};
  }
  if (!absl::ConsumePrefix(&rest, ": invalid value ")) return {path, text};
  absl::string_view oneof = rest;
  if (absl::ConsumePrefix(&oneof, "oneof field '")) {
    std::string group(oneof.substr(0, oneof.find('\'')));
    return {path, absl::StrCat(path, ": set only one of ",
                               OneofChoices(path, group))};
  }
  size_t for_type = rest.rfind(" for type ");
  if (for_type == absl::string_view::npos) return {path, text};
  absl::string_view value = rest.substr(0, for_type);
  absl::string_view type = rest.substr(for_type + 10);
  if (absl::StartsWith(value, "Starting an object")) {
    return {
        join(type),
        absl::StrCat(join(type), ": expected a single value, got a mapping")};
  }
  return {path, absl::StrCat(path, ": invalid value ", value, " (expected ",
                             Expected(type), ")")};
}

absl::Status TooLarge(absl::string_view source, int64_t bytes) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": spec is ", bytes,
                                                 " bytes; the limit is ",
                                                 kMaxSpecBytes, " (1 MiB)"));
}

absl::StatusOr<JobSpec> ParseNamed(absl::string_view text,
                                   absl::string_view source) {
  if (static_cast<int64_t>(text.size()) > kMaxSpecBytes) {
    return TooLarge(source, static_cast<int64_t>(text.size()));
  }
  std::string_view view(text.data(), text.size());
  if (LooksLikeJson(view)) {
    // A JSON spec must be JSON; the YAML route alone would be lenient.
    absl::Status syntax = CheckJsonSyntax(view, kMaxSpecDepth);
    if (!syntax.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": ", syntax.message()));
    }
  }
  YamlPlaces places;
  absl::StatusOr<std::string> json = YamlToJson(view, {}, &places);
  if (!json.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", json.status().message()));
  }
  JobSpec spec;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status =
      google::protobuf::util::JsonStringToMessage(*json, &spec, options);
  if (!status.ok()) {
    const ProtoError e = ReadableProtoError(status.message().as_string());
    // The line of the field it is about, as a syntax error has.
    const auto place = places.find(e.field);
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", place == places.end() ? "" : place->second + ": ",
        e.text));
  }
  return spec;
}

}  // namespace

absl::StatusOr<JobSpec> ParseJobSpec(std::string_view text) {
  return ParseNamed(absl::string_view(text.data(), text.size()), "spec");
}

absl::StatusOr<JobSpec> ReadJobSpecFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open spec file: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file"));
  }
  if (st.st_size > kMaxSpecBytes) return TooLarge(path, st.st_size);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot open spec file: ", std::strerror(errno)));
  }
  // Read one byte past the limit: a file that grew since the stat is still
  // refused without reading all of it.
  std::string text(static_cast<size_t>(kMaxSpecBytes) + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot read spec file"));
  }
  text.resize(static_cast<size_t>(in.gcount()));
  return ParseNamed(text, path);
}

std::string JobSpecToJson(const JobSpec& spec, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.preserve_proto_field_names = true;
  std::string out;
  // Printing a valid message cannot fail.
  (void)google::protobuf::util::MessageToJsonString(spec, &out, options);
  return out;
}

}  // namespace trainyard::spec
