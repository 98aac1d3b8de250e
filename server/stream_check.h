// StreamCheck: what a server stream (WatchJob, GetJobLogs,
// DownloadCheckpoint) asks between its writes and while it waits: OK while
// it may go on, else the status it ends with — CANCELLED when the client
// went away, UNAUTHENTICATED when the token it was opened with has been
// revoked since (a revoked token is refused from the next call, and a
// stream that follows a job for hours is many calls' worth).
#ifndef TRAINYARD_SERVER_STREAM_CHECK_H_
#define TRAINYARD_SERVER_STREAM_CHECK_H_

#include <functional>

#include "absl/status/status.h"

namespace trainyard::server {

using StreamCheck = std::function<absl::Status()>;

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_STREAM_CHECK_H_
