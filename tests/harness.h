// The integration-test harness: ClusterTest, a GoogleTest fixture that owns
// one test's directory, yard-server, yard-workers and gRPC stubs, plus small
// MNIST specs written at test time. Processes are stopped in TearDown
// (workers first, then the server); when a test fails, the tail of every
// process log is printed and the directory is kept.
//
// Include this one header; it brings process.h, cluster.h and waits.h.
// Like any fixture, one test thread uses it.
#ifndef TRAINYARD_TESTS_HARNESS_H_
#define TRAINYARD_TESTS_HARNESS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/process.h"
#include "tests/waits.h"
#include "trainyard/v1/jobs.pb.h"
#include "trainyard/v1/spec.pb.h"

// ASSERT that an absl::Status is OK, printing it otherwise.
#define YARD_ASSERT_OK(expr)                            \
  do {                                                  \
    const ::absl::Status yard_assert_s_ = (expr);       \
    ASSERT_TRUE(yard_assert_s_.ok()) << yard_assert_s_; \
  } while (0)

// `lhs = value of expr` or fail the test with the status.
#define YARD_ASSIGN_OR_FAIL(lhs, expr) \
  YARD_ASSIGN_OR_FAIL_IMPL_(YARD_CONCAT_(yard_so_, __LINE__), lhs, expr)
#define YARD_ASSIGN_OR_FAIL_IMPL_(so, lhs, expr) \
  auto so = (expr);                              \
  ASSERT_TRUE(so.ok()) << so.status();           \
  lhs = std::move(so).value()

namespace trainyard::itest {

// A small MNIST MLP job over the data shipped in examples/ (8k train / 2k
// held out), sized so that a test runs in seconds.
struct MnistSpec {
  std::string name = "itest";
  int hidden = 32;
  int64_t steps = 200;
  int micro_batch = 32;
  int checkpoint_every = 0;  // 0: at the end only
  int eval_every = 0;
  int log_every = 10;
  int holdout = 2000;
  std::string images = "examples/data/mnist/t10k-images-idx3-ubyte.gz";
  std::string labels = "examples/data/mnist/t10k-labels-idx1-ubyte.gz";
  int gpus = 0;               // resources.gpus
  int gpu_compute_milli = 0;  // resources.gpu_compute_milli; 0: unset
  bool bf16 = false;          // precision BF16 (else the default, FP32)

  trainyard::v1::JobSpec ToProto() const;
  std::string ToJson() const;  // protobuf JSON mapping
  std::string ToYaml() const;
};

// A job that still runs when a worker's lease (a few seconds in the
// tests) runs out, and leaves checkpoints to resume from.
MnistSpec OutlivesALeaseSpec(const std::string& name);

// Deadlines used across the suite (already scaled).
absl::Duration StartTimeout();  // a process up and serving
absl::Duration JobTimeout();    // a small job from submit to terminal
absl::Duration RpcTimeout();    // one unary RPC

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Starts yard-server with state dir `options.state_dir` (default
  // dir/state) and points stubs() at it.
  absl::Status StartServer(ServerOptions options = {});
  // SIGKILLs the server and starts it again on the same port and state dir;
  // `while_down`, when given, runs in between (an outage to wait out), and
  // its error is returned without restarting.
  absl::Status KillAndRestartServer(
      const std::function<absl::Status()>& while_down = nullptr);
  absl::StatusOr<WorkerProcess*> StartWorker(WorkerOptions options);
  // Starts the worker and waits until the server lists it READY.
  absl::StatusOr<WorkerProcess*> StartReadyWorker(WorkerOptions options);

  Stubs& stubs() { return *stubs_; }
  trainyard::v1::JobService::Stub& jobs() { return *stubs_->jobs; }
  trainyard::v1::ClusterService::Stub& cluster() { return *stubs_->cluster; }
  TestDir& dir() { return *dir_; }
  ServerProcess& server() { return *server_; }

  // `yard --server <this server> args...`.
  CommandResult Yard(const std::vector<std::string>& args,
                     absl::Duration timeout = absl::Seconds(30));
  // Starts `yard --server <this server> args...` without waiting for it.
  absl::StatusOr<std::unique_ptr<ChildProcess>> StartYard(
      const std::vector<std::string>& args);
  // Writes a spec file into the test directory and returns its path.
  std::string WriteSpec(const std::string& file_name, const std::string& text);

  // SubmitJob over gRPC; the returned status carries the gRPC code.
  absl::StatusOr<trainyard::v1::SubmitJobResponse> Submit(
      const trainyard::v1::JobSpec& spec, const std::string& request_id = "");
  // Submits `spec` and waits until the job has saved its first checkpoint
  // (so it has something to resume from); returns the job id.
  absl::StatusOr<std::string> SubmitAndWaitForACheckpoint(
      const trainyard::v1::JobSpec& spec);

  // A two-rank job whose ranks both run on `worker`: waits for its first
  // checkpoint, SIGKILLs rank 1 and expects the gang down at once (the job
  // FAILED naming the rank and signal, rank 0 gone too) and the worker up.
  // Failures are the test's (gtest assertions).
  void KillRankOneAndExpectTheGangDown(WorkerProcess& worker,
                                       const std::string& id);

 private:
  void PrintLogTails();

  std::unique_ptr<TestDir> dir_;
  std::unique_ptr<ServerProcess> server_;
  std::vector<std::unique_ptr<WorkerProcess>> workers_;
  std::unique_ptr<Stubs> stubs_;
};

// The gRPC status as an absl::Status (same codes).
absl::Status ToAbsl(const grpc::Status& s);

// The yard CLI's documented exit codes (README, "CLI").
struct YardExit {
  static constexpr int kOk = 0;
  static constexpr int kJobNotSucceeded = 1;     // --wait: FAILED/CANCELLED
  static constexpr int kUsage = 2;               // bad flags or arguments
  static constexpr int kInvalidArgument = 3;     // bad spec (local or server)
  static constexpr int kNotFound = 4;            // unknown job id
  static constexpr int kFailedPrecondition = 5;  // e.g. job already finished
};

// Success when `s` failed with `code` and its message mentions every one of
// `mentions`.
::testing::AssertionResult RpcFailedWith(
    const grpc::Status& s, grpc::StatusCode code,
    const std::vector<std::string>& mentions);

// Success when the CLI exited with `exit_code` and printed exactly one
// non-empty line on stderr mentioning every one of `mentions`.
::testing::AssertionResult CliFailedWith(
    const CommandResult& r, int exit_code,
    const std::vector<std::string>& mentions);

}  // namespace trainyard::itest

#endif  // TRAINYARD_TESTS_HARNESS_H_
