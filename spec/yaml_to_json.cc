// YAML -> JSON for job specs. yaml-cpp builds a node graph in which an alias
// is a shared node, so the graph stays small; the expansion happens here,
// while writing JSON, and that is where the node budget is enforced.
#include "spec/yaml_to_json.h"

#include <cstdint>
#include <exception>
#include <set>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/json_string.h"
#include "yaml-cpp/depthguard.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace trainyard::spec {
namespace {

std::string Place(const YAML::Mark& mark) {
  return absl::StrCat("line ", mark.line + 1, ", column ", mark.column + 1);
}

std::string Where(const YAML::Mark& mark) {
  if (mark.is_null()) return "";
  return absl::StrCat(Place(mark), ": ");
}

bool AllDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  return true;
}

// A YAML 1.2 core-schema decimal number ("+5", ".5", "1.", "1e-3") written
// as a JSON number, or false when `s` is not one.
bool YamlNumberToJson(absl::string_view s, std::string* json) {
  std::string sign;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    if (s[0] == '-') sign = "-";
    s.remove_prefix(1);
  }
  absl::string_view mantissa = s, exponent;
  if (size_t e = s.find_first_of("eE"); e != absl::string_view::npos) {
    mantissa = s.substr(0, e);
    exponent = s.substr(e + 1);
    absl::string_view digits = exponent;
    if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) {
      digits.remove_prefix(1);
    }
    if (!AllDigits(digits)) return false;
  }
  absl::string_view int_part = mantissa, frac_part;
  bool has_point = false;
  if (size_t p = mantissa.find('.'); p != absl::string_view::npos) {
    has_point = true;
    int_part = mantissa.substr(0, p);
    frac_part = mantissa.substr(p + 1);
  }
  if (int_part.empty() && frac_part.empty()) return false;
  if (!int_part.empty() && !AllDigits(int_part)) return false;
  if (!frac_part.empty() && !AllDigits(frac_part)) return false;
  if (!has_point && exponent.empty() && int_part.size() > 1 &&
      int_part[0] == '0') {
    return false;  // "0755" is octal in YAML 1.1: keep it a string.
  }
  size_t nonzero = int_part.find_first_not_of('0');
  absl::string_view int_digits =
      nonzero == absl::string_view::npos ? "0" : int_part.substr(nonzero);
  *json = absl::StrCat(sign, int_digits);
  if (!frac_part.empty()) absl::StrAppend(json, ".", frac_part);
  if (!exponent.empty()) absl::StrAppend(json, "e", exponent);
  return true;
}

class JsonWriter {
 public:
  JsonWriter(const YamlLimits& limits, YamlPlaces* places)
      : limits_(limits), places_(places) {}

  absl::Status Write(const YAML::Node& node, int depth, std::string* out) {
    if (++nodes_ > limits_.max_nodes) {
      return Error(
          node, absl::StrCat("document expands to more than ",
                             limits_.max_nodes, " nodes (too many aliases?)"));
    }
    if (static_cast<int64_t>(out->size()) > limits_.max_json_bytes) {
      return Error(node, absl::StrCat("document expands to more than ",
                                      limits_.max_json_bytes,
                                      " bytes of JSON (too many aliases?)"));
    }
    if (depth > limits_.max_depth) {
      return Error(node, absl::StrCat("nested deeper than ", limits_.max_depth,
                                      " levels"));
    }
    switch (node.Type()) {
      case YAML::NodeType::Map:
        return WriteMap(node, depth, out);
      case YAML::NodeType::Sequence:
        return WriteSequence(node, depth, out);
      case YAML::NodeType::Scalar:
        WriteScalar(node, out);
        return {};
      default:
        out->append("null");
        return {};
    }
  }

 private:
  static absl::Status Error(const YAML::Node& node, absl::string_view msg) {
    return absl::InvalidArgumentError(absl::StrCat(Where(node.Mark()), msg));
  }

  absl::Status WriteMap(const YAML::Node& node, int depth, std::string* out) {
    std::set<std::string> seen;
    out->push_back('{');
    bool first = true;
    for (const auto& kv : node) {
      const YAML::Node& key = kv.first;
      if (key.IsNull()) {
        return Error(key, "missing key (a stray ',' or ':'?)");
      }
      if (!key.IsScalar()) {
        return Error(key, "keys must be plain names");
      }
      if (!seen.insert(key.Scalar()).second) {
        return Error(key, absl::StrCat("duplicate key \"", key.Scalar(), "\""));
      }
      if (!first) out->push_back(',');
      first = false;
      AppendJsonString(key.Scalar(), out);
      out->push_back(':');
      const size_t parent = path_.size();
      if (parent > 0) path_.push_back('.');
      path_ += key.Scalar();
      Note(key);
      absl::Status s = Write(kv.second, depth + 1, out);
      path_.resize(parent);
      if (!s.ok()) return s;
    }
    out->push_back('}');
    return {};
  }

