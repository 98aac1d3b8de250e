#include "bench/load/server_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace trainyard::bench {
namespace {

std::string FirstWord(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  in >> word;
  return word;
}

}  // namespace

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1,
                         static_cast<size_t>(p * sorted.size()))];
}

std::string BesideThisProgram(const std::string& name) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  self[n > 0 ? n : 0] = 0;
  const std::string path(self);
  return path.substr(0, path.rfind('/')) + "/" + name;
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const ServerProcessOptions& options) {
  std::unique_ptr<ServerProcess> p(new ServerProcess());
  char tmpl[] = "/tmp/yard-load-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    return absl::InternalError("mkdtemp under /tmp failed");
  }
  p->state_dir_ = tmpl;
  const std::string bin = options.server_bin.empty()
                              ? BesideThisProgram("yard-server")
                              : options.server_bin;
  std::vector<std::string> args = {
      bin, "--listen=127.0.0.1:0", "--state-dir=" + p->state_dir_,
      "--data-root=" + options.data_root, "--metrics-listen=127.0.0.1:0"};
  args.insert(args.end(), options.extra_flags.begin(),
              options.extra_flags.end());
  p->pid_ = fork();
  if (p->pid_ == 0) {
    // A bench that dies (killed, or by SIGPIPE when its output is cut
    // short) takes its server with it.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    const std::string log = p->state_dir_ + "/server.log";
    if (freopen(log.c_str(), "w", stderr) == nullptr) _exit(127);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  for (int i = 0; i < 300 && p->address_.empty(); ++i) {
    p->address_ = FirstWord(p->state_dir_ + "/yard-server.addr");
    if (p->address_.empty()) absl::SleepFor(absl::Milliseconds(100));
  }
  if (p->address_.empty()) {
    kill(p->pid_, SIGKILL);
    waitpid(p->pid_, nullptr, 0);
    p->pid_ = -1;
    return absl::UnavailableError(absl::StrCat(bin, " did not start; see ",
                                               p->state_dir_, "/server.log"));
  }
  return p;
}

ServerProcess::~ServerProcess() {
  Stop();
  std::error_code ec;
  if (!state_dir_.empty()) std::filesystem::remove_all(state_dir_, ec);
}

int ServerProcess::Stop() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string ServerProcess::Token(const std::string& file) const {
  return FirstWord(state_dir_ + "/" + file);
}

std::string ServerProcess::MetricsAddress() const {
  return FirstWord(state_dir_ + "/yard-server.metrics-addr");
}

trainyard::v1::JobSpec SmallMnistSpec(const std::string& name) {
  trainyard::v1::JobSpec spec;
  spec.set_name(name);
  spec.mutable_model()->mutable_mlp()->add_hidden(32);
  trainyard::v1::MnistData* mnist = spec.mutable_data()->mutable_mnist();
  mnist->set_images("examples/data/mnist/t10k-images-idx3-ubyte.gz");
  mnist->set_labels("examples/data/mnist/t10k-labels-idx1-ubyte.gz");
  mnist->set_holdout(2000);
  spec.mutable_batch()->set_micro_batch(32);
  spec.set_steps(100);
  spec.set_seed(1);
  return spec;
}

bool FlagValue(int argc, char** argv, int* i, const char* name,
               std::string* out) {
  const absl::string_view a = argv[*i];
  const std::string prefix = absl::StrCat(name, "=");
  if (absl::StartsWith(a, prefix)) {
    *out = std::string(a.substr(prefix.size()));
    return true;
  }
  if (a == name && *i + 1 < argc) {
    *out = argv[++*i];
    return true;
  }
  return false;
}

double CpuSeconds(pid_t pid) {
  std::ifstream in(pid == 0 ? std::string("/proc/self/stat")
                            : absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(in, line);
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream rest(line.substr(paren + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
  }
  return ticks / sysconf(_SC_CLK_TCK);
}

ProcessSize SizeOf(pid_t pid) {
  std::ifstream in(pid == 0 ? std::string("/proc/self/status")
                            : absl::StrCat("/proc/", pid, "/status"));
  ProcessSize size;
  std::string line;
  while (std::getline(in, line)) {
    int64_t value = 0;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const absl::string_view key(line.data(), colon);
    absl::string_view rest(line);
    rest.remove_prefix(colon + 1);
    rest = absl::StripAsciiWhitespace(rest);
    rest = rest.substr(0, rest.find(' '));  // "123 kB"
    if (!absl::SimpleAtoi(rest, &value)) continue;
    if (key == "Threads") size.threads = static_cast<int>(value);
    if (key == "VmRSS") size.rss_mib = value / 1024.0;
  }
  return size;
}

absl::StatusOr<std::string> FetchMetrics(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError("bad metrics address " + address);
  }
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
    const std::string req =
        absl::StrCat("GET /metrics HTTP/1.0\r\nHost: ", address, "\r\n\r\n");
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
    }
  }
  close(fd);
  const size_t body = out.find("\r\n\r\n");
  if (body == std::string::npos) {
    return absl::UnavailableError("no answer from " + address + "/metrics");
  }
  return out.substr(body + 4);
}

std::optional<double> MetricValue(const std::string& text,
                                  const std::string& name) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, name) || !absl::ConsumePrefix(&line, " ")) {
      continue;
    }
    double v = 0;
    if (absl::SimpleAtod(line, &v)) return v;
  }
  return std::nullopt;
}

}  // namespace trainyard::bench
