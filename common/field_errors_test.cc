#include "common/field_errors.h"

#include <string>
#include <vector>

#include "common/rpc_status.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

TEST(FieldErrorsTest, MessageNamesEachFieldAndPayloadListsThem) {
  absl::Status s =
      FieldErrors(absl::StatusCode::kInvalidArgument,
                  {{"batch.micro_batch", "must be in [1, 4096], got 0"},
                   {"name", "required"}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "batch.micro_batch: must be in [1, 4096], got 0; name: required");
  EXPECT_EQ(FieldViolations(s),
            (std::vector<FieldViolation>{
                {"batch.micro_batch", "must be in [1, 4096], got 0"},
                {"name", "required"}}));
  EXPECT_TRUE(IsAboutField(s, "batch"));
  EXPECT_TRUE(IsAboutField(s, "name"));
  EXPECT_FALSE(IsAboutField(s, "batch.micro"));
  EXPECT_FALSE(IsAboutField(s, "request_id"));
}

TEST(FieldErrorsTest, PlainStatusNamesNoField) {
  EXPECT_TRUE(FieldViolations(absl::InvalidArgumentError("request_id: x"))
                  .empty());
  EXPECT_TRUE(FieldViolations(absl::OkStatus()).empty());
  EXPECT_FALSE(IsAboutField(absl::InvalidArgumentError("request_id: x"),
                            "request_id"));
}

TEST(FieldErrorsTest, PrefixFieldsKeepsTheMessage) {
  absl::Status s = PrefixFields("spec.", InvalidFieldError("name", "required"));
  EXPECT_EQ(s.message(), "name: required");
  EXPECT_EQ(FieldViolations(s),
            (std::vector<FieldViolation>{{"spec.name", "required"}}));
  EXPECT_EQ(PrefixFields("spec.", absl::InternalError("x")),
            absl::InternalError("x"));
  // A problem of the nested message as a whole is about it.
  absl::Status whole = PrefixFields(
      "spec.", FieldErrors(absl::StatusCode::kInvalidArgument,
                           {{"", "the spec is 2 MiB"}, {"name", "required"}}));
  EXPECT_EQ(whole.message(), "the spec is 2 MiB; name: required");
  EXPECT_EQ(FieldViolations(whole),
            (std::vector<FieldViolation>{{"spec", "the spec is 2 MiB"},
                                         {"spec.name", "required"}}));
}

TEST(FieldErrorsTest, AnElementIsUnderItsList) {
  absl::Status s = InvalidFieldError("depends_on[1]", "listed twice");
  EXPECT_TRUE(IsAboutField(s, "depends_on"));
  EXPECT_FALSE(IsAboutField(s, "depends"));
}

TEST(FieldErrorsTest, CheckFieldRangeNamesTheFieldAndTheBounds) {
  EXPECT_TRUE(CheckFieldRange("priority", -1000, -1000, 1000).ok());
  EXPECT_TRUE(CheckFieldRange("priority", 1000, -1000, 1000).ok());
  const absl::Status s = CheckFieldRange("priority", 1001, -1000, 1000);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "priority: must be in [-1000, 1000], got 1001");
  EXPECT_TRUE(IsAboutField(s, "priority"));
}

TEST(FieldErrorsTest, FreeTextIsBoundedUtf8WithoutControlCharacters) {
  EXPECT_TRUE(CheckFreeText("reason", "disk swap \u00e9", 64).ok());
  EXPECT_TRUE(CheckFreeText("reason", "", 0).ok());
  EXPECT_EQ(CheckFreeText("reason", "abcde", 4).message(),
            "reason: at most 4 bytes of UTF-8, got 5");
  EXPECT_EQ(CheckFreeText("reason", "a\xff", 64).message(),
            "reason: must be valid UTF-8");
  for (const std::string& bad : std::vector<std::string>{
           "a\nb", std::string("a\0b", 3), "a\x7f", "a\u0085b"}) {
    const absl::Status s = CheckFreeText("request_id", bad, 64);
    EXPECT_EQ(s.message(), "request_id: must not contain control characters")
        << bad;
    EXPECT_TRUE(IsAboutField(s, "request_id"));
  }
}

TEST(RpcStatusTest, ViolationsTravelAsRichErrorDetails) {
  const absl::Status s = FieldError(absl::StatusCode::kAlreadyExists,
                                    "request_id", "r1 was already used");
  const grpc::Status wire = ToGrpcStatus(s);
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(wire.error_message(), "request_id: r1 was already used");
  // What a gRPC client in another language decodes from the trailer.
  google::rpc::Status details;
  ASSERT_TRUE(details.ParseFromString(wire.error_details()));
  EXPECT_EQ(details.code(), static_cast<int>(grpc::StatusCode::ALREADY_EXISTS));
  EXPECT_EQ(details.message(), wire.error_message());
  ASSERT_EQ(details.details_size(), 1);
  google::rpc::BadRequest bad;
  ASSERT_TRUE(details.details(0).UnpackTo(&bad));
  ASSERT_EQ(bad.field_violations_size(), 1);
  EXPECT_EQ(bad.field_violations(0).field(), "request_id");
  EXPECT_EQ(bad.field_violations(0).description(), "r1 was already used");
  // And back: the same status, payload included.
  const absl::Status back = FromGrpcStatus(wire);
  EXPECT_EQ(back, s);
  EXPECT_TRUE(IsAboutField(back, "request_id"));
}

TEST(RpcStatusTest, PlainAndOversizedStatusesCarryNoDetails) {
  EXPECT_TRUE(ToGrpcStatus(absl::NotFoundError("job x")).error_details().empty());
  const absl::Status big =
      InvalidFieldError("name", std::string(kMaxStatusDetailsBytes, 'x'));
  const grpc::Status wire = ToGrpcStatus(big);
  EXPECT_EQ(wire.error_message(), big.message());
  EXPECT_TRUE(wire.error_details().empty());
  EXPECT_FALSE(FromGrpcStatus(wire).GetPayload(kBadRequestTypeUrl).has_value());
  // Details that do not parse are ignored, the status kept.
  const absl::Status odd = FromGrpcStatus(
      grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "m", "\xff\xff\xff"));
  EXPECT_EQ(odd, absl::InvalidArgumentError("m"));
}

}  // namespace
}  // namespace trainyard
