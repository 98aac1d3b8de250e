// Errors about fields of a request, for people and programs alike: the
// status's message says "field: problem; field: problem", and its payload
// (under kBadRequestTypeUrl) is a google.rpc.BadRequest listing each field
// and problem. ToGrpcStatus (common/rpc_status.h) sends the payload as the
// call's status details, which gRPC clients in any language decode; a
// client tells what was wrong by field, not by parsing the message.
#ifndef TRAINYARD_COMMON_FIELD_ERRORS_H_
#define TRAINYARD_COMMON_FIELD_ERRORS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace trainyard {

inline constexpr char kBadRequestTypeUrl[] =
    "type.googleapis.com/google.rpc.BadRequest";

struct FieldViolation {
  std::string field;        // its path, e.g. "batch.micro_batch"
  std::string description;  // e.g. "must be in [1, 4096], got 0"

  bool operator==(const FieldViolation& o) const {
    return field == o.field && description == o.description;
  }
};

// A status of `code` (not OK) about `violations` (at least one; one with
// no field is said without "field: ").
absl::Status FieldErrors(absl::StatusCode code,
                         const std::vector<FieldViolation>& violations);

// A status of `code` about one field: message "field: description".
absl::Status FieldError(absl::StatusCode code, absl::string_view field,
                        absl::string_view description);

inline absl::Status InvalidFieldError(absl::string_view field,
                                      absl::string_view description) {
  return FieldError(absl::StatusCode::kInvalidArgument, field, description);
}

// OK when lo <= value <= hi, else INVALID_ARGUMENT about `field`:
// "must be in [lo, hi], got value".
absl::Status CheckFieldRange(absl::string_view field, int64_t value, int64_t lo,
                             int64_t hi);

// Free text a request carries that is stored and shown in listings and
// logs (a name, a reason, a description, a request id): at most
// `max_bytes` bytes of UTF-8 without control characters (HasControlCharacter);
// otherwise INVALID_ARGUMENT about `field`.
absl::Status CheckFreeText(absl::string_view field, std::string_view text,
                           int64_t max_bytes);

// The fields `s` is about; empty when it names none (or is OK).
std::vector<FieldViolation> FieldViolations(const absl::Status& s);

// Whether `s` is about `field` (or a field or element under it, "field.x",
// "field[2]").
bool IsAboutField(const absl::Status& s, absl::string_view field);

// `s` with `prefix` before each violation's field, its message unchanged:
// for the fields of a message nested in a request (prefix "spec."). A
// violation naming no field becomes one about the nested message ("spec").
absl::Status PrefixFields(absl::string_view prefix, absl::Status s);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_FIELD_ERRORS_H_
