// gRPC's own log lines (gpr_log: a failed TLS handshake, a refused
// connection) in the daemons' log format, with repeats held back. gRPC
// logs a failed handshake on every connection attempt, once a second
// while a worker retries, beside the one line the worker writes itself;
// RepeatFilter keeps the first line from each place of gRPC's source and
// then at most one a minute, saying how many it held back.
//
// yard-server and yard-worker call RouteGrpcLogs() at start; the CLI keeps
// gRPC quiet instead (its errors come back as call statuses). With
// GRPC_VERBOSITY set in the environment gRPC's own logging is left as it
// is, so nothing is lost when debugging gRPC itself.
#ifndef TRAINYARD_COMMON_GRPC_LOG_H_
#define TRAINYARD_COMMON_GRPC_LOG_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainyard {

// Which lines of a repeating source to show: the first, then one per
// `window`. Thread-safe.
class RepeatFilter {
 public:
  explicit RepeatFilter(absl::Duration window) : window_(window) {}

  // Whether to show a line from `source` at `now`; if so, *held_back is
  // how many lines from it were not shown since the last one that was.
  bool Show(const std::string& source, absl::Time now, int64_t* held_back);

 private:
  struct Seen {
    absl::Time shown;
    int64_t held_back = 0;
  };
  const absl::Duration window_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Seen> seen_ ABSL_GUARDED_BY(mu_);
};

// Sends gRPC's log lines through trainyard's log (common/log.h) as
// warnings, "grpc: MESSAGE" with gRPC's file:line, at most one a minute
// from each place of its source. Nothing when GRPC_VERBOSITY is set.
void RouteGrpcLogs();

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_GRPC_LOG_H_
