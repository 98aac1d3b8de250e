// Overriding one field of a spec from text, as `yard submit --set
// optimizer.lr=0.003` does, so that a sweep needs no edited copies of the
// spec file. An override names a field by its dotted path of proto field
// names (the names spec files use) and gives its value as text, read as the
// spec file's JSON mapping would read it. Pure functions; thread-safe.
#ifndef TRAINYARD_SPEC_SPEC_OVERRIDE_H_
#define TRAINYARD_SPEC_SPEC_OVERRIDE_H_

#include <string_view>

#include "absl/status/status.h"
#include "google/protobuf/message.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard::spec {

// Applies `assignment`, "PATH=VALUE" (split at the first '='), to `spec`.
// PATH is dotted field names, e.g. "model.mlp.hidden" (a lowerCamelCase
// JSON name such as "microBatch" works too). Messages on the way are
// created as needed; naming a member of a oneof switches the oneof to it
// (the spec may then be invalid, which validation reports). The field at
// the end must be a scalar, read from VALUE as:
//   integers  decimal, or a whole number written like 2e3 (as YAML may);
//             range-checked for the field's type;
//   floating  a finite number ("3e-4" included), range-checked for float;
//   bool      true or false;
//   string    VALUE verbatim ('=' and spaces included, may be empty),
//             which must be valid UTF-8;
//   enum      a value name, e.g. "BF16".
// A repeated scalar field takes a comma-separated list that replaces it,
// in brackets or not ("512,256" or "[512,256]"; an empty VALUE or "[]"
// empties it). Numbers and names may have spaces around them; strings are
// kept as written (a single string field's "[x]" included).
// Errors are INVALID_ARGUMENT whose message starts with the assignment, e.g.
// `optimizer.lrr=1: no field "lrr" in optimizer (fields: lr, ...)`, and
// leave `spec` unchanged.
absl::Status ApplySpecOverride(std::string_view assignment,
                               trainyard::v1::JobSpec& spec);

// The same for any message. Errors name a top-level field as being "in
// the spec" above, and "in <type name>" here.
absl::Status ApplyFieldOverride(std::string_view assignment,
                                google::protobuf::Message& message);

}  // namespace trainyard::spec

#endif  // TRAINYARD_SPEC_SPEC_OVERRIDE_H_
