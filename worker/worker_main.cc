// yard-worker: the Trainyard node agent. Connects to yard-server, runs the
// jobs it is assigned as yard-train child processes and reports on them.
// Listens only for Prometheus scrapes (--metrics-listen, loopback; empty
// turns it off). SIGTERM/SIGINT: the jobs checkpoint and stop, their
// exits are reported, exit 0; a second signal kills the jobs at once.
// Usage errors: one line on stderr, exit 2.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/log.h"
#include "server/metrics_endpoint.h"
#include "worker/device_discovery.h"
#include "worker/worker.h"
#include "worker/worker_metrics.h"
#include "worker/worker_options.h"

namespace trainyard::worker {
namespace {

constexpr absl::Duration kFlushTimeout = absl::Seconds(5);

int Fail(int code, absl::string_view message) {
  std::fprintf(stderr, "yard-worker: %.*s\n", static_cast<int>(message.size()),
               message.data());
  return code;
}

// Children get /dev/null on stdin and pipes on 1 and 2; a closed 0-2 here
// would let those fds land where the pipe plumbing does not expect them.
void EnsureStandardFds() {
  for (int fd = 0; fd < 3; ++fd) {
    if (fcntl(fd, F_GETFD) < 0) open("/dev/null", O_RDWR);
  }
}

std::string SelfExe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

// The /metrics endpoint, fed by the worker's job reports (through `config`);
// null when --metrics-listen is empty.
absl::StatusOr<std::unique_ptr<MetricsEndpoint>> StartMetrics(
    const WorkerFlags& flags, const std::vector<trainyard::v1::Device>& devices,
    WorkerConfig& config) {
  if (flags.metrics_listen.empty()) return nullptr;
  auto metrics = std::make_shared<WorkerMetrics>(WorkerMetricsOptions{
      .version = kWorkerVersion,
      .devices = devices,
      .cpu_slots = flags.cpu_slots,
      .sample_gpus = {}});  // GPU telemetry arrives with the GPU build
  config.observe_report = [metrics](const trainyard::v1::JobUpdate& u) {
    metrics->OnReport(u);
  };
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint =
      MetricsEndpoint::Start(
          {.listen = flags.metrics_listen,
           .flag_name = "--metrics-listen",
           .address_file = flags.work_dir + "/yard-worker.metrics-addr"},
          metrics);
  if (endpoint.ok()) {
    YARD_LOG(INFO) << "metrics on http://" << (*endpoint)->address()
                   << "/metrics";
  }
  return endpoint;
}

// Blocks in sigwait until the worker has shut down; see the file comment.
void ServeUntilSignalled(Worker& worker, const sigset_t& signals,
                         absl::Duration grace) {
  int sig = 0;
  do {
    sigwait(&signals, &sig);
  } while (sig == SIGUSR1);
  YARD_LOG(INFO) << "received SIG" << sigabbrev_np(sig) << ": shutting down";
  std::thread shutdown([&worker, grace] {
    worker.Shutdown(grace, kFlushTimeout);
    kill(getpid(), SIGUSR1);  // wakes the sigwait below
  });
  while (true) {
    sigwait(&signals, &sig);
    if (sig == SIGUSR1) break;
    YARD_LOG(WARNING) << "received SIG" << sigabbrev_np(sig)
                      << " again: killing the jobs now";
    worker.KillJobs();
  }
  shutdown.join();
}

// The join token from --token-file, else $YARD_TOKEN.
absl::StatusOr<std::string> JoinToken(const WorkerFlags& flags) {
  if (!flags.token_file.empty()) {
    return ReadTokenFile(flags.token_file, "--token-file");
  }
  const char* env = std::getenv("YARD_TOKEN");
  if (env != nullptr && *env != '\0') return std::string(env);
  return absl::InvalidArgumentError(
      "a worker join token is required: --token-file FILE or $YARD_TOKEN "
      "(the server writes one to STATE_DIR/worker.token on first start)");
}

int Main(int argc, char** argv) {
  EnsureStandardFds();
  const char* env_server = std::getenv("YARD_SERVER");
  absl::StatusOr<WorkerFlags> flags =
      ParseWorkerFlags(std::vector<std::string>(argv + 1, argv + argc),
                       env_server != nullptr ? env_server : "");
  if (!flags.ok()) return Fail(2, flags.status().message());
  if (flags->help) {
    std::fputs(WorkerUsage().c_str(), stdout);
    return 0;
  }
  if (absl::Status s = ResolveWorkerPaths(*flags, SelfExe()); !s.ok()) {
    return Fail(2, s.message());
  }
  absl::StatusOr<std::string> token = JoinToken(*flags);
  if (!token.ok()) return Fail(2, token.status().message());
  if (absl::Status s = MakeChannelCredentials(flags->tls).status(); !s.ok()) {
    return Fail(2, s.message());
  }
  absl::StatusOr<FileDescriptor> lock = LockWorkDir(flags->work_dir);
  if (!lock.ok()) return Fail(1, lock.status().message());
  const std::string hostname = Hostname();
  absl::StatusOr<std::string> id =
      LoadOrCreateWorkerId(flags->work_dir, flags->name, hostname);
  if (!id.ok()) return Fail(1, id.status().message());
  auto devices = DefaultDeviceDiscovery()->ListDevices();
  if (!devices.ok()) return Fail(1, devices.status().message());

  // Block the signals before any thread starts so every thread inherits the
  // mask and only sigwait sees them. Children unblock them before exec.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  WorkerConfig config;
  config.worker_id = *id;
  config.hostname = hostname;
  config.devices = *devices;
  config.runner.work_dir = flags->work_dir;
  config.runner.train_bin = flags->train_bin;
  config.runner.data_root = flags->data_root;
  config.runner.cpu_slots = flags->cpu_slots;
  for (const auto& d : *devices) config.runner.gpus.push_back(d.index());
  config.link.server_address = flags->server;
  config.link.token = *token;
  config.link.tls = flags->tls;

  // After the signal mask: the endpoint's threads must inherit it.
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> metrics_endpoint =
      StartMetrics(*flags, *devices, config);
  if (!metrics_endpoint.ok()) {
    return Fail(1, metrics_endpoint.status().message());
  }

  YARD_LOG(INFO) << "yard-worker " << kWorkerVersion << " id " << *id
                 << ": server " << flags->server << ", " << flags->cpu_slots
                 << " CPU slot(s), " << devices->size() << " GPU(s), work dir "
                 << flags->work_dir << ", data root " << flags->data_root
                 << ", train binary " << flags->train_bin;
  Worker worker(config);
  worker.Start();
  ServeUntilSignalled(worker, signals, flags->shutdown_grace);
  YARD_LOG(INFO) << "yard-worker stopped";
  return 0;
}

}  // namespace
}  // namespace trainyard::worker

int main(int argc, char** argv) { return trainyard::worker::Main(argc, argv); }
