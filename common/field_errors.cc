#include "common/field_errors.h"

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/utf8.h"
#include "google/rpc/error_details.pb.h"

namespace trainyard {
namespace {

google::rpc::BadRequest ToProto(const std::vector<FieldViolation>& list) {
  google::rpc::BadRequest request;
  for (const FieldViolation& v : list) {
    google::rpc::BadRequest::FieldViolation* out =
        request.add_field_violations();
    out->set_field(v.field);
    out->set_description(v.description);
  }
  return request;
}

}  // namespace

absl::Status FieldErrors(absl::StatusCode code,
                         const std::vector<FieldViolation>& violations) {
  absl::Status status(
      code, absl::StrJoin(violations, "; ",
                          [](std::string* out, const FieldViolation& v) {
                            absl::StrAppend(out, v.field,
                                            v.field.empty() ? "" : ": ",
                                            v.description);
                          }));
  status.SetPayload(kBadRequestTypeUrl,
                    absl::Cord(ToProto(violations).SerializeAsString()));
  return status;
}

absl::Status FieldError(absl::StatusCode code, absl::string_view field,
                        absl::string_view description) {
  return FieldErrors(code, {{std::string(field), std::string(description)}});
}

absl::Status CheckFieldRange(absl::string_view field, int64_t value, int64_t lo,
                             int64_t hi) {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return InvalidFieldError(
      field, absl::StrCat("must be in [", lo, ", ", hi, "], got ", value));
}

absl::Status CheckFreeText(absl::string_view field, std::string_view text,
                           int64_t max_bytes) {
  if (static_cast<int64_t>(text.size()) > max_bytes) {
    return InvalidFieldError(
        field, absl::StrCat("at most ", max_bytes, " bytes of UTF-8, got ",
                            text.size()));
  }
  if (!IsValidUtf8(text)) {
    return InvalidFieldError(field, "must be valid UTF-8");
  }
  if (HasControlCharacter(text)) {
    return InvalidFieldError(field, "must not contain control characters");
  }
  return absl::OkStatus();
}

std::vector<FieldViolation> FieldViolations(const absl::Status& s) {
  std::vector<FieldViolation> list;
  const auto payload = s.GetPayload(kBadRequestTypeUrl);
  google::rpc::BadRequest request;
  if (!payload.has_value() || !request.ParseFromString(std::string(*payload))) {
    return list;
  }
  for (const auto& v : request.field_violations()) {
    list.push_back({v.field(), v.description()});
  }
  return list;
}

bool IsAboutField(const absl::Status& s, absl::string_view field) {
  for (const FieldViolation& v : FieldViolations(s)) {
    if (v.field == field ||
        absl::StartsWith(v.field, absl::StrCat(field, ".")) ||
        absl::StartsWith(v.field, absl::StrCat(field, "["))) {
      return true;
    }
  }
  return false;
}

absl::Status PrefixFields(absl::string_view prefix, absl::Status s) {
  std::vector<FieldViolation> list = FieldViolations(s);
  if (list.empty()) return s;
  for (FieldViolation& v : list) {
    // A violation about no field of the nested message is about it whole.
    v.field = v.field.empty() ? std::string(absl::StripSuffix(prefix, "."))
                              : absl::StrCat(prefix, v.field);
  }
  s.SetPayload(kBadRequestTypeUrl,
               absl::Cord(ToProto(list).SerializeAsString()));
  return s;
}

}  // namespace trainyard
