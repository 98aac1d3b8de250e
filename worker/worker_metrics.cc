#include "worker/worker_metrics.h"

#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"

namespace trainyard::worker {
namespace {

namespace pm = prometheus;
using Labels = std::vector<pm::ClientMetric::Label>;

pm::MetricFamily Gauge(std::string name, std::string help) {
  pm::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = pm::MetricType::Gauge;
  return f;
}

void Add(pm::MetricFamily& f, double value, Labels labels = {}) {
  pm::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  f.metric.push_back(std::move(m));
}

// Every family is exported, with no samples when there is nothing to
// measure (no GPUs, no jobs): its HELP and TYPE still tell scrapers and
// dashboards that the name exists, and no series holds a made-up value.
void Keep(std::vector<pm::MetricFamily>& out, pm::MetricFamily f) {
  out.push_back(std::move(f));
}

}  // namespace

GpuSample GpuSampleOf(const DeviceReading& r) {
  GpuSample s;
  s.index = r.index;
  if (r.utilization_percent) {
    s.utilization_ratio = *r.utilization_percent / 100.0;
  }
  if (r.memory_used_bytes) {
    s.memory_used_bytes = static_cast<double>(*r.memory_used_bytes);
  }
  if (r.temperature_celsius) s.temperature_celsius = *r.temperature_celsius;
  if (r.power_milliwatts) s.power_watts = *r.power_milliwatts / 1000.0;
  return s;
}

WorkerMetrics::WorkerMetrics(WorkerMetricsOptions options)
    : options_(std::move(options)) {}

void WorkerMetrics::OnReport(const trainyard::v1::JobUpdate& update) {
  const Key key{update.job_id(), update.attempt()};
  absl::MutexLock lock(&mu_);
  switch (update.update_case()) {
    case trainyard::v1::JobUpdate::kStarted:
      jobs_[key].job_id = update.job_id();
      return;
    case trainyard::v1::JobUpdate::kExited:
      jobs_.erase(key);
      return;
    case trainyard::v1::JobUpdate::kTrainer:
      break;
    default:
      return;
  }
  auto it = jobs_.find(key);
  if (it == jobs_.end()) return;  // no start seen: nothing to update
  JobSeries& j = it->second;
  const trainyard::v1::TrainerEvent& e = update.trainer();
  if (e.has_started()) {
    j.step = static_cast<double>(e.started().start_step());
    j.total_steps = static_cast<double>(e.started().total_steps());
  } else if (e.has_progress()) {
    const trainyard::v1::TrainProgress& p = e.progress();
    j.step = static_cast<double>(p.step());
    j.total_steps = static_cast<double>(p.total_steps());
    j.loss = p.loss();
    j.samples_per_second = p.samples_per_second();
    j.tokens_per_second = p.tokens_per_second();
    j.memory_bytes = static_cast<double>(p.memory_bytes());
  } else if (e.has_finished()) {
    j.step = static_cast<double>(e.finished().step());
  } else if (e.has_interrupted()) {
    j.step = static_cast<double>(e.interrupted().step());
  }
}

std::vector<pm::MetricFamily> WorkerMetrics::Collect() const {
  std::vector<pm::MetricFamily> out;
  pm::MetricFamily info =
      Gauge("yard_worker_build_info", "The yard-worker version; always 1.");
  Add(info, 1, {{"version", options_.version}});
  out.push_back(std::move(info));
  pm::MetricFamily slots =
      Gauge("yard_worker_cpu_slots", "CPU job slots of this worker (count).");
  Add(slots, options_.cpu_slots);
  out.push_back(std::move(slots));
  pm::MetricFamily gpus =
      Gauge("yard_worker_gpus", "GPUs this worker owns (count).");
  Add(gpus, static_cast<double>(options_.devices.size()));
  out.push_back(std::move(gpus));
  CollectGpus(out);
  CollectJobs(out);
  return out;
}

void WorkerMetrics::CollectGpus(std::vector<pm::MetricFamily>& out) const {
  std::map<int32_t, GpuSample> samples;
  if (options_.sample_gpus && !options_.devices.empty()) {
    for (GpuSample& s : options_.sample_gpus()) samples[s.index] = s;
  }
  pm::MetricFamily util = Gauge(
      "yard_worker_gpu_utilization_ratio",
      "Fraction of the last sample period in which one or more kernels ran "
      "on the GPU, as DCGM_FI_DEV_GPU_UTIL / 100 (ratio).");
  pm::MetricFamily used =
      Gauge("yard_worker_gpu_memory_used_bytes",
            "GPU framebuffer memory in use, as DCGM_FI_DEV_FB_USED (bytes).");
  pm::MetricFamily total =
      Gauge("yard_worker_gpu_memory_total_bytes",
            "GPU framebuffer memory, as DCGM_FI_DEV_FB_TOTAL (bytes).");
  pm::MetricFamily temp =
      Gauge("yard_worker_gpu_temperature_celsius",
            "GPU die temperature, as DCGM_FI_DEV_GPU_TEMP (degrees Celsius).");
  pm::MetricFamily power =
      Gauge("yard_worker_gpu_power_watts",
            "GPU power draw, as DCGM_FI_DEV_POWER_USAGE (watts).");
  for (const trainyard::v1::Device& d : options_.devices) {
    const Labels labels = {{"gpu", absl::StrCat(d.index())},
                           {"uuid", d.uuid()}};
    Add(total, static_cast<double>(d.memory_bytes()), labels);
    auto it = samples.find(d.index());
    if (it == samples.end()) continue;
    const GpuSample& s = it->second;
    if (s.utilization_ratio) Add(util, *s.utilization_ratio, labels);
    if (s.memory_used_bytes) Add(used, *s.memory_used_bytes, labels);
    if (s.temperature_celsius) Add(temp, *s.temperature_celsius, labels);
    if (s.power_watts) Add(power, *s.power_watts, labels);
  }
  Keep(out, std::move(util));
  Keep(out, std::move(used));
  Keep(out, std::move(total));
  Keep(out, std::move(temp));
  Keep(out, std::move(power));
}

void WorkerMetrics::CollectJobs(std::vector<pm::MetricFamily>& out) const {
  pm::MetricFamily running = Gauge("yard_worker_jobs_running",
                                   "Jobs running here (count; a job of several "
                                   "ranks on this worker counts once).");
  pm::MetricFamily step = Gauge("yard_job_step",
                                "Optimizer steps the running job has completed "
                                "(count).");
  pm::MetricFamily steps = Gauge("yard_job_total_steps",
                                 "Steps the running job will take in all "
                                 "(count).");
  pm::MetricFamily loss =
      Gauge("yard_job_loss",
            "Mean training loss over the job's last progress "
            "period (nats).");
  pm::MetricFamily samples =
      Gauge("yard_job_samples_per_second",
            "Training throughput of the running job (samples per second).");
  pm::MetricFamily tokens =
      Gauge("yard_job_tokens_per_second",
            "Training throughput of the running job; 0 for non-token models "
            "(tokens per second).");
  pm::MetricFamily memory = Gauge("yard_job_memory_bytes",
                                  "Peak engine memory of the running job "
                                  "(bytes).");
  absl::MutexLock lock(&mu_);
  Add(running, static_cast<double>(jobs_.size()));
  for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
    // A stale attempt still being reaped beside its successor: export the
    // newest only, so no two series share a label set.
    if (auto next = std::next(it);
        next != jobs_.end() && next->first.first == it->first.first) {
      continue;
    }
    const JobSeries& j = it->second;
    const Labels labels = {{"job_id", j.job_id}};
    if (j.step) Add(step, *j.step, labels);
    if (j.total_steps) Add(steps, *j.total_steps, labels);
    if (j.loss) Add(loss, *j.loss, labels);
    if (j.samples_per_second) Add(samples, *j.samples_per_second, labels);
    if (j.tokens_per_second) Add(tokens, *j.tokens_per_second, labels);
    if (j.memory_bytes) Add(memory, *j.memory_bytes, labels);
  }
  out.push_back(std::move(running));
  Keep(out, std::move(step));
  Keep(out, std::move(steps));
  Keep(out, std::move(loss));
  Keep(out, std::move(samples));
  Keep(out, std::move(tokens));
  Keep(out, std::move(memory));
}

}  // namespace trainyard::worker
