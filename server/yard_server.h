// YardServer: yard-server assembled — the job store, worker registry, job
// lifecycle, scheduler loop and the gRPC services (JobService,
// ClusterService, WorkerService, AdminService, grpc.health.v1.Health,
// reflection) on one port: loopback in plaintext, any address with TLS.
// Every service but health and reflection needs a bearer token. On first
// start the server makes an admin token (STATE_DIR/admin.token, 0600,
// printed once) and a worker join token (STATE_DIR/worker.token, 0600). Start() recovers every job from the store: jobs that were
// SCHEDULED/RUNNING keep their state, and their workers get a fresh lease
// from now to reconnect and re-attach them.
//
// Start/Shutdown are for one owner thread; the running server is driven by
// gRPC's threads and the scheduler thread.
#ifndef TRAINYARD_SERVER_YARD_SERVER_H_
#define TRAINYARD_SERVER_YARD_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/grpc_credentials.h"

namespace trainyard::server {

inline constexpr char kServerVersion[] = "0.1.0";

struct YardServerOptions {
  std::string listen = "127.0.0.1:7070";  // HOST:0 picks a free port
  // TLS on the main port (mTLS for workers with client_ca). Without it the
  // server binds only loopback unless insecure_plaintext is set.
  ServerTlsFiles tls;
  bool insecure_plaintext = false;
  // Open WatchJob + GetJobLogs streams per tenant; 0 = unlimited.
  int32_t max_streams_per_tenant = 64;
  // Shutdown: how long health reports NOT_SERVING before the port closes,
  // so load balancers and probes stop sending new calls first.
  absl::Duration drain = absl::ZeroDuration();
  std::string state_dir;                  // required; created if missing
  std::string data_root = ".";            // spec data paths resolve here
  std::string checkpoint_root;            // default STATE_DIR/checkpoints
  // Start with a new, empty job store although the state dir is not new
  // (auth.db holds tokens, admin.token is there, or the checkpoint root
  // holds job directories). Without it such a start is refused: the store
  // was most likely lost or copied without its -wal file (Start).
  bool new_job_store = false;
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration worker_lease = absl::Seconds(10);
  std::string policy = "first-fit";
  // The packing policies share a GPU between jobs only where an NVIDIA MPS
  // server runs them side by side (Device.mps); with this set, also GPUs
  // whose jobs the driver would time-slice (--share-gpus always).
  bool share_gpus_without_mps = false;
  absl::Duration scheduler_tick = absl::Seconds(1);
  int32_t cancel_grace_ms = 10'000;   // SIGTERM, then SIGKILL after this
  int32_t preempt_grace_ms = 10'000;  // the same for a preempted job
  // A failed job restarted under max_restarts waits this long before its
  // first restart, twice as long before each next one (JobLifecycleOptions).
  absl::Duration restart_backoff = absl::Seconds(10);
  // Ended jobs are deleted (with their checkpoints unless
  // job_retention_keeps_checkpoints) this long after they ended
  // (JobRetention). Zero: kept until deleted by hand.
  absl::Duration job_retention = absl::ZeroDuration();
  bool job_retention_keeps_checkpoints = false;
  int32_t trainer_events_kept = 1000;
  int64_t log_bytes_kept = int64_t{8} << 20;
  Clock* clock = Clock::Real();
  // Prometheus /metrics on HOST:PORT (loopback only; port 0 picks one and
  // STATE_DIR/yard-server.metrics-addr names it). Empty: no endpoint.
  // yard-server's flag defaults to kDefaultServerMetricsListen.
  std::string metrics_listen;
  // A port serving only grpc.health.v1 (Kubernetes gRPC probes); it may
  // bind any address, port 0 picks one (STATE_DIR/yard-server.health-addr).
  // Empty: none.
  std::string health_listen;
  // Tests: called before each batch's COMMIT in the job store (see
  // JobStoreOptions::commit_fault).
  std::function<absl::Status()> store_commit_fault;
};

inline constexpr char kDefaultServerMetricsListen[] = "127.0.0.1:9470";

// INVALID_ARGUMENT unless `listen` is HOST:PORT with a port in [0, 65535]
// and, unless `tls` or `insecure_plaintext`, a loopback HOST (127.0.0.1,
// localhost, [::1]): tokens must not cross a network in the clear.
absl::Status CheckListenAddress(const std::string& listen, bool tls,
                                bool insecure_plaintext);

// INVALID_ARGUMENT naming the flag when the options cannot make a server
// (a value out of range, an unknown policy, no state dir); Start checks
// them too. Touches nothing.
absl::Status CheckServerOptions(const YardServerOptions& o);

class YardServer {
 public:
  // Every check that can refuse the start (the options, the locks on the
  // state dir and on the checkpoint root, both stores' files) runs before
  // either store is created or upgraded. Refused with FAILED_PRECONDITION:
  // a state dir or checkpoint root another server uses, and a job store
  // that is new (missing, empty, or a copy of trainyard.db without its
  // -wal) beside what an earlier start left (tokens in auth.db,
  // STATE_DIR/admin.token, job directories in the checkpoint root), unless
  // options.new_job_store. New job ids always start after the job
  // directories already in the checkpoint root.
  static absl::StatusOr<std::unique_ptr<YardServer>> Start(
      YardServerOptions options);
  ~YardServer();

  // "127.0.0.1:PORT" (also written to STATE_DIR/yard-server.addr).
  const std::string& address() const;
  // Where the first start left the admin and worker join tokens.
  std::string admin_token_file() const;
  std::string worker_token_file() const;
  // "127.0.0.1:PORT" of /metrics; empty when metrics are off.
  const std::string& metrics_address() const;
  // Stops accepting, ends streams, stops the scheduler, closes the store.
  // Idempotent.
  void Shutdown();

 private:
  struct Parts;
  explicit YardServer(std::unique_ptr<Parts> parts);
  std::unique_ptr<Parts> parts_;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_YARD_SERVER_H_
