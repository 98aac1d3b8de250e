// Converts one YAML document (JSON included, as JSON is a subset of YAML)
// into JSON text for protobuf's JSON parser. Plain scalars that read as
// numbers, booleans or null become JSON values; quoted or tagged scalars stay
// strings. Built for untrusted input: the document size, nesting depth and
// the number of nodes after alias expansion are bounded, duplicate keys are
// rejected, and no input makes it crash or loop. Stateless; thread-safe.
#ifndef TRAINYARD_SPEC_YAML_TO_JSON_H_
#define TRAINYARD_SPEC_YAML_TO_JSON_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "spec/limits.h"

namespace trainyard::spec {

struct YamlLimits {
  int64_t max_bytes = kMaxSpecBytes;
  int max_depth = kMaxSpecDepth;
  // Nodes visited while expanding aliases: a "billion laughs" document is
  // small on disk and enormous once expanded.
  int64_t max_nodes = kMaxSpecNodes;
  // Bytes of JSON written: nodes alone do not bound it, as one aliased
  // node may be a string of most of max_bytes.
  int64_t max_json_bytes = kMaxSpecExpandedBytes;
};

// Where each field of the document was written: its dotted path as the
// JSON parser names it ("model.mlp.hidden", a list's item "data.files[2]")
// -> "line L, column C" of its key (an item: of the item), 1-based.
using YamlPlaces = std::map<std::string, std::string>;

// Returns the JSON text, or INVALID_ARGUMENT with a message such as
// "line 3, column 7: duplicate key \"steps\"" (1-based positions), or
// "empty" for a document with no content. With `places`, fills it in.
absl::StatusOr<std::string> YamlToJson(std::string_view text,
                                       const YamlLimits& limits = {},
                                       YamlPlaces* places = nullptr);

}  // namespace trainyard::spec

#endif  // TRAINYARD_SPEC_YAML_TO_JSON_H_
