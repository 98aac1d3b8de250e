// Test support for the observability tests: fetching a daemon's /metrics
// over loopback HTTP, reading the names and label names an exposition
// declares, pulling metric and label names out of PromQL expressions (for
// dashboards and alert rules), and a real Prometheus server started as a
// child process and queried over its HTTP API. Test-only; not thread-safe.
#ifndef TRAINYARD_TESTS_METRICS_SCRAPE_H_
#define TRAINYARD_TESTS_METRICS_SCRAPE_H_

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/cluster.h"
#include "tests/process.h"

namespace trainyard::itest {

// GET http://HOST:PORT<target> (HTTP/1.0); the body of a 200 answer, else
// an error carrying the status line and body.
absl::StatusOr<std::string> HttpGet(const std::string& host_port,
                                    const std::string& target,
                                    absl::Duration timeout = absl::Seconds(10));

// Waits for a daemon's address file ("HOST:PORT\n") and returns the address.
absl::StatusOr<std::string> AwaitAddressFile(const std::string& path,
                                             absl::Duration timeout);

// A loopback TCP port that was free a moment ago.
absl::StatusOr<int> PickFreePort();

// What a text exposition declares: metric names (from HELP/TYPE lines and
// samples, with histograms' _bucket/_sum/_count) and label names.
struct Exposition {
  std::set<std::string> metrics;
  std::set<std::string> labels;
  // metric -> (the sample's label text between the braces, its value).
  std::map<std::string, std::vector<std::pair<std::string, double>>> samples;
};
Exposition ParseExposition(const std::string& text);
// The first sample of `metric` whose label text contains `label_fragment`
// (e.g. `state="running"`); NaN when there is none.
double SampleValue(const Exposition& e, const std::string& metric,
                   const std::string& label_fragment = "");

// The metric names and label names a PromQL expression refers to
// (functions, aggregations, keywords, numbers, durations, strings and
// Grafana $variables left out).
struct PromqlNames {
  std::set<std::string> metrics;
  std::set<std::string> labels;
};
PromqlNames NamesInPromql(const std::string& expr);

// `promtool check metrics` over `exposition`; OK when it reports nothing.
absl::Status PromtoolCheckMetrics(TestDir& dir, const std::string& exposition);
// True when `program` is on PATH.
bool OnPath(const std::string& program);

// One sample of an instant vector from the Prometheus HTTP API.
struct PromSample {
  std::map<std::string, std::string> labels;
  double value = 0;
};

// A real Prometheus (Debian's `prometheus`) scraping `targets` (job name ->
// HOST:PORT) every second, its TSDB in the test directory, its UI/API on a
// loopback port picked at run time.
class PrometheusProcess {
 public:
  static absl::StatusOr<std::unique_ptr<PrometheusProcess>> Start(
      TestDir& dir, const std::map<std::string, std::string>& targets,
      const std::string& rule_file = "");

  const std::string& address() const { return address_; }
  ChildProcess& process() { return *process_; }

  // GET /api/v1/query?query=EXPR: the instant vector, or an error with
  // Prometheus' own message (bad expression, ...).
  absl::StatusOr<std::vector<PromSample>> Query(const std::string& expr);
  // Polls Query(expr) until `accept` says yes.
  absl::StatusOr<std::vector<PromSample>> QueryUntil(
      const std::string& what, const std::string& expr,
      const std::function<bool(const std::vector<PromSample>&)>& accept,
      absl::Duration timeout);

 private:
  PrometheusProcess(std::string address, std::unique_ptr<ChildProcess> p)
      : address_(std::move(address)), process_(std::move(p)) {}

  std::string address_;
  std::unique_ptr<ChildProcess> process_;
};

}  // namespace trainyard::itest

#endif  // TRAINYARD_TESTS_METRICS_SCRAPE_H_
