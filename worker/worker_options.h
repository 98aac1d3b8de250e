// The yard-worker command line and the worker's identity on disk: flag
// parsing (pure), resolving the paths the flags name, the worker id kept in
// WORK_DIR/worker_id, and the lock that keeps two workers off one work dir.
// Free functions; safe to call from any thread on distinct work dirs.
#ifndef TRAINYARD_WORKER_WORKER_OPTIONS_H_
#define TRAINYARD_WORKER_WORKER_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/grpc_credentials.h"
#include "worker/child_process.h"
#include "worker/gpu_selection.h"

namespace trainyard::worker {

struct WorkerFlags {
  std::string server;    // HOST:PORT
  std::string work_dir;  // created if missing
  int cpu_slots = 1;
  // Which GPUs to offer (--gpus auto|none|LIST); see gpu_selection.h.
  GpuSelection gpus;
  std::string data_root;  // empty: the current directory
  std::string name;       // the worker id; empty: WORK_DIR/worker_id
  std::string train_bin;  // empty: yard-train beside our own executable
  // The IPv4 or IPv6 address (no brackets) on which a job's rank 0 here waits
  // for its ranks on other workers (a job spread over several); it must reach
  // this node.
  std::string rank_address = "127.0.0.1";
  // SIGTERM to the worker: how long its jobs get to checkpoint and exit.
  absl::Duration shutdown_grace = absl::Seconds(30);
  // Ended attempts' directories (spec and log) kept in WORK_DIR/jobs.
  int keep_attempt_dirs = 100;
  // Prometheus /metrics (loopback only; port 0 picks one, written to
  // WORK_DIR/yard-worker.metrics-addr). Empty: no endpoint.
  std::string metrics_listen = "127.0.0.1:9471";
  // The worker join token: read from token_file, else $YARD_TOKEN.
  std::string token_file;
  // TLS to the server: its CA, and this worker's certificate (mTLS).
  ClientTlsFiles tls;
  bool help = false;
};

// The usage text for --help.
std::string WorkerUsage();

// Parses the arguments after argv[0]. `env_server` is $YARD_SERVER (empty if
// unset), used when --server is not given. Errors name the flag.
absl::StatusOr<WorkerFlags> ParseWorkerFlags(
    const std::vector<std::string>& args, absl::string_view env_server);

// Checks "HOST:PORT" (HOST may be "[v6]"), the port in 1..65535.
absl::Status CheckServerAddress(absl::string_view address);

// Creates the work dir and makes every path absolute: data_root must be a
// directory, train_bin an executable file (default: yard-train in the
// directory of `self_exe`).
absl::Status ResolveWorkerPaths(WorkerFlags& flags,
                                const std::string& self_exe);

// Takes an exclusive lock on WORK_DIR/lock for the life of the returned
// descriptor; FAILED_PRECONDITION when another worker holds it.
absl::StatusOr<FileDescriptor> LockWorkDir(const std::string& work_dir);

// The worker's id: `name` when given, else the one in WORK_DIR/worker_id,
// written there on first start ("<host>-<8 hex digits>").
absl::StatusOr<std::string> LoadOrCreateWorkerId(const std::string& work_dir,
                                                 const std::string& name,
                                                 absl::string_view hostname);

}  // namespace trainyard::worker

#endif  // TRAINYARD_WORKER_WORKER_OPTIONS_H_
