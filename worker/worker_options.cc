#include "worker/worker_options.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/replace_file.h"
#include "common/status_macros.h"
#include "server/metrics_endpoint.h"
#include "worker/job_runner.h"

namespace trainyard::worker {
namespace fs = std::filesystem;
namespace {

absl::StatusOr<int> ParseIntFlag(absl::string_view flag,
                                 const std::string& value, int min, int max) {
  int n;
  if (!absl::SimpleAtoi(value, &n) || n < min || n > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be an integer in [", min, ", ", max,
                     "], got \"", value, "\""));
  }
  return n;
}

// Sets one flag from its value; unknown names are an error.
absl::Status SetFlag(WorkerFlags& flags, const std::string& name,
                     const std::string& value) {
  if (name == "server") {
    flags.server = value;
  } else if (name == "work-dir") {
    flags.work_dir = value;
  } else if (name == "data-root") {
    flags.data_root = value;
  } else if (name == "name") {
    flags.name = value;
  } else if (name == "train-bin") {
    flags.train_bin = value;
  } else if (name == "rank-address") {
    // A literal, not a hostname: rank 0 binds to it, so it must be one
    // address of this node, and a name may resolve to another one (or to
    // several) on the other workers. IPv6 may come in brackets, as in URLs.
    std::string host = value;
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    in6_addr parsed;
    if (inet_pton(AF_INET, host.c_str(), &parsed) != 1 &&
        inet_pton(AF_INET6, host.c_str(), &parsed) != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--rank-address must be an IPv4 or IPv6 address of this node (not "
          "a hostname), got \"",
          value, "\""));
    }
    flags.rank_address = host;
  } else if (name == "cpu-slots") {
    absl::StatusOr<int> n = ParseIntFlag(name, value, 0, 1024);
    if (!n.ok()) return n.status();
    flags.cpu_slots = *n;
  } else if (name == "gpus") {
    absl::StatusOr<GpuSelection> gpus = ParseGpuSelection(value);
    if (!gpus.ok()) return gpus.status();
    flags.gpus = *std::move(gpus);
  } else if (name == "token-file") {
    flags.token_file = value;
  } else if (name == "tls-ca") {
    flags.tls.ca = value;
  } else if (name == "tls-cert") {
    flags.tls.cert = value;
  } else if (name == "tls-key") {
    flags.tls.key = value;
  } else if (name == "tls-server-name") {
    flags.tls.server_name = value;
  } else if (name == "metrics-listen") {
    flags.metrics_listen = value;  // empty turns metrics off
  } else if (name == "keep-attempt-dirs") {
    absl::StatusOr<int> n = ParseIntFlag(name, value, 0, 1'000'000);
    if (!n.ok()) return n.status();
    flags.keep_attempt_dirs = *n;
  } else if (name == "shutdown-grace-ms") {
    absl::StatusOr<int> n = ParseIntFlag(name, value, 0, 3'600'000);
    if (!n.ok()) return n.status();
    flags.shutdown_grace = absl::Milliseconds(*n);
  } else {
    return absl::NotFoundError(absl::StrCat("unknown flag --", name));
  }
  return absl::OkStatus();
}

absl::Status CheckFlags(const WorkerFlags& flags) {
  if (flags.server.empty()) {
    return absl::InvalidArgumentError(
        "--server HOST:PORT is required (or set YARD_SERVER)");
  }
  if (absl::Status s = CheckServerAddress(flags.server); !s.ok()) return s;
  if (flags.work_dir.empty()) {
    return absl::InvalidArgumentError("--work-dir DIR is required");
  }
  if (!flags.metrics_listen.empty()) {
    if (absl::Status s =
            CheckMetricsListen(flags.metrics_listen, "--metrics-listen");
        !s.ok()) {
      return s;
    }
  }
  if (!flags.name.empty() && !IsSafeId(flags.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--name \"", flags.name,
                     "\" must be 1-128 characters of [A-Za-z0-9._-]"));
  }
  return absl::OkStatus();
}

std::string Sanitized(absl::string_view hostname) {
  std::string out;
  for (char c : hostname.substr(0, 48)) {
    out.push_back(IsSafeId(absl::string_view(&c, 1)) ? c : '-');
  }
  return out.empty() ? "worker" : out;
}

}  // namespace

