#include "server/metrics_endpoint.h"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>

#include <exception>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/replace_file.h"
#include "common/status_macros.h"

namespace trainyard {
namespace {

struct HostPort {
  std::string host;
  int port = 0;
};

absl::StatusOr<HostPort> ParseListen(const std::string& listen,
                                     const std::string& flag_name) {
  const size_t colon = listen.rfind(':');
  HostPort hp;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &hp.port) || hp.port < 0 ||
      hp.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag_name, " ", listen,
                     ": expected HOST:PORT, e.g. 127.0.0.1:9470 (an empty "
                     "value turns metrics off)"));
  }
  hp.host = listen.substr(0, colon);
  if (hp.host != "localhost" && !absl::StartsWith(hp.host, "127.")) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag_name, " ", listen,
        ": only loopback addresses (127.0.0.1, localhost) are allowed until "
        "the metrics endpoint supports TLS and authentication"));
  }
  // civetweb wants a numeric address.
  if (hp.host == "localhost") hp.host = "127.0.0.1";
  return hp;
}

}  // namespace

absl::Status CheckMetricsListen(const std::string& listen,
                                const std::string& flag_name) {
  return ParseListen(listen, flag_name).status();
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const MetricsEndpointOptions& options,
    std::shared_ptr<prometheus::Collectable> collectable) {
  ASSIGN_OR_RETURN(HostPort hp, ParseListen(options.listen, options.flag_name));
  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint());
  endpoint->collectable_ = std::move(collectable);
  // prometheus-cpp reports a failed bind by throwing; nothing else here
  // throws, and no exception leaves this function.
  try {
    endpoint->exposer_ = std::make_unique<prometheus::Exposer>(
        absl::StrCat(hp.host, ":", hp.port), /*num_threads=*/2);
  } catch (const std::exception&) {
    return absl::UnavailableError(absl::StrCat(
        options.flag_name, " ", options.listen,
        ": cannot listen (address in use?); pick another port, 0 for any "
        "free one, or an empty value to turn metrics off"));
  }
  const std::vector<int> ports = endpoint->exposer_->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(absl::StrCat(
        options.flag_name, " ", options.listen, ": no port was bound"));
  }
  endpoint->exposer_->RegisterCollectable(endpoint->collectable_);
  endpoint->address_ = absl::StrCat(hp.host, ":", ports.front());
  if (!options.address_file.empty()) {
    RETURN_IF_ERROR(
        ReplaceFileDurably(options.address_file, endpoint->address_ + "\n"));
    endpoint->address_file_ = options.address_file;
  }
  return endpoint;
}

MetricsEndpoint::~MetricsEndpoint() {
  exposer_.reset();  // joins civetweb's threads: no scrape runs after this
  if (!address_file_.empty()) {
    std::error_code ec;
    std::filesystem::remove(address_file_, ec);
  }
}

}  // namespace trainyard
