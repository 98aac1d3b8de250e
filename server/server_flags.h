// Command-line flags of yard-server, parsed into YardServerOptions. Flags
// take `--name value` or `--name=value`; dashes and underscores in names
// are interchangeable. Pure function: no I/O, no exit().
#ifndef TRAINYARD_SERVER_SERVER_FLAGS_H_
#define TRAINYARD_SERVER_SERVER_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/yard_server.h"

namespace trainyard::server {

struct ServerCommandLine {
  YardServerOptions options;
  bool help = false;  // --help: print ServerUsage() and exit 0
};

// `args` excludes the program name. INVALID_ARGUMENT naming the flag for
// unknown flags, missing or malformed values, and a missing --state-dir.
absl::StatusOr<ServerCommandLine> ParseServerFlags(
    const std::vector<std::string>& args);

std::string ServerUsage();

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_SERVER_FLAGS_H_
