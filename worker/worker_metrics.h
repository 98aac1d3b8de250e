// WorkerMetrics: yard-worker's Prometheus metrics (DESIGN.md §8), built at
// scrape time from what the worker knows:
//  - per GPU (labels gpu = device index, uuid): utilisation, memory used
//    and total, temperature, power, with the meanings of NVIDIA DCGM's
//    DCGM_FI_DEV_GPU_UTIL, _FB_USED, _FB_TOTAL, _GPU_TEMP and _POWER_USAGE
//    converted to base units. Values come from a GpuSampler; a worker with
//    no GPUs exports these families with no series;
//  - the node: jobs running, CPU slots, GPUs, build info;
//  - per running job (label job_id: `job` is the scrape job's label in
//    Prometheus): step, total steps, loss, samples/s, tokens/s, engine
//    memory, from the job's progress reports.
//    A job's series appear when it starts and are removed when it exits,
//    so job ids never pile up on a long-lived series.
//
// Thread-safe: OnReport comes from the jobs' threads, Collect from scrapes.
#ifndef TRAINYARD_WORKER_WORKER_METRICS_H_
#define TRAINYARD_WORKER_WORKER_METRICS_H_

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "trainyard/v1/cluster.pb.h"
#include "trainyard/v1/worker.pb.h"
#include "worker/device_discovery.h"

namespace trainyard::worker {

// One reading of one GPU; a field the device cannot report stays empty and
// its series is left out.
struct GpuSample {
  int32_t index = 0;
  std::optional<double> utilization_ratio;    // DCGM GPU_UTIL / 100
  std::optional<double> memory_used_bytes;    // DCGM FB_USED, in bytes
  std::optional<double> temperature_celsius;  // DCGM GPU_TEMP
  std::optional<double> power_watts;          // DCGM POWER_USAGE
};
// Reads every GPU (the worker's DeviceTelemetry cache). Called on scrape
// threads.
using GpuSampler = std::function<std::vector<GpuSample>()>;

// A device reading in the metrics' base units (ratio, bytes, watts).
GpuSample GpuSampleOf(const DeviceReading& reading);

struct WorkerMetricsOptions {
  std::string version;
  std::vector<trainyard::v1::Device> devices;  // from device discovery
  int cpu_slots = 0;
  GpuSampler sample_gpus;  // empty: only memory totals per GPU
};

class WorkerMetrics : public prometheus::Collectable {
 public:
  explicit WorkerMetrics(WorkerMetricsOptions options);

  // A job report on its way to the server: started adds the job's series,
  // trainer progress updates them, exited removes them.
  void OnReport(const trainyard::v1::JobUpdate& update);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  struct JobSeries {
    std::string job_id;
    std::optional<double> step, total_steps, loss, samples_per_second,
        tokens_per_second, memory_bytes;
  };
  using Key = std::pair<std::string, int32_t>;  // job id, attempt

  void CollectGpus(std::vector<prometheus::MetricFamily>& out) const;
  void CollectJobs(std::vector<prometheus::MetricFamily>& out) const;

  const WorkerMetricsOptions options_;
  mutable absl::Mutex mu_;
  std::map<Key, JobSeries> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard::worker

#endif  // TRAINYARD_WORKER_WORKER_METRICS_H_
