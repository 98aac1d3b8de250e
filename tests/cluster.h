// The pieces of a real Trainyard cluster as a test drives them: a yard-server
// on a loopback port picked at run time, yard-workers, the `yard` CLI, and
// direct gRPC stubs for precise assertions. Every process logs to files in
// the test's own directory. Not safe for concurrent use; a test owns its
// cluster.
#ifndef TRAINYARD_TESTS_CLUSTER_H_
#define TRAINYARD_TESTS_CLUSTER_H_

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/process.h"
#include "trainyard/v1/cluster.grpc.pb.h"
#include "trainyard/v1/jobs.grpc.pb.h"

namespace trainyard::itest {

// Where the binaries and the data are (compile definitions).
std::string BinDir();
std::string SourceDir();
std::string BinPath(const std::string& name);  // BinDir()/name

// Multiplies every deadline; YARD_TEST_TIMEOUT_SCALE=3 on slow machines.
absl::Duration Scaled(absl::Duration d);

// A fresh directory for one test, under $TEST_TMPDIR or /tmp. Kept when the
// test failed (its path is printed), removed otherwise.
class TestDir {
 public:
  static absl::StatusOr<std::unique_ptr<TestDir>> Create(
      const std::string& test_name);
  ~TestDir();

  const std::string& path() const { return path_; }
  // path()/name, created as a directory.
  std::string Subdir(const std::string& name) const;
  // Writes path()/name and returns its path.
  std::string WriteFile(const std::string& name, const std::string& text,
                        bool executable = false) const;
  // A unique prefix path()/logs/<stem>-N for a process's log files.
  std::string LogPrefix(const std::string& stem);

 private:
  explicit TestDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
  int next_log_ = 1;
};

struct ServerOptions {
  std::string state_dir;  // required
  int port = 0;           // 0: let the server pick
  int heartbeat_interval_ms = 300;
  // Long enough that a worker on a loaded 2-core machine (ctest -j with
  // the emulated engine's threads beside it) never misses its lease. The
  // tests about losing workers (faults, chaos, network faults, shutdown,
  // a data-parallel worker lost) ask for a short one.
  int worker_lease_ms = 6000;
  // A CA that signed the server's certificate (pass --tls-cert/--tls-key in
  // extra_args): the harness then reaches the server over TLS.
  std::string tls_ca;
  std::vector<std::string> extra_args;
};

// The credentials the suite uses against the cluster under test: the
// server's admin token (sent by ContextWithTimeout and RunYard) and its
// worker join token file (passed to every WorkerProcess). Set by
// ClusterTest::StartServer; empty before any server started.
struct TestCredentials {
  std::string token;
  std::string worker_token_file;
};
TestCredentials& CurrentCredentials();

// A running yard-server whose address has been read from its address file
// and which answers RPCs.
class ServerProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      TestDir& dir, const ServerOptions& options);

  const std::string& address() const { return address_; }
  int port() const { return port_; }
  // The tokens the server made on its first start in this state dir.
  const std::string& admin_token() const { return admin_token_; }
  std::string admin_token_file() const {
    return options_.state_dir + "/admin.token";
  }
  std::string worker_token_file() const {
    return options_.state_dir + "/worker.token";
  }
  const ServerOptions& options() const { return options_; }
  ChildProcess& process() { return *process_; }

 private:
  ServerProcess(ServerOptions options, std::unique_ptr<ChildProcess> p)
      : options_(std::move(options)), process_(std::move(p)) {}
  absl::Status AwaitServing(absl::Duration timeout);

  ServerOptions options_;
  std::unique_ptr<ChildProcess> process_;
  std::string address_;
  int port_ = 0;
  std::string admin_token_;
};

struct WorkerOptions {
  std::string name;  // --name; required (tests assert on it)
  int cpu_slots = 1;
  std::string train_bin;  // empty: the worker's default
  std::string work_dir;   // empty: <test dir>/worker-<name>
  // --token-file; empty: CurrentCredentials().worker_token_file.
  std::string token_file;
  std::vector<std::string> extra_args;
  // Added to the worker's environment. Without "--gpus" in extra_args the
  // worker is started with --gpus none, so tests on a GPU host see the
  // same CPU-only workers as everywhere else.
  std::vector<std::pair<std::string, std::string>> env = {};
  // The worker sees an NVIDIA MPS control daemon (a control FIFO in its own
  // CUDA_MPS_PIPE_DIRECTORY), so its GPUs report mps and may be shared.
  // Without it the directory has no FIFO: what the test host runs does
  // not matter.
  bool mps = false;
};

class WorkerProcess {
 public:
  // Data root: the source tree; cwd: the work dir.
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Start(
      TestDir& dir, const std::string& server_address,
      const WorkerOptions& options);

  const std::string& name() const { return options_.name; }
  const std::string& work_dir() const { return work_dir_; }
  ChildProcess& process() { return *process_; }
  // Live yard-train processes run by this worker (its direct children).
  std::vector<pid_t> TrainerPids() const;
  // The same by rank, read from their command lines (--rank N; none: 0).
  std::map<int, pid_t> TrainerPidsByRank() const;

 private:
  WorkerProcess(WorkerOptions options, std::string work_dir,
                std::unique_ptr<ChildProcess> p)
      : options_(std::move(options)),
        work_dir_(std::move(work_dir)),
        process_(std::move(p)) {}

  WorkerOptions options_;
  std::string work_dir_;
  std::unique_ptr<ChildProcess> process_;
};

// gRPC stubs for one server address (TLS when `tls_ca` is a CA file).
struct Stubs {
  explicit Stubs(const std::string& address, const std::string& tls_ca = "");

  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<trainyard::v1::JobService::Stub> jobs;
  std::unique_ptr<trainyard::v1::ClusterService::Stub> cluster;
};

// A ClientContext with a deadline `timeout` from now, carrying
// CurrentCredentials().token.
std::unique_ptr<grpc::ClientContext> ContextWithTimeout(
    absl::Duration timeout = absl::Seconds(10));
// The same with `token` instead ("" sends none).
std::unique_ptr<grpc::ClientContext> ContextWithToken(
    const std::string& token, absl::Duration timeout = absl::Seconds(10));

// Calls a method by its full name ("/pkg.Service/Method") with raw request
// bytes; for requests the typed stubs cannot express (garbage bytes) and
// services we have no stubs for (grpc.health.v1).
grpc::Status RawUnaryCall(grpc::Channel& channel, const std::string& method,
                          const std::string& request, std::string* response,
                          absl::Duration timeout = absl::Seconds(10));

// grpc.health.v1.Health/Check for `service` ("": the server as a whole):
// OK when SERVING.
absl::Status CheckHealth(grpc::Channel& channel,
                         const std::string& service = "");

// Runs `yard --server ADDRESS --token TOKEN args...` within `timeout`, with
// CurrentCredentials().token (none when empty).
CommandResult RunYard(TestDir& dir, const std::string& address,
                      const std::vector<std::string>& args,
                      absl::Duration timeout = absl::Seconds(30));

// Channel credentials for the harness: TLS trusting `tls_ca`, or
// plaintext when it is empty.
std::shared_ptr<grpc::ChannelCredentials> HarnessCredentials(
    const std::string& tls_ca);

// The name of a gRPC status code ("NOT_FOUND").
std::string CodeName(grpc::StatusCode code);

}  // namespace trainyard::itest

#endif  // TRAINYARD_TESTS_CLUSTER_H_
