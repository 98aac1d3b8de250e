// YardServer: yard-server assembled — the job store, worker registry, job
// lifecycle, scheduler loop and the gRPC services (JobService,
// ClusterService, WorkerService, grpc.health.v1.Health, reflection) on one
// loopback port. Start() recovers every job from the store: jobs that were
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

namespace trainyard::server {

inline constexpr char kServerVersion[] = "0.1.0";

struct YardServerOptions {
  std::string listen = "127.0.0.1:7070";  // HOST:0 picks a free port
  std::string state_dir;                  // required; created if missing
  std::string data_root = ".";            // spec data paths resolve here
  std::string checkpoint_root;            // default STATE_DIR/checkpoints
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration worker_lease = absl::Seconds(10);
  std::string policy = "first-fit";
  absl::Duration scheduler_tick = absl::Seconds(1);
  int32_t cancel_grace_ms = 10'000;
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

// INVALID_ARGUMENT unless `listen` is HOST:PORT with a loopback HOST
// (127.0.0.1, localhost, [::1]) and a port in [0, 65535]. Non-loopback
// addresses are refused until TLS exists.
absl::Status CheckListenAddress(const std::string& listen);

class YardServer {
 public:
  static absl::StatusOr<std::unique_ptr<YardServer>> Start(
      YardServerOptions options);
  ~YardServer();

  // "127.0.0.1:PORT" (also written to STATE_DIR/yard-server.addr).
  const std::string& address() const;
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
