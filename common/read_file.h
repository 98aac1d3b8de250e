// Reading a whole file with a size limit, and turning an errno into a
// status with the canonical code a caller can act on. Shared by the
// engine (checkpoints, datasets, exports) and the gRPC layers (TLS files,
// tokens, client config). Plain functions; thread-safe.
#ifndef TRAINYARD_COMMON_READ_FILE_H_
#define TRAINYARD_COMMON_READ_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainyard {

// "PATH: WHAT: strerror(err)" as NOT_FOUND (ENOENT), PERMISSION_DENIED
// (EACCES, EPERM), RESOURCE_EXHAUSTED (ENOSPC, EDQUOT) or INTERNAL.
absl::Status ErrnoStatus(absl::string_view what, const std::string& path,
                         int err);

// Reads a whole file: NOT_FOUND when missing, RESOURCE_EXHAUSTED when
// larger than max_bytes (checked before reading), other errno failures as
// ErrnoStatus says.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path,
                                          int64_t max_bytes);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_READ_FILE_H_
