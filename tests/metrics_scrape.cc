#include "tests/metrics_scrape.h"

#include <arpa/inet.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/waits.h"

namespace trainyard::itest {
namespace {

absl::StatusOr<sockaddr_in> LoopbackAddress(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  int port = 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(host_port.substr(colon + 1), &port) ||
      inet_pton(AF_INET, host_port.substr(0, colon).c_str(), &addr.sin_addr) !=
          1) {
    return absl::InvalidArgumentError(
        absl::StrCat("not an IPv4 HOST:PORT: ", host_port));
  }
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

std::string PercentEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += absl::StrCat("%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

bool IsIdentStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool IsIdentChar(char c) {
  return IsIdentStart(c) || std::isdigit(static_cast<unsigned char>(c));
}

const std::set<std::string>& PromqlWords() {
  static const auto* words = new std::set<std::string>{
      "sum",      "min",        "max",         "avg",          "group",
      "stddev",   "stdvar",     "count",       "count_values", "bottomk",
      "topk",     "quantile",   "by",          "without",      "on",
      "ignoring", "group_left", "group_right", "bool",         "offset",
      "and",      "or",         "unless",      "inf",          "nan",
      "Inf",      "NaN",        "atan2"};
  return *words;
}

}  // namespace

absl::StatusOr<std::string> HttpGet(const std::string& host_port,
                                    const std::string& target,
                                    absl::Duration timeout) {
  auto addr = LoopbackAddress(host_port);
  if (!addr.ok()) return addr.status();
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket() failed");
  if (connect(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) !=
      0) {
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot connect to ", host_port));
  }
  const std::string request =
      absl::StrCat("GET ", target, " HTTP/1.0\r\nHost: ", host_port,
                   "\r\nAccept: text/plain\r\nConnection: close\r\n\r\n");
  if (write(fd, request.data(), request.size()) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("short write");
  }
  std::string response;
  const absl::Time deadline = absl::Now() + timeout;
  char buf[16384];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    const int ms =
        static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (ms <= 0 || poll(&p, 1, ms) != 1) {
      close(fd);
      return absl::DeadlineExceededError(
          absl::StrCat("GET http://", host_port, target, " timed out"));
    }
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    response.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const size_t end = response.find("\r\n\r\n");
  if (end == std::string::npos) {
    return absl::DataLossError(absl::StrCat("no HTTP answer from ", host_port));
  }
  const std::string status_line = response.substr(0, response.find("\r\n"));
  std::string body = response.substr(end + 4);
  if (status_line.find(" 200") == std::string::npos) {
    return absl::UnavailableError(absl::StrCat("GET http://", host_port, target,
                                               ": ", status_line, "\n", body));
  }
  return body;
}

absl::StatusOr<std::string> AwaitAddressFile(const std::string& path,
                                             absl::Duration timeout) {
  std::string text;
  absl::Status s = PollUntil(absl::StrCat("address file ", path), timeout, [&] {
    text = ReadFileOrEmpty(path);
    return !text.empty() && text.back() == '\n';
  });
  if (!s.ok()) return s;
  return std::string(absl::StripAsciiWhitespace(text));
}

absl::StatusOr<int> PickFreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len)) {
    if (fd >= 0) close(fd);
    return absl::InternalError("cannot pick a free port");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

Exposition ParseExposition(const std::string& text) {
  Exposition e;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty()) continue;
    if (absl::ConsumePrefix(&line, "# HELP ") ||
        absl::ConsumePrefix(&line, "# TYPE ")) {
      const std::string name(line.substr(0, line.find(' ')));
      e.metrics.insert(name);
      if (absl::EndsWith(line, " histogram")) {
        for (const char* s : {"_bucket", "_sum", "_count"}) {
          e.metrics.insert(name + s);
        }
        e.labels.insert("le");
      }
      continue;
    }
    if (line.front() == '#') continue;
    const size_t brace = line.find('{');
    const size_t space = line.rfind(' ');
    const size_t name_end = std::min(brace, line.find(' '));
    const std::string name(line.substr(0, name_end));
    e.metrics.insert(name);
    std::string label_text;
    if (brace != absl::string_view::npos) {
      const size_t close = line.rfind('}');
      label_text = std::string(line.substr(brace + 1, close - brace - 1));
      // Label names: what precedes each `="`.
      size_t pos = 0;
      while ((pos = label_text.find("=\"", pos)) != std::string::npos) {
        size_t start = pos;
        while (start > 0 && IsIdentChar(label_text[start - 1])) --start;
        e.labels.insert(label_text.substr(start, pos - start));
        pos += 2;
      }
    }
    double value = std::nan("");
    if (space != absl::string_view::npos) {
      absl::SimpleAtod(line.substr(space + 1), &value);
    }
    e.samples[name].emplace_back(label_text, value);
  }
  return e;
}

