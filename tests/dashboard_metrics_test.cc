// The Grafana dashboard (deploy/grafana/dashboards/*.json) and the alerting
// rules (deploy/prometheus/alerts.yml) may name only metrics and labels that
// Trainyard really exports. The truth comes from running daemons: a real
// yard-server and yard-worker, scraped over HTTP while a job runs, plus the
// labels Prometheus itself attaches (job, instance; the `up` series). This
// machine has no GPUs, so the worker declares its per-GPU families without
// series; their label names come from the worker's own metrics code fed one
// simulated GPU. When Prometheus is installed every expression is also run
// against a real one scraping the daemons, so a malformed query fails here
// rather than on an operator's screen.
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <prometheus/text_serializer.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "tests/harness.h"
#include "tests/metrics_scrape.h"
#include "worker/worker_metrics.h"

namespace trainyard::itest {
namespace {

struct Expression {
  std::string where;  // file and panel or rule, for messages
  std::string expr;
};

void CollectDashboardExpressions(const google::protobuf::Value& v,
                                 const std::string& where,
                                 std::vector<Expression>& exprs,
                                 std::vector<Expression>& legends) {
  if (v.has_struct_value()) {
    const auto& f = v.struct_value().fields();
    std::string here = where;
    if (f.contains("title")) here += " / " + f.at("title").string_value();
    if (f.contains("expr"))
      exprs.push_back({here, f.at("expr").string_value()});
    if (f.contains("legendFormat")) {
      legends.push_back({here, f.at("legendFormat").string_value()});
    }
    for (const auto& [k, child] : f) {
      CollectDashboardExpressions(child, here, exprs, legends);
    }
  } else if (v.has_list_value()) {
    for (const auto& child : v.list_value().values()) {
      CollectDashboardExpressions(child, where, exprs, legends);
    }
  }
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Label names in Grafana legends ({{gpu}}) or alert templates
// ({{ $labels.instance }}).
std::set<std::string> TemplateLabels(const std::string& text) {
  std::set<std::string> out;
  static const std::regex legend(R"(\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\})");
  static const std::regex alert(R"(\$labels\.([A-Za-z_][A-Za-z0-9_]*))");
  for (const std::regex* re : {&legend, &alert}) {
    for (auto it = std::sregex_iterator(text.begin(), text.end(), *re);
         it != std::sregex_iterator(); ++it) {
      out.insert((*it)[1]);
    }
  }
  return out;
}

// What the worker's metrics code exports for a worker with one GPU.
Exposition SimulatedGpuWorker() {
  trainyard::v1::Device gpu;
  gpu.set_index(0);
  gpu.set_uuid("GPU-simulated");
  gpu.set_memory_bytes(int64_t{80} << 30);
  worker::WorkerMetrics m(worker::WorkerMetricsOptions{
      .version = "test", .devices = {gpu}, .cpu_slots = 1, .sample_gpus = [] {
        return std::vector<worker::GpuSample>{{.index = 0,
                                               .utilization_ratio = 0.5,
                                               .memory_used_bytes = 1e9,
                                               .temperature_celsius = 50,
                                               .power_watts = 100}};
      }});
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, m.Collect());
  return ParseExposition(text.str());
}

void Merge(Exposition& into, const Exposition& from) {
  into.metrics.insert(from.metrics.begin(), from.metrics.end());
  into.labels.insert(from.labels.begin(), from.labels.end());
}

// Failures for every name in `e` that `exported` does not have.
void ExpectExported(const Expression& e, const Exposition& exported) {
  const PromqlNames names = NamesInPromql(e.expr);
  EXPECT_FALSE(names.metrics.empty()) << e.where << ": " << e.expr;
  for (const std::string& m : names.metrics) {
    EXPECT_TRUE(exported.metrics.contains(m))
        << e.where << ": metric " << m << " is not exported\n  " << e.expr;
  }
  for (const std::string& l : names.labels) {
    EXPECT_TRUE(exported.labels.contains(l))
        << e.where << ": label " << l << " is not exported\n  " << e.expr;
  }
}

TEST(PromqlNamesTest, FindsMetricsAndLabelsOnly) {
  const PromqlNames n = NamesInPromql(
      "histogram_quantile(0.99, sum by (le) (rate(yard_x_bucket{job=\"a\", "
      "instance=~\"$node\"}[$__rate_interval]))) > 1 and on() "
      "yard_y offset 5m unless ignoring(gpu) yard_z");
  EXPECT_EQ(n.metrics,
            (std::set<std::string>{"yard_x_bucket", "yard_y", "yard_z"}));
  EXPECT_EQ(n.labels, (std::set<std::string>{"le", "job", "instance", "gpu"}));
  EXPECT_EQ(NamesInPromql("sum without (uuid) (yard_a) / 2").labels,
            (std::set<std::string>{"uuid"}));
  EXPECT_EQ(NamesInPromql("label_replace(up, \"a\", \"$1\", \"b\", \"(.*)\")")
                .metrics,
            (std::set<std::string>{"up"}));
}

class DashboardMetricsTest : public ClusterTest {};

TEST_F(DashboardMetricsTest, DashboardAndAlertsNameOnlyExportedSeries) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSIGN_OR_FAIL(WorkerProcess * worker, StartReadyWorker({.name = "w1"}));
  YARD_ASSIGN_OR_FAIL(std::string server_addr,
                      AwaitAddressFile(server().options().state_dir +
                                           "/yard-server.metrics-addr",
                                       StartTimeout()));
  YARD_ASSIGN_OR_FAIL(
      std::string worker_addr,
      AwaitAddressFile(worker->work_dir() + "/yard-worker.metrics-addr",
                       StartTimeout()));
  MnistSpec spec;
  spec.steps = 5'000'000;  // runs until the test ends
  spec.log_every = 5;
  YARD_ASSIGN_OR_FAIL(auto submitted, Submit(spec.ToProto()));
  std::string worker_text;
  YARD_ASSERT_OK(PollUntil(
      "the job's progress on the worker's /metrics", JobTimeout(), [&] {
        auto t = HttpGet(worker_addr, "/metrics");
        if (t.ok()) worker_text = *t;
        return t.ok() && t->find("yard_job_loss{") != std::string::npos;
      }));
  YARD_ASSIGN_OR_FAIL(std::string server_text,
                      HttpGet(server_addr, "/metrics"));

