// Status code -> exit code, per the table in exit_codes.h.
#include "client/exit_codes.h"

namespace trainyard::client {

ExitCode ExitCodeForStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kAlreadyExists:  // a request id used with another
                                            // spec
      return kExitInvalidArgument;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    case absl::StatusCode::kFailedPrecondition:
      return kExitFailedPrecondition;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnavailable;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kExitDenied;
    case absl::StatusCode::kResourceExhausted:
      return kExitExhausted;
    default:
      return kExitServerError;
  }
}

}  // namespace trainyard::client
