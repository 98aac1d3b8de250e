// The exit codes of `yard`, and how a status maps onto them. Scripts rely on
// these numbers; the table is repeated in client/README.md and --help.
//
//   0  success
//   1  the job ended but did not succeed (submit --wait, watch), or a local
//      failure that is none of the below
//   2  usage error: unknown command or flag, missing argument
//   3  invalid spec or argument: the spec file cannot be read or parsed, a
//      submit --set override does not fit it, or the server answered
//      INVALID_ARGUMENT or ALREADY_EXISTS (a request id used with another
//      spec)
//   4  not found: unknown job id (NOT_FOUND)
//   5  failed precondition: e.g. cancelling a job that already ended, or
//      deleting one that has not (FAILED_PRECONDITION)
//   6  server unreachable or unavailable (UNAVAILABLE, DEADLINE_EXCEEDED)
//   7  any other server error (INTERNAL, OUT_OF_RANGE, ...)
//   8  not authenticated or not allowed (UNAUTHENTICATED: missing, wrong,
//      revoked or unsendable token; PERMISSION_DENIED: the token's role or
//      tenant may not)
//   9  a quota or limit was reached (RESOURCE_EXHAUSTED)
#ifndef TRAINYARD_CLIENT_EXIT_CODES_H_
#define TRAINYARD_CLIENT_EXIT_CODES_H_

#include "absl/status/status.h"

namespace trainyard::client {

enum ExitCode : int {
  kExitOk = 0,
  kExitJobNotSucceeded = 1,
  kExitUsage = 2,
  kExitInvalidArgument = 3,
  kExitNotFound = 4,
  kExitFailedPrecondition = 5,
  kExitUnavailable = 6,
  kExitServerError = 7,
  kExitDenied = 8,
  kExitExhausted = 9,
};

// The exit code for a failed (or OK) call to the server.
ExitCode ExitCodeForStatus(const absl::Status& status);

}  // namespace trainyard::client

#endif  // TRAINYARD_CLIENT_EXIT_CODES_H_
