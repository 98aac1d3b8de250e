// ServerProcess: a yard-server child for the load benchmarks. It starts on
// 127.0.0.1:0 with a fresh state dir under /tmp, is found through the
// address file it writes, and is stopped with SIGTERM, its state dir then
// removed. The tokens a server with authentication writes into its state
// dir (admin.token, worker.token) are read back for the clients; against a
// server without them the clients send none. Also: the CPU a process used,
// and reading a Prometheus /metrics page. Not thread-safe.
#ifndef TRAINYARD_BENCH_LOAD_SERVER_PROCESS_H_
#define TRAINYARD_BENCH_LOAD_SERVER_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/client_context.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard::bench {

struct ServerProcessOptions {
  // Empty: yard-server beside this program.
  std::string server_bin;
  std::string data_root = ".";
  std::vector<std::string> extra_flags;
};

class ServerProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      const ServerProcessOptions& options);
  ~ServerProcess();

  // SIGTERM, then waits; returns its exit code (-1 when killed by a signal).
  int Stop();

  pid_t pid() const { return pid_; }
  const std::string& address() const { return address_; }
  const std::string& state_dir() const { return state_dir_; }
  // The token in STATE_DIR/`file`, "" when there is none.
  std::string Token(const std::string& file) const;
  // The address of its /metrics endpoint, "" when off.
  std::string MetricsAddress() const;

 private:
  ServerProcess() = default;

  pid_t pid_ = -1;
  std::string address_;
  std::string state_dir_;
};

// The value at fraction `p` (0.5: the median) of `sorted`, ascending; 0
// when it is empty.
double Percentile(const std::vector<double>& sorted, double p);

// The path of program `name` in this program's directory.
std::string BesideThisProgram(const std::string& name);

// A small MNIST MLP job over the data shipped in examples/ (relative to
// the data root), named `name`.
trainyard::v1::JobSpec SmallMnistSpec(const std::string& name);

// Whether argv[*i] is the flag `name` with a value, "--name=V" or "--name
// V" (which also takes argv[*i + 1], moving *i past it); the value in *out.
bool FlagValue(int argc, char** argv, int* i, const char* name,
               std::string* out);

// CPU seconds (user + system) used so far by process `pid` (0: this one).
double CpuSeconds(pid_t pid);

// A process's thread count and resident memory (MiB), from
// /proc/PID/status (pid 0: this process); zeros when it cannot be read.
struct ProcessSize {
  int threads = 0;
  double rss_mib = 0;
};
ProcessSize SizeOf(pid_t pid);

// The body of http://ADDRESS/metrics.
absl::StatusOr<std::string> FetchMetrics(const std::string& address);

// The value of the sample named exactly `name` (no labels) in Prometheus
// text, or nullopt.
std::optional<double> MetricValue(const std::string& text,
                                  const std::string& name);

}  // namespace trainyard::bench

#endif  // TRAINYARD_BENCH_LOAD_SERVER_PROCESS_H_