double SampleValue(const Exposition& e, const std::string& metric,
                   const std::string& label_fragment) {
  auto it = e.samples.find(metric);
  if (it == e.samples.end()) return std::nan("");
  for (const auto& [labels, value] : it->second) {
    if (labels.find(label_fragment) != std::string::npos) return value;
  }
  return std::nan("");
}

PromqlNames NamesInPromql(const std::string& expr) {
  PromqlNames names;
  const size_t n = expr.size();
  int brace_depth = 0;        // inside {...}: label matchers
  int label_list_depth = -1;  // paren depth of a by(...)/on(...) list
  int paren_depth = 0;
  bool expect_label_list = false;
  for (size_t i = 0; i < n;) {
    const char c = expr[i];
    if (c == '"' || c == '\'' || c == '`') {  // string literal
      size_t j = i + 1;
      while (j < n && expr[j] != c) j += expr[j] == '\\' ? 2 : 1;
      i = j + 1;
    } else if (c == '[') {  // range or subquery duration
      i = expr.find(']', i);
      i = i == std::string::npos ? n : i + 1;
    } else if (c == '$') {  // Grafana variable: $name or ${name}
      ++i;
      if (i < n && expr[i] == '{') {
        i = expr.find('}', i);
        i = i == std::string::npos ? n : i + 1;
      }
      while (i < n && IsIdentChar(expr[i])) ++i;
    } else if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      while (i < n && (IsIdentChar(expr[i]) || expr[i] == '.')) ++i;
    } else if (IsIdentStart(c)) {
      size_t j = i;
      while (j < n && IsIdentChar(expr[j])) ++j;
      const std::string word = expr.substr(i, j - i);
      size_t k = j;
      while (k < n && std::isspace(static_cast<unsigned char>(expr[k]))) ++k;
      if (brace_depth > 0 || label_list_depth >= 0) {
        names.labels.insert(word);
      } else if (word == "by" || word == "without" || word == "on" ||
                 word == "ignoring" || word == "group_left" ||
                 word == "group_right") {
        expect_label_list = k < n && expr[k] == '(';
      } else if (PromqlWords().contains(word) || (k < n && expr[k] == '(')) {
        // a function, an aggregation or a keyword
      } else {
        names.metrics.insert(word);
      }
      i = j;
    } else {
      if (c == '{') ++brace_depth;
      if (c == '}') --brace_depth;
      if (c == '(') {
        ++paren_depth;
        if (expect_label_list) label_list_depth = paren_depth;
        expect_label_list = false;
      }
      if (c == ')') {
        if (paren_depth == label_list_depth) label_list_depth = -1;
        --paren_depth;
      }
      ++i;
    }
  }
  return names;
}

bool OnPath(const std::string& program) {
  return std::system(absl::StrCat("command -v ", program, " >/dev/null 2>&1")
                         .c_str()) == 0;
}