  // Where the field at path_ was written (the first place, should an
  // alias repeat it).
  void Note(const YAML::Node& node) {
    if (places_ != nullptr && !node.Mark().is_null()) {
      places_->emplace(path_, Place(node.Mark()));
    }
  }

  absl::Status WriteSequence(const YAML::Node& node, int depth,
                             std::string* out) {
    out->push_back('[');
    bool first = true;
    size_t index = 0;
    for (const auto& item : node) {
      if (!first) out->push_back(',');
      first = false;
      const size_t parent = path_.size();
      absl::StrAppend(&path_, "[", index++, "]");
      Note(item);
      absl::Status s = Write(item, depth + 1, out);
      path_.resize(parent);
      if (!s.ok()) return s;
    }
    out->push_back(']');
    return {};
  }

  static void WriteScalar(const YAML::Node& node, std::string* out) {
    const std::string& value = node.Scalar();
    if (node.Tag() != "?") {  // quoted or explicitly tagged: a string
      AppendJsonString(value, out);
      return;
    }
    std::string lower = absl::AsciiStrToLower(value);
    std::string number;
    if (lower == "true" || lower == "false") {
      out->append(lower);
    } else if (lower == ".inf" || lower == "+.inf") {
      out->append("\"Infinity\"");
    } else if (lower == "-.inf") {
      out->append("\"-Infinity\"");
    } else if (lower == ".nan") {
      out->append("\"NaN\"");
    } else if (YamlNumberToJson(value, &number)) {
      out->append(number);
    } else {
      AppendJsonString(value, out);
    }
  }

  const YamlLimits& limits_;
  YamlPlaces* places_;
  std::string path_;  // of the node being written
  int64_t nodes_ = 0;
};

// Parse events, ignored except for where each document starts.
class DocumentStarts : public YAML::EventHandler {
 public:
  const YAML::Mark& last() const { return last_; }

  void OnDocumentStart(const YAML::Mark& mark) override { last_ = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

 private:
  YAML::Mark last_ = YAML::Mark::null_mark();
};

// The one document of `text`; throws what yaml-cpp throws. Not LoadAll:
// yaml-cpp 0.7's LoadAll loops forever, allocating, on input such as ","
// (its parser reports empty documents without consuming anything; fixed
// upstream in 2024 by jbeder/yaml-cpp#1319). Load reads the first document,
// and a parser asked at most twice tells whether a second one follows.
absl::StatusOr<YAML::Node> LoadOneDocument(const std::string& text) {
  YAML::Node doc = YAML::Load(text);
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts starts;
  parser.HandleNextDocument(starts);
  const int first = starts.last().pos;
  if (parser.HandleNextDocument(starts)) {
    if (starts.last().pos <= first) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(starts.last()), "unexpected text (a stray ',' or ':'?)"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        Where(starts.last()), "expected one document, found a second one"));
  }
  return doc;
}

}  // namespace

absl::StatusOr<std::string> YamlToJson(std::string_view text,
                                       const YamlLimits& limits,
                                       YamlPlaces* places) {
  if (static_cast<int64_t>(text.size()) > limits.max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("document is ", text.size(),
                                                   " bytes; the limit is ",
                                                   limits.max_bytes));
  }
  absl::StatusOr<YAML::Node> doc;
  try {
    doc = LoadOneDocument(std::string(text));
  } catch (const YAML::DeepRecursion& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(e.mark), "nested too deeply"));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(Where(e.mark), e.msg));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
  if (!doc.ok()) return doc.status();
  if (!doc->IsDefined() || doc->IsNull()) {
    return absl::InvalidArgumentError("empty");
  }
  if (!doc->IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(doc->Mark()),
        "expected a mapping of field names to values at the top level"));
  }
  std::string json;
  try {
    JsonWriter writer(limits, places);
    absl::Status s = writer.Write(*doc, 0, &json);
    if (!s.ok()) return s;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
  return json;
}

}  // namespace trainyard::spec