  Exposition exported = ParseExposition(server_text);
  Merge(exported, ParseExposition(worker_text));
  Merge(exported, SimulatedGpuWorker());
  exported.metrics.insert("up");  // Prometheus' own, per target
  exported.labels.insert({"job", "instance"});

  std::vector<Expression> exprs, legends;
  const std::string dashboards = SourceDir() + "/deploy/grafana/dashboards";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dashboards)) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    google::protobuf::Value json;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                    ReadAll(entry.path()), &json)
                    .ok())
        << entry.path() << " is not valid JSON";
    CollectDashboardExpressions(json, entry.path().filename(), exprs, legends);
  }
  ASSERT_GT(files, 0) << "no dashboard under " << dashboards;
  ASSERT_GE(exprs.size(), 10u);
  const size_t dashboard_exprs = exprs.size();

  const std::string rules_path = SourceDir() + "/deploy/prometheus/alerts.yml";
  YAML::Node rules = YAML::LoadFile(rules_path);
  for (const YAML::Node& group : rules["groups"]) {
    for (const YAML::Node& rule : group["rules"]) {
      const std::string name = rule["alert"].as<std::string>("");
      exprs.push_back({"alerts.yml / " + name, rule["expr"].as<std::string>()});
      for (const auto& kv : rule["annotations"]) {
        legends.push_back(
            {"alerts.yml / " + name, kv.second.as<std::string>()});
      }
    }
  }
  ASSERT_GT(exprs.size(), dashboard_exprs) << "no rules in " << rules_path;

  for (const Expression& e : exprs) ExpectExported(e, exported);
  for (const Expression& l : legends) {
    for (const std::string& label : TemplateLabels(l.expr)) {
      EXPECT_TRUE(exported.labels.contains(label))
          << l.where << ": template label " << label << " is not exported";
    }
  }

  if (!OnPath("prometheus")) {
    std::cerr << "[ note ] prometheus is not installed: expressions were "
                 "checked for names only, not evaluated\n";
    return;
  }
  YARD_ASSIGN_OR_FAIL(auto prom, PrometheusProcess::Start(
                                     dir(), {{"yard-server", server_addr},
                                             {"yard-worker", worker_addr}}));
  YARD_ASSIGN_OR_FAIL(
      auto up, prom->QueryUntil(
                   "both targets up", "sum(up)",
                   [](auto& r) { return r.size() == 1 && r[0].value == 2; },
                   Scaled(absl::Seconds(30))));
  for (const Expression& e : exprs) {
    const std::string expr = absl::StrReplaceAll(
        e.expr, {{"$__rate_interval", "1m"}, {"$__interval", "15s"}});
    auto r = prom->Query(expr);
    EXPECT_TRUE(r.ok()) << e.where << ": " << r.status();
  }
}

}  // namespace
}  // namespace trainyard::itest