std::string WorkerUsage() {
  return R"(usage: yard-worker --server HOST:PORT --work-dir DIR [flags]

Runs the training jobs the Trainyard server assigns to this node.

  --server HOST:PORT      the yard-server to connect to (or $YARD_SERVER)
  --work-dir DIR          per-job files and the worker id; created if missing
  --cpu-slots N           jobs without GPUs that may run at once (default 1)
  --gpus auto|none|LIST   GPUs to offer (default auto: every GPU the NVIDIA
                          driver lists that $CUDA_VISIBLE_DEVICES leaves
                          visible; none without a driver); LIST: indices as
                          nvidia-smi numbers them, or UUIDs, e.g. 0,1
  --data-root DIR         root of the jobs' data paths (default: current dir)
  --name ID               worker id (default: generated, kept in WORK_DIR/worker_id)
  --train-bin PATH        the yard-train executable (default: beside yard-worker)
  --rank-address ADDR     where rank 0 of a job spread over several workers
                          listens for its other ranks: an IPv4 or IPv6
                          address of this node the other workers reach
                          (default 127.0.0.1, a one-machine cluster)
  --shutdown-grace-ms N   on SIGTERM, how long jobs get to checkpoint (default 30000)
  --keep-attempt-dirs N   ended attempts whose directory (spec and a copy of
                          the log) stays in WORK_DIR/jobs, the most recent
                          ones (default 100; older ones are removed)
  --metrics-listen H:P    Prometheus /metrics, loopback only (default
                          127.0.0.1:9471; port 0: any free port, written to
                          WORK_DIR/yard-worker.metrics-addr; empty: off)
  --token-file FILE       the worker join token (else $YARD_TOKEN); the
                          server writes one to STATE_DIR/worker.token on
                          first start, `yard token create NAME --role worker`
                          makes more
  --tls-ca FILE           speak TLS, trusting the server certificate this CA
                          signed
  --tls-cert FILE --tls-key FILE
                          this worker's client certificate (mTLS)
  --tls-server-name NAME  name to check in the server certificate
)";
}

absl::StatusOr<WorkerFlags> ParseWorkerFlags(
    const std::vector<std::string>& args, absl::string_view env_server) {
  WorkerFlags flags;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      flags.help = true;
      return flags;
    }
    if (!absl::StartsWith(arg, "--") || arg.size() == 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument \"", arg, "\""));
    }
    std::string name = arg.substr(2);
    std::string value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      // Last and without a value: say so of a known flag only.
      WorkerFlags scratch;
      absl::Status known = SetFlag(scratch, name, "");
      if (known.code() == absl::StatusCode::kNotFound) {
        return absl::InvalidArgumentError(known.message());
      }
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " needs a value"));
    }
    if (absl::Status s = SetFlag(flags, name, value); !s.ok()) {
      return absl::InvalidArgumentError(s.message());
    }
  }
  if (flags.server.empty()) flags.server = std::string(env_server);
  if (absl::Status s = CheckFlags(flags); !s.ok()) return s;
  return flags;
}

absl::Status CheckServerAddress(absl::string_view address) {
  const size_t colon = address.rfind(':');
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--server \"", address, "\" is not HOST:PORT (", why, ")"));
  };
  if (colon == absl::string_view::npos) return bad("no port");
  absl::string_view host = address.substr(0, colon);
  if (host.empty()) return bad("no host");
  if (host.front() == '[' && host.back() != ']') return bad("unclosed [");
  int port;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 ||
      port > 65535) {
    return bad("port must be 1-65535");
  }
  return absl::OkStatus();
}

absl::Status ResolveWorkerPaths(WorkerFlags& flags,
                                const std::string& self_exe) {
  std::error_code ec;
  fs::create_directories(flags.work_dir, ec);
  if (ec || !fs::is_directory(flags.work_dir)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--work-dir ", flags.work_dir, ": cannot create the directory",
        ec ? ": " + ec.message() : ""));
  }
  flags.work_dir = fs::absolute(flags.work_dir, ec).lexically_normal().string();

  const fs::path data_root = flags.data_root.empty()
                                 ? fs::current_path(ec)
                                 : fs::path(flags.data_root);
  flags.data_root = fs::absolute(data_root, ec).lexically_normal().string();
  if (ec || !fs::is_directory(flags.data_root)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--data-root ", flags.data_root, ": not a directory"));
  }

  if (flags.train_bin.empty()) {
    flags.train_bin =
        (fs::path(self_exe).parent_path() / "yard-train").string();
  }
  flags.train_bin = fs::absolute(flags.train_bin, ec).string();
  if (!fs::is_regular_file(flags.train_bin) ||
      access(flags.train_bin.c_str(), X_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--train-bin ", flags.train_bin, ": not an executable file"));
  }
  return absl::OkStatus();
}

absl::StatusOr<FileDescriptor> LockWorkDir(const std::string& work_dir) {
  const std::string path = (fs::path(work_dir) / "lock").string();
  FileDescriptor fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd.valid()) {
    return absl::InternalError(
        absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  }
  if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("another yard-worker is using --work-dir ", work_dir, " (",
                     path, " is locked)"));
  }
  return fd;
}

absl::StatusOr<std::string> LoadOrCreateWorkerId(const std::string& work_dir,
                                                 const std::string& name,
                                                 absl::string_view hostname) {
  if (!name.empty()) return name;
  const fs::path path = fs::path(work_dir) / "worker_id";
  if (std::ifstream in(path); in) {
    std::stringstream text;
    text << in.rdbuf();
    std::string id(absl::StripAsciiWhitespace(text.str()));
    if (!IsSafeId(id)) {
      return absl::FailedPreconditionError(
          absl::StrCat(path.string(), " holds \"", id,
                       "\", not a worker id; fix or delete it"));
    }
    return id;
  }
  std::random_device random;
  const std::string id =
      absl::StrFormat("%s-%08x", Sanitized(hostname), random());
  RETURN_IF_ERROR(ReplaceFileDurably(path.string(), id + "\n"));
  return id;
}

}  // namespace trainyard::worker
