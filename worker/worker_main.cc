// yard-worker: the Trainyard node agent. Connects to yard-server, runs the
// jobs it is assigned as yard-train child processes and reports on them.
// Listens only for Prometheus scrapes (--metrics-listen, loopback; empty
// turns it off). SIGTERM/SIGINT: the jobs checkpoint and stop, their
// exits are reported, exit 0; a second signal kills the jobs at once.
// Refused by the server (its join token, role or client certificate): the
// same shutdown, then exit 3, so a supervisor shows it failing instead of a
// worker that looks healthy and never joins. Usage errors: one line on
// stderr, exit 2. GPUs: see gpu_discovery.h; a
// machine without the NVIDIA driver runs CPU jobs only.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/grpc_credentials.h"
#include "common/grpc_log.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "server/metrics_endpoint.h"
#include "worker/device_discovery.h"
#include "worker/device_telemetry.h"
#include "worker/gpu_discovery.h"
#include "worker/worker.h"
#include "worker/worker_metrics.h"
#include "worker/worker_options.h"

namespace trainyard::worker {
namespace {

constexpr absl::Duration kFlushTimeout = absl::Seconds(5);
// How often the GPUs' live figures are read (about a heartbeat interval).
constexpr absl::Duration kTelemetryPeriod = absl::Seconds(1);

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
    std::shared_ptr<DeviceTelemetry> telemetry, WorkerConfig& config) {
  if (flags.metrics_listen.empty()) return nullptr;
  GpuSampler sample_gpus;
  if (telemetry != nullptr) {
    sample_gpus = [telemetry] {
      std::vector<GpuSample> out;
      for (const DeviceReading& r : telemetry->Latest()) {
        out.push_back(GpuSampleOf(r));
      }
      return out;
    };
  }
  auto metrics = std::make_shared<WorkerMetrics>(
      WorkerMetricsOptions{.version = kWorkerVersion,
                           .devices = devices,
                           .cpu_slots = flags.cpu_slots,
                           .sample_gpus = std::move(sample_gpus)});
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
// Serves until SIGTERM/SIGINT, or until `refused` is set (and SIGUSR1
// sent), then shuts the worker down. Returns the exit status: 3 when the
// refusal, not a signal, ended it. SIGUSR1 is also how the shutdown thread
// says it is done: only its `done` flag counts as that.
int ServeUntilSignalled(Worker& worker, const sigset_t& signals,
                        absl::Duration grace,
                        const std::atomic<bool>& refused) {
  int sig = 0;
  do {
    sigwait(&signals, &sig);
  } while (sig == SIGUSR1 && !refused);
  const bool was_refused = sig == SIGUSR1;
  if (was_refused) {
    YARD_LOG(ERROR) << "the server refused this worker: shutting down; "
                       "fix its join token (--token-file, $YARD_TOKEN) or "
                       "client certificate and start it again";
  } else {
    YARD_LOG(INFO) << "received SIG" << sigabbrev_np(sig) << ": shutting down";
  }
  std::atomic<bool> done{false};
  std::thread shutdown([&worker, grace, &done] {
    worker.Shutdown(grace, kFlushTimeout);
    done = true;
    kill(getpid(), SIGUSR1);  // wakes the sigwait below
  });
  while (true) {
    sigwait(&signals, &sig);
    if (sig == SIGUSR1) {
      if (done) break;
      continue;  // a refusal while shutting down: nothing more to do
    }
    YARD_LOG(WARNING) << "received SIG" << sigabbrev_np(sig)
                      << " again: killing the jobs now";
    worker.KillJobs();
  }
  shutdown.join();
  return was_refused ? 3 : 0;
}

// Jobs are placed on GPUs by NVML's index (PCI bus order, as nvidia-smi);
// CUDA numbers them the same way only under CUDA_DEVICE_ORDER=PCI_BUS_ID
// (its default puts the fastest first), so the jobs inherit that. Their
// CUDA_VISIBLE_DEVICES names GPUs by UUID where known, which needs no
// order; the index is the fallback. Call before any thread starts: setenv
// is not thread-safe.
void UsePciBusOrder() {
  const char* order = std::getenv("CUDA_DEVICE_ORDER");
  if (order == nullptr) {
    setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
  } else if (absl::string_view(order) != "PCI_BUS_ID") {
    YARD_LOG(WARNING) << "CUDA_DEVICE_ORDER=" << order
                      << ": jobs may number GPUs unlike nvidia-smi and this "
                         "worker; unset it or set PCI_BUS_ID";
  }
}

struct OfferedDevices {
  std::vector<trainyard::v1::Device> devices;
  std::shared_ptr<DeviceTelemetry> telemetry;  // null without GPUs
};

// The GPUs --gpus and $CUDA_VISIBLE_DEVICES let this worker offer, each
// logged, and the telemetry that reads their live figures.
absl::StatusOr<OfferedDevices> DiscoverDevices(const WorkerFlags& flags) {
  GpuDiscoveryOptions options;
  options.selection = flags.gpus;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    options.cuda_visible_devices = visible;
  }
  absl::StatusOr<DeviceDiscoveryChoice> choice = ChooseDeviceDiscovery(options);
  if (!choice.ok()) return choice.status();
  for (const std::string& note : choice->notes) YARD_LOG(WARNING) << note;
  if (!choice->cpu_only_reason.empty()) {
    YARD_LOG(INFO) << choice->cpu_only_reason;
  }
  OfferedDevices out;
  absl::StatusOr<std::vector<trainyard::v1::Device>> devices =
      choice->discovery->ListDevices();
  if (!devices.ok()) return devices.status();
  out.devices = *std::move(devices);
  for (const auto& d : out.devices) YARD_LOG(INFO) << DescribeDevice(d);
  if (!out.devices.empty()) {
    std::shared_ptr<DeviceDiscovery> discovery = std::move(choice->discovery);
    out.telemetry = DeviceTelemetry::Start(
        [discovery] { return discovery->Read(); }, kTelemetryPeriod);
  }
  return out;
}

// Whether an NVIDIA MPS control daemon serves this machine: its control
// pipe sits in $CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps).
bool MpsRunning() {
  const char* dir = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  const std::string pipe =
      std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp/nvidia-mps") +
      "/control";
  struct stat st;
  return stat(pipe.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}

// The offered GPUs go in the hello and to the job runner, their live
// figures (cached by the telemetry) in each heartbeat.
void UseDevices(const OfferedDevices& offered, WorkerConfig& config) {
  config.devices = offered.devices;
  for (const auto& d : offered.devices) {
    config.runner.gpus.push_back(d.index());
    config.runner.gpu_memory_bytes[d.index()] = d.memory_bytes();
    config.runner.gpu_uuids[d.index()] = d.uuid();
  }
  if (!offered.devices.empty()) {
    config.runner.mps = MpsRunning();
    for (trainyard::v1::Device& d : config.devices) {
      d.set_mps(config.runner.mps);
    }
    YARD_LOG(INFO) << (config.runner.mps
                           ? "MPS is running: jobs sharing a GPU are capped "
                             "at their compute share"
                           : "no MPS control daemon: the server shares these "
                             "GPUs only with --share-gpus always, and jobs "
                             "sharing one are time-sliced");
  }
  if (offered.telemetry == nullptr) return;
  config.device_figures = [telemetry = offered.telemetry] {
    std::vector<trainyard::v1::Device> out;
    for (const DeviceReading& r : telemetry->Latest()) {
      out.push_back(LiveFiguresOf(r));
    }
    return out;
  };
}

// The join token from --token-file, else $YARD_TOKEN.
absl::StatusOr<std::string> JoinToken(const WorkerFlags& flags) {
  if (!flags.token_file.empty()) {
    return ReadTokenFile(flags.token_file, "--token-file");
  }
  const char* env = std::getenv("YARD_TOKEN");
  if (env != nullptr && *env != '\0') {
    RETURN_IF_ERROR(CheckBearerToken(env, "$YARD_TOKEN"));
    return std::string(env);
  }
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
  UsePciBusOrder();
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

  // Block the signals before any thread starts (NVML may start some) so
  // every thread inherits the mask and only sigwait sees them. Children
  // unblock them before exec.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  trainyard::RouteGrpcLogs();

  absl::StatusOr<OfferedDevices> offered = DiscoverDevices(*flags);
  if (!offered.ok()) return Fail(2, offered.status().message());
  const std::vector<trainyard::v1::Device>& devices = offered->devices;

  WorkerConfig config;
  config.worker_id = *id;
  config.hostname = hostname;
  config.runner.work_dir = flags->work_dir;
  config.runner.train_bin = flags->train_bin;
  config.runner.data_root = flags->data_root;
  config.runner.rank_address = flags->rank_address;
  config.runner.cpu_slots = flags->cpu_slots;
  config.runner.keep_attempt_dirs = flags->keep_attempt_dirs;
  UseDevices(*offered, config);
  config.link.server_address = flags->server;
  config.link.token = *token;
  config.link.tls = flags->tls;
  std::atomic<bool> refused{false};
  config.on_refused = [&refused](const absl::Status&) {
    if (!refused.exchange(true)) kill(getpid(), SIGUSR1);
  };

  // After the signal mask: the endpoint's threads must inherit it.
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> metrics_endpoint =
      StartMetrics(*flags, devices, offered->telemetry, config);
  if (!metrics_endpoint.ok()) {
    return Fail(1, metrics_endpoint.status().message());
  }

  YARD_LOG(INFO) << "yard-worker " << kWorkerVersion << " id " << *id
                 << ": server " << flags->server << ", " << flags->cpu_slots
                 << " CPU slot(s), " << devices.size() << " GPU(s), work dir "
                 << flags->work_dir << ", data root " << flags->data_root
                 << ", train binary " << flags->train_bin;
  Worker worker(config);
  worker.Start();
  const int status =
      ServeUntilSignalled(worker, signals, flags->shutdown_grace, refused);
  YARD_LOG(INFO) << "yard-worker stopped";
  return status;
}

}  // namespace
}  // namespace trainyard::worker

int main(int argc, char** argv) { return trainyard::worker::Main(argc, argv); }
