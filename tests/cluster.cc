#include "tests/cluster.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_credentials.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "tests/waits.h"

#ifndef YARD_BIN_DIR
#error "YARD_BIN_DIR must point at the build's bin directory"
#endif
#ifndef YARD_SOURCE_DIR
#error "YARD_SOURCE_DIR must point at the source tree"
#endif

namespace trainyard::itest {
namespace fs = std::filesystem;

std::string BinDir() { return YARD_BIN_DIR; }
std::string SourceDir() { return YARD_SOURCE_DIR; }
std::string BinPath(const std::string& name) {
  return absl::StrCat(BinDir(), "/", name);
}

absl::Duration Scaled(absl::Duration d) {
  static const double scale = [] {
    const char* s = getenv("YARD_TEST_TIMEOUT_SCALE");
    double v = 1.0;
    if (s == nullptr || !absl::SimpleAtod(s, &v) || v < 1.0) v = 1.0;
    return v;
  }();
  return d * scale;
}

absl::StatusOr<std::unique_ptr<TestDir>> TestDir::Create(
    const std::string& test_name) {
  const char* base = getenv("TEST_TMPDIR");
  std::string root = base != nullptr && base[0] != '\0' ? base : "/tmp";
  std::string name = absl::StrReplaceAll(test_name, {{"/", "_"}, {".", "_"}});
  std::string templ = absl::StrCat(root, "/yard-", name, "-XXXXXX");
  std::error_code ec;
  fs::create_directories(root, ec);  // a TEST_TMPDIR /tmp's cleaner took
  if (mkdtemp(templ.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", templ, " failed"));
  }
  fs::create_directories(templ + "/logs");
  return std::unique_ptr<TestDir>(new TestDir(templ));
}

TestDir::~TestDir() {
  if (::testing::Test::HasFailure() || getenv("YARD_TEST_KEEP") != nullptr) {
    fprintf(stderr, "[ harness ] kept test directory %s\n", path_.c_str());
    return;
  }
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string TestDir::Subdir(const std::string& name) const {
  std::string p = absl::StrCat(path_, "/", name);
  fs::create_directories(p);
  return p;
}

std::string TestDir::WriteFile(const std::string& name, const std::string& text,
                               bool executable) const {
  std::string p = absl::StrCat(path_, "/", name);
  {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << text;
  }
  chmod(p.c_str(), executable ? 0755 : 0644);
  return p;
}

std::string TestDir::LogPrefix(const std::string& stem) {
  return absl::StrCat(path_, "/logs/", stem, "-", next_log_++);
}

TestCredentials& CurrentCredentials() {
  static TestCredentials* credentials = new TestCredentials;
  return *credentials;
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    TestDir& dir, const ServerOptions& options) {
  if (options.state_dir.empty()) {
    return absl::InvalidArgumentError("ServerOptions.state_dir is required");
  }
  fs::create_directories(options.state_dir);
  // A restart reuses the state dir: the old address file must not be
  // mistaken for the new server's.
  std::error_code ec;
  fs::remove(options.state_dir + "/yard-server.addr", ec);
  std::string prefix = dir.LogPrefix("yard-server");
  ProcessOptions p;
  p.argv = {BinPath("yard-server"), "--listen",
            absl::StrCat("127.0.0.1:", options.port), "--state-dir",
            options.state_dir, "--data-root", SourceDir(),
            "--heartbeat-interval-ms",
            absl::StrCat(options.heartbeat_interval_ms), "--worker-lease-ms",
            absl::StrCat(options.worker_lease_ms),
            // Tests run side by side: never the fixed default port.
            "--metrics-listen", "127.0.0.1:0"};
  p.argv.insert(p.argv.end(), options.extra_args.begin(),
                options.extra_args.end());
  p.cwd = options.state_dir;
  p.stdout_path = prefix + ".stdout";
  p.stderr_path = prefix + ".stderr";
  auto child = ChildProcess::Start(std::move(p));
  if (!child.ok()) return child.status();
  std::unique_ptr<ServerProcess> server(
      new ServerProcess(options, std::move(*child)));
  absl::Status serving = server->AwaitServing(Scaled(absl::Seconds(30)));
  if (!serving.ok()) {
    return absl::Status(
        serving.code(),
        absl::StrCat(serving.message(), "\n", server->process_->OutputTail()));
  }
  return server;
}

absl::Status ServerProcess::AwaitServing(absl::Duration timeout) {
  const std::string addr_file = options_.state_dir + "/yard-server.addr";
  absl::Time deadline = absl::Now() + timeout;
  std::string text;
  absl::Status s =
      PollUntil(absl::StrCat("yard-server to write ", addr_file), timeout, [&] {
        if (!process_->Running()) return true;
        text = ReadFileOrEmpty(addr_file);
        return !text.empty() && text.back() == '\n';
      });
  if (!s.ok()) return s;
  if (!process_->Running()) {
    return absl::FailedPreconditionError(
        absl::StrCat("yard-server exited before serving: ",
                     process_->WaitForExit(absl::ZeroDuration())->ToString()));
  }
  address_ = std::string(absl::StripAsciiWhitespace(text));
  absl::string_view port_text = address_;
  if (!absl::ConsumePrefix(&port_text, "127.0.0.1:") ||
      !absl::SimpleAtoi(port_text, &port_) || port_ <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        addr_file, " should hold \"127.0.0.1:PORT\\n\", holds \"", text, "\""));
  }
  if (options_.port != 0 && port_ != options_.port) {
    return absl::InvalidArgumentError(
        absl::StrCat("asked for port ", options_.port, ", got ", address_));
  }
  admin_token_ = std::string(
      absl::StripAsciiWhitespace(ReadFileOrEmpty(admin_token_file())));
  if (admin_token_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("yard-server left no token in ", admin_token_file()));
  }
  auto channel =
      grpc::CreateChannel(address_, HarnessCredentials(options_.tls_ca));
  if (!channel->WaitForConnected(absl::ToChronoTime(deadline))) {
    return absl::DeadlineExceededError(
        absl::StrCat("yard-server wrote ", address_,
                     " but no connection was accepted before the deadline"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::Start(
    TestDir& dir, const std::string& server_address,
    const WorkerOptions& options) {
  if (options.name.empty()) {
    return absl::InvalidArgumentError("WorkerOptions.name is required");
  }
  std::string work_dir = options.work_dir.empty()
                             ? dir.Subdir("worker-" + options.name)
                             : options.work_dir;
  std::filesystem::create_directories(work_dir);
  std::string prefix = dir.LogPrefix("yard-worker-" + options.name);
  ProcessOptions p;
  p.argv = {BinPath("yard-worker"),
            "--server",
            server_address,
            "--work-dir",
            work_dir,
            "--cpu-slots",
            absl::StrCat(options.cpu_slots),
            "--data-root",
            SourceDir(),
            "--name",
            options.name,
            "--metrics-listen",
            "127.0.0.1:0",
            "--token-file",
            options.token_file.empty() ? CurrentCredentials().worker_token_file
                                       : options.token_file};
  if (!options.train_bin.empty()) {
    p.argv.push_back("--train-bin");
    p.argv.push_back(options.train_bin);
  }
  p.argv.insert(p.argv.end(), options.extra_args.begin(),
                options.extra_args.end());
  if (std::find(options.extra_args.begin(), options.extra_args.end(),
                "--gpus") == options.extra_args.end()) {
    p.argv.insert(p.argv.end(), {"--gpus", "none"});
  }
  p.env = options.env;
  const std::string mps_dir = dir.Subdir("mps-" + options.name);
  if (options.mps && mkfifo((mps_dir + "/control").c_str(), 0600) != 0 &&
      errno != EEXIST) {
    return absl::InternalError(
        absl::StrCat("mkfifo in ", mps_dir, ": errno ", errno));
  }
  p.env.emplace_back("CUDA_MPS_PIPE_DIRECTORY", mps_dir);
  p.cwd = work_dir;
  p.stdout_path = prefix + ".stdout";
  p.stderr_path = prefix + ".stderr";
  auto child = ChildProcess::Start(std::move(p));
  if (!child.ok()) return child.status();
  return std::unique_ptr<WorkerProcess>(
      new WorkerProcess(options, work_dir, std::move(*child)));
}

std::vector<pid_t> WorkerProcess::TrainerPids() const {
  return ChildPidsOf(process_->pid());
}

std::map<int, pid_t> WorkerProcess::TrainerPidsByRank() const {
  std::map<int, pid_t> out;
  for (pid_t pid : TrainerPids()) {
    std::ifstream in(absl::StrCat("/proc/", pid, "/cmdline"));
    std::stringstream raw;
    raw << in.rdbuf();
    std::string cmdline = raw.str();
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    const size_t at = cmdline.find("--rank ");
    int rank = 0;
    if (at != std::string::npos) {
      const std::string digits =
          cmdline.substr(at + 7, cmdline.find(' ', at + 7) - at - 7);
      if (!absl::SimpleAtoi(digits, &rank)) continue;
    }
    out[rank] = pid;
  }
  return out;
}

std::shared_ptr<grpc::ChannelCredentials> HarnessCredentials(
    const std::string& tls_ca) {
  if (tls_ca.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ReadFileOrEmpty(tls_ca);
  return grpc::SslCredentials(options);
}

Stubs::Stubs(const std::string& address, const std::string& tls_ca)
    : channel(grpc::CreateChannel(address, HarnessCredentials(tls_ca))),
      jobs(trainyard::v1::JobService::NewStub(channel)),
      cluster(trainyard::v1::ClusterService::NewStub(channel)) {}

std::unique_ptr<grpc::ClientContext> ContextWithTimeout(
    absl::Duration timeout) {
  return ContextWithToken(CurrentCredentials().token, timeout);
}

std::unique_ptr<grpc::ClientContext> ContextWithToken(const std::string& token,
                                                      absl::Duration timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + Scaled(timeout)));
  AddBearerToken(*ctx, token);
  return ctx;
}

grpc::Status RawUnaryCall(grpc::Channel& channel, const std::string& method,
                          const std::string& request, std::string* response,
                          absl::Duration timeout) {
  grpc::GenericStub stub(
      std::shared_ptr<grpc::Channel>(&channel, [](grpc::Channel*) {}));
  auto ctx = ContextWithTimeout(timeout);
  grpc::Slice slice(request);
  grpc::ByteBuffer req(&slice, 1);
  grpc::ByteBuffer resp;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(ctx.get(), method, grpc::StubOptions(), &req, &resp,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (status.ok() && response != nullptr) {
    std::vector<grpc::Slice> slices;
    (void)resp.Dump(&slices);
    response->clear();
    for (const auto& s : slices) {
      response->append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  return status;
}

absl::Status CheckHealth(grpc::Channel& channel, const std::string& service) {
  // HealthCheckRequest{service}: field 1, length-delimited (names < 128).
  std::string request;
  if (!service.empty()) {
    request = absl::StrCat(
        "\x0a", std::string(1, static_cast<char>(service.size())), service);
  }
  std::string response;
  grpc::Status s =
      RawUnaryCall(channel, "/grpc.health.v1.Health/Check", request, &response);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("Health/Check ", service, ": ",
                                               CodeName(s.error_code()), " ",
                                               s.error_message()));
  }
  // HealthCheckResponse{status = SERVING (1)} is the two bytes 08 01.
  if (response != std::string("\x08\x01", 2)) {
    return absl::UnavailableError("Health/Check: not SERVING");
  }
  return absl::OkStatus();
}

CommandResult RunYard(TestDir& dir, const std::string& address,
                      const std::vector<std::string>& args,
                      absl::Duration timeout) {
  std::vector<std::string> argv = {BinPath("yard"), "--server", address};
  if (!CurrentCredentials().token.empty()) {
    argv.push_back("--token");
    argv.push_back(CurrentCredentials().token);
  }
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, dir.LogPrefix("yard"), Scaled(timeout), SourceDir());
}

std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

}  // namespace trainyard::itest