absl::Status PromtoolCheckMetrics(TestDir& dir, const std::string& exposition) {
  const std::string path = dir.WriteFile("exposition.txt", exposition);
  const std::string script = dir.WriteFile(
      "promtool-check-metrics.sh",
      absl::StrCat("#!/bin/sh\nexec promtool check metrics < '", path, "'\n"),
      /*executable=*/true);
  CommandResult r = RunCommand({script}, dir.LogPrefix("promtool"),
                               Scaled(absl::Seconds(30)));
  if (r.exit_code() != 0 || !r.out.empty() || !r.err.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("promtool check metrics: ", r.DebugString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PrometheusProcess>> PrometheusProcess::Start(
    TestDir& dir, const std::map<std::string, std::string>& targets,
    const std::string& rule_file) {
  std::string config =
      "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n";
  if (!rule_file.empty()) {
    absl::StrAppend(&config, "rule_files:\n  - '", rule_file, "'\n");
  }
  absl::StrAppend(&config, "scrape_configs:\n");
  for (const auto& [job, address] : targets) {
    absl::StrAppend(&config, "  - job_name: '", job,
                    "'\n    static_configs:\n      - targets: ['", address,
                    "']\n");
  }
  const std::string config_path = dir.WriteFile("prometheus.yml", config);
  auto port = PickFreePort();
  if (!port.ok()) return port.status();
  const std::string address = absl::StrCat("127.0.0.1:", *port);
  ProcessOptions p;
  p.argv = {"/usr/bin/prometheus", absl::StrCat("--config.file=", config_path),
            absl::StrCat("--storage.tsdb.path=", dir.Subdir("prometheus-tsdb")),
            absl::StrCat("--web.listen-address=", address), "--log.level=warn"};
  const std::string prefix = dir.LogPrefix("prometheus");
  p.stdout_path = prefix + ".stdout";
  p.stderr_path = prefix + ".stderr";
  p.cwd = dir.path();
  auto child = ChildProcess::Start(std::move(p));
  if (!child.ok()) return child.status();
  std::unique_ptr<PrometheusProcess> prom(
      new PrometheusProcess(address, std::move(*child)));
  absl::Status ready =
      PollUntil("prometheus to be ready", Scaled(absl::Seconds(60)), [&] {
        return !prom->process().Running() ||
               HttpGet(address, "/-/ready", absl::Seconds(2)).ok();
      });
  if (!ready.ok() || !prom->process().Running()) {
    return absl::UnavailableError(absl::StrCat(
        "prometheus did not become ready\n", prom->process().OutputTail()));
  }
  return prom;
}

absl::StatusOr<std::vector<PromSample>> PrometheusProcess::Query(
    const std::string& expr) {
  absl::StatusOr<std::string> body = HttpGet(
      address_, absl::StrCat("/api/v1/query?query=", PercentEncode(expr)));
  if (!body.ok()) return body.status();
  google::protobuf::Struct json;
  if (!google::protobuf::util::JsonStringToMessage(*body, &json).ok()) {
    return absl::DataLossError(absl::StrCat("not JSON: ", *body));
  }
  const auto& f = json.fields();
  if (!f.contains("status") || f.at("status").string_value() != "success") {
    return absl::InvalidArgumentError(
        absl::StrCat("query ", expr, " failed: ", *body));
  }
  std::vector<PromSample> out;
  const auto& result =
      f.at("data").struct_value().fields().at("result").list_value();
  for (const auto& item : result.values()) {
    const auto& fields = item.struct_value().fields();
    PromSample s;
    for (const auto& [k, v] : fields.at("metric").struct_value().fields()) {
      s.labels[k] = v.string_value();
    }
    const auto& value = fields.at("value").list_value();
    if (value.values_size() == 2) {
      absl::SimpleAtod(value.values(1).string_value(), &s.value);
    }
    out.push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<std::vector<PromSample>> PrometheusProcess::QueryUntil(
    const std::string& what, const std::string& expr,
    const std::function<bool(const std::vector<PromSample>&)>& accept,
    absl::Duration timeout) {
  std::vector<PromSample> last;
  absl::Status error;
  absl::Status s = PollUntil(what, timeout, [&] {
    auto r = Query(expr);
    if (!r.ok()) {
      error = r.status();
      return !absl::IsUnavailable(r.status()) &&
             !absl::IsDeadlineExceeded(r.status());  // a bad query: stop
    }
    last = *std::move(r);
    return accept(last);
  });
  if (!error.ok() && !absl::IsUnavailable(error) &&
      !absl::IsDeadlineExceeded(error)) {
    return error;
  }
  if (!s.ok()) {
    return absl::DeadlineExceededError(
        absl::StrCat(s.message(), " (query: ", expr, ", last answer had ",
                     last.size(), " series)"));
  }
  return last;
}

}  // namespace trainyard::itest
