// WorkerMetrics: per-job series appear on start, follow progress and are
// removed on exit; per-GPU series exist only for GPUs the worker has; the
// exposition passes `promtool check metrics` when promtool is installed.
#include "worker/worker_metrics.h"

#include <prometheus/text_serializer.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "common/test_dir.h"
#include "gtest/gtest.h"

namespace trainyard::worker {
namespace {

namespace pm = prometheus;
using trainyard::v1::JobUpdate;

JobUpdate Started(const std::string& job, int attempt) {
  JobUpdate u;
  u.set_job_id(job);
  u.set_attempt(attempt);
  u.mutable_started()->set_pid(7);
  return u;
}

JobUpdate Progress(const std::string& job, int attempt, int64_t step,
                   double loss) {
  JobUpdate u;
  u.set_job_id(job);
  u.set_attempt(attempt);
  auto* p = u.mutable_trainer()->mutable_progress();
  p->set_step(step);
  p->set_total_steps(100);
  p->set_loss(loss);
  p->set_samples_per_second(1234.5);
  p->set_memory_bytes(1 << 20);
  return u;
}

JobUpdate Exited(const std::string& job, int attempt) {
  JobUpdate u;
  u.set_job_id(job);
  u.set_attempt(attempt);
  u.mutable_exited()->set_exit_code(0);
  return u;
}

// The value of `name` with label job (or gpu) = `label`; NaN when absent.
double Value(const WorkerMetrics& m, const std::string& name,
             const std::string& label_name = "",
             const std::string& label = "") {
  for (const pm::MetricFamily& f : m.Collect()) {
    if (f.name != name) continue;
    for (const pm::ClientMetric& c : f.metric) {
      bool match = label_name.empty();
      for (const auto& l : c.label) {
        if (l.name == label_name && l.value == label) match = true;
      }
      if (match) return c.gauge.value;
    }
  }
  return std::nan("");
}

int SeriesWithJobLabel(const WorkerMetrics& m) {
  int n = 0;
  for (const pm::MetricFamily& f : m.Collect()) {
    for (const pm::ClientMetric& c : f.metric) {
      for (const auto& l : c.label) n += l.name == "job_id";
    }
  }
  return n;
}

std::string Promtool(const std::string& text) {
  TestDir dir;
  const std::string path = dir.Write("worker-metrics.txt", text);
  FILE* p = popen(("promtool check metrics < " + path + " 2>&1").c_str(), "r");
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  const int rc = pclose(p);
  return rc == 0 ? out : "exit " + std::to_string(rc) + ": " + out;
}

TEST(WorkerMetricsTest, JobSeriesLiveExactlyAsLongAsTheJob) {
  WorkerMetrics m(
      {.version = "1.2.3", .devices = {}, .cpu_slots = 2, .sample_gpus = {}});
  EXPECT_EQ(Value(m, "yard_worker_jobs_running"), 0);
  EXPECT_EQ(Value(m, "yard_worker_cpu_slots"), 2);
  EXPECT_EQ(SeriesWithJobLabel(m), 0);
  m.OnReport(Started("j-1", 1));
  EXPECT_EQ(Value(m, "yard_worker_jobs_running"), 1);
  m.OnReport(Progress("j-1", 1, 10, 2.5));
  EXPECT_EQ(Value(m, "yard_job_step", "job_id", "j-1"), 10);
  EXPECT_EQ(Value(m, "yard_job_loss", "job_id", "j-1"), 2.5);
  EXPECT_EQ(Value(m, "yard_job_samples_per_second", "job_id", "j-1"), 1234.5);
  EXPECT_EQ(Value(m, "yard_job_memory_bytes", "job_id", "j-1"), 1 << 20);
  m.OnReport(Progress("j-1", 1, 20, 1.5));
  EXPECT_EQ(Value(m, "yard_job_step", "job_id", "j-1"), 20);
  m.OnReport(Exited("j-1", 1));
  EXPECT_EQ(Value(m, "yard_worker_jobs_running"), 0);
  EXPECT_EQ(SeriesWithJobLabel(m), 0);
  EXPECT_TRUE(std::isnan(Value(m, "yard_job_step", "job_id", "j-1")));
}

TEST(WorkerMetricsTest, ReportsOfUnknownOrRefusedAttemptsAddNothing) {
  WorkerMetrics m(
      {.version = "1", .devices = {}, .cpu_slots = 1, .sample_gpus = {}});
  m.OnReport(Progress("ghost", 3, 5, 1.0));  // never started here
  m.OnReport(Exited("refused", 1));          // refused: exit without start
  EXPECT_EQ(Value(m, "yard_worker_jobs_running"), 0);
  EXPECT_EQ(SeriesWithJobLabel(m), 0);
}

TEST(WorkerMetricsTest, StaleAttemptBesideItsSuccessorExportsOneSeries) {
  WorkerMetrics m(
      {.version = "1", .devices = {}, .cpu_slots = 2, .sample_gpus = {}});
  m.OnReport(Started("j", 1));
  m.OnReport(Started("j", 2));
  m.OnReport(Progress("j", 1, 50, 1.0));
  m.OnReport(Progress("j", 2, 7, 2.0));
  EXPECT_EQ(Value(m, "yard_job_step", "job_id", "j"), 7);
  EXPECT_EQ(SeriesWithJobLabel(m), 6);  // one per family, attempt 2's
  m.OnReport(Exited("j", 2));
  EXPECT_EQ(Value(m, "yard_job_step", "job_id", "j"), 50);
}

TEST(WorkerMetricsTest, NoGpusNoGpuSeries) {
  WorkerMetrics m(
      {.version = "1", .devices = {}, .cpu_slots = 1, .sample_gpus = [] {
         return std::vector<GpuSample>{{.index = 0, .utilization_ratio = 1}};
       }});
  int gpu_families = 0;
  for (const pm::MetricFamily& f : m.Collect()) {
    if (f.name.find("yard_worker_gpu_") == std::string::npos) continue;
    ++gpu_families;  // declared, so dashboards know the name, but empty
    EXPECT_TRUE(f.metric.empty()) << f.name;
  }
  EXPECT_EQ(gpu_families, 5);
  EXPECT_EQ(Value(m, "yard_worker_gpus"), 0);
}

TEST(WorkerMetricsTest, GpuSeriesPerDeviceWithDcgmMeanings) {
  trainyard::v1::Device d0, d1;
  d0.set_index(0);
  d0.set_uuid("GPU-aaaa");
  d0.set_memory_bytes(int64_t{80} << 30);
  d1.set_index(1);
  d1.set_uuid("GPU-bbbb");
  d1.set_memory_bytes(int64_t{80} << 30);
  WorkerMetrics m(
      {.version = "1", .devices = {d0, d1}, .cpu_slots = 1, .sample_gpus = [] {
         // GPU 1 cannot report its temperature.
         return std::vector<GpuSample>{{.index = 0,
                                        .utilization_ratio = 0.75,
                                        .memory_used_bytes = 1e9,
                                        .temperature_celsius = 61,
                                        .power_watts = 350.5},
                                       {.index = 1,
                                        .utilization_ratio = 0,
                                        .memory_used_bytes = 0,
                                        .temperature_celsius = std::nullopt,
                                        .power_watts = 70}};
       }});
  EXPECT_EQ(Value(m, "yard_worker_gpus"), 2);
  EXPECT_EQ(Value(m, "yard_worker_gpu_utilization_ratio", "gpu", "0"), 0.75);
  EXPECT_EQ(Value(m, "yard_worker_gpu_memory_used_bytes", "gpu", "0"), 1e9);
  EXPECT_EQ(Value(m, "yard_worker_gpu_memory_total_bytes", "gpu", "1"),
            double(int64_t{80} << 30));
  EXPECT_EQ(Value(m, "yard_worker_gpu_temperature_celsius", "gpu", "0"), 61);
  EXPECT_TRUE(
      std::isnan(Value(m, "yard_worker_gpu_temperature_celsius", "gpu", "1")));
  EXPECT_EQ(Value(m, "yard_worker_gpu_power_watts", "gpu", "1"), 70);
}

TEST(WorkerMetricsTest, DeviceReadingsInBaseUnits) {
  DeviceReading r;
  r.index = 3;
  r.memory_used_bytes = int64_t{5} << 30;
  r.utilization_percent = 42;
  r.power_milliwatts = 350500;
  const GpuSample s = GpuSampleOf(r);
  EXPECT_EQ(s.index, 3);
  EXPECT_DOUBLE_EQ(*s.utilization_ratio, 0.42);
  EXPECT_EQ(*s.memory_used_bytes, double(int64_t{5} << 30));
  EXPECT_DOUBLE_EQ(*s.power_watts, 350.5);
  EXPECT_FALSE(s.temperature_celsius.has_value());  // unknown stays unknown

  trainyard::v1::Device d;
  d.set_index(3);
  d.set_uuid("GPU-cccc");
  d.set_memory_bytes(int64_t{80} << 30);
  WorkerMetrics m(
      {.version = "1", .devices = {d}, .cpu_slots = 1, .sample_gpus = [r] {
         return std::vector<GpuSample>{GpuSampleOf(r)};
       }});
  EXPECT_DOUBLE_EQ(
      Value(m, "yard_worker_gpu_utilization_ratio", "uuid", "GPU-cccc"), 0.42);
  EXPECT_TRUE(
      std::isnan(Value(m, "yard_worker_gpu_temperature_celsius", "gpu", "3")));
}

TEST(WorkerMetricsTest, ExpositionPassesPromtool) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool is not installed (scripts/install-deps.sh "
                    "installs it with the prometheus package)";
  }
  trainyard::v1::Device d0;
  d0.set_index(0);
  d0.set_uuid("GPU-aaaa");
  d0.set_memory_bytes(1 << 30);
  WorkerMetrics m(
      {.version = "1", .devices = {d0}, .cpu_slots = 1, .sample_gpus = [] {
         return std::vector<GpuSample>{{.index = 0,
                                        .utilization_ratio = 0.5,
                                        .memory_used_bytes = 1e8,
                                        .temperature_celsius = 50,
                                        .power_watts = 100}};
       }});
  m.OnReport(Started("j-1", 1));
  m.OnReport(Progress("j-1", 1, 10, 2.5));
  std::ostringstream text;
  pm::TextSerializer().Serialize(text, m.Collect());
  EXPECT_EQ(Promtool(text.str()), "") << text.str();
}

}  // namespace
}  // namespace trainyard::worker
