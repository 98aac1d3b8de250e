// A strict RFC 8259 syntax check for JSON specs. Specs that look like JSON
// are checked with it before the YAML route (YAML accepts "steps: }" as
// null, protobuf's JSON reader accepts trailing commas and single quotes),
// so a broken JSON file is reported as such, with its line and column.
// Stateless; thread-safe.
#ifndef TRAINYARD_SPEC_JSON_SYNTAX_H_
#define TRAINYARD_SPEC_JSON_SYNTAX_H_

#include <string_view>

#include "absl/status/status.h"

namespace trainyard::spec {

// True when the first non-blank character is '{' (a JSON object).
bool LooksLikeJson(std::string_view text);

// OK, or INVALID_ARGUMENT "line L, column C: <problem>" (1-based).
absl::Status CheckJsonSyntax(std::string_view text, int max_depth = 32);

}  // namespace trainyard::spec

#endif  // TRAINYARD_SPEC_JSON_SYNTAX_H_
