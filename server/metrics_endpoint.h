// MetricsEndpoint: a daemon's Prometheus endpoint, GET /metrics over plain
// HTTP (prometheus-cpp's Exposer on civetweb), serving one Collectable.
// Shared by yard-server and yard-worker so both follow one rule: the
// address must be loopback (127.x or localhost) until TLS and auth exist,
// port 0 picks a free port, and the address actually bound is written to
// `address_file` (temp file + rename) so tests and scrapers can find it.
//
// Start/destruction are for one owner thread; scrapes arrive on civetweb's
// threads and call the Collectable, which must be thread-safe and outlive
// nothing: the endpoint holds it until it has stopped serving.
#ifndef TRAINYARD_SERVER_METRICS_ENDPOINT_H_
#define TRAINYARD_SERVER_METRICS_ENDPOINT_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace prometheus {
class Collectable;
class Exposer;
}  // namespace prometheus

namespace trainyard {

struct MetricsEndpointOptions {
  std::string listen;                          // HOST:PORT, loopback only
  std::string flag_name = "--metrics-listen";  // named in error messages
  std::string address_file;  // "127.0.0.1:PORT\n" once serving; empty: none
};

// INVALID_ARGUMENT naming `flag_name` unless `listen` is HOST:PORT with a
// loopback HOST and a port in [0, 65535].
absl::Status CheckMetricsListen(const std::string& listen,
                                const std::string& flag_name);

class MetricsEndpoint {
 public:
  // INVALID_ARGUMENT for a bad address, UNAVAILABLE when it cannot bind.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const MetricsEndpointOptions& options,
      std::shared_ptr<prometheus::Collectable> collectable);
  // Stops serving (waits for scrapes in flight), removes the address file.
  ~MetricsEndpoint();

  // "127.0.0.1:PORT" as bound.
  const std::string& address() const { return address_; }

 private:
  MetricsEndpoint() = default;

  std::string address_;
  std::string address_file_;
  std::shared_ptr<prometheus::Collectable> collectable_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_METRICS_ENDPOINT_H_
