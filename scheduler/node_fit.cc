#include "scheduler/node_fit.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "scheduler/gpu_models.h"

namespace trainyard::scheduler {

bool GpuFitsWhenIdle(const GpuCapacity& gpu, const GpuDemand& demand) {
  if (!ModelAllowed(gpu, demand)) return false;
  const GpuDemand d = OnGpu(gpu, demand);
  return (d.whole && gpu.memory_bytes == 0) ||
         gpu.memory_bytes >= d.memory_bytes;
}

bool HostFitsWhenIdle(const WorkerCapacity& w, const PendingJob& job) {
  if (job.gpus == 0 && w.cpu_slots < job.cpu_slots) return false;
  return w.cpu_milli >= job.cpu_milli && w.memory_bytes >= job.memory_bytes;
}

bool FitsNow(const WorkerCapacity& w, const PendingJob& job,
             const GpuDemand& demand) {
  if (static_cast<int32_t>(w.devices.size()) < job.gpus) return false;
  if (!HostFits(w, job)) return false;
  int32_t fitting = 0;
  for (const GpuCapacity& g : w.devices) {
    if (fitting >= job.gpus) break;
    if (GpuFits(g, demand)) ++fitting;
  }
  return fitting >= job.gpus;
}

bool FitsWhenIdle(const WorkerCapacity& w, const PendingJob& job,
                  const GpuDemand& demand) {
  if (!HostFitsWhenIdle(w, job)) return false;
  int32_t fitting = 0;
  for (const GpuCapacity& g : w.devices) {
    if (GpuFitsWhenIdle(g, demand)) ++fitting;
  }
  return fitting >= job.gpus;
}

void Take(WorkerCapacity& w, const PendingJob& job, const GpuDemand& demand,
          const std::vector<size_t>& device_positions) {
  if (job.gpus == 0) w.free_cpu_slots -= job.cpu_slots;
  w.free_cpu_milli -= job.cpu_milli;
  w.free_memory_bytes -= job.memory_bytes;
  for (size_t pos : device_positions) {
    GpuCapacity& g = w.devices[pos];
    const GpuDemand d = OnGpu(g, demand);
    if (d.whole) {
      g.free_compute_milli = 0;
      g.free_memory_bytes = 0;
    } else {
      g.free_compute_milli -= d.compute_milli;
      g.free_memory_bytes -= d.memory_bytes;
    }
  }
}

PendingJob PartOf(const PendingJob& job, int32_t ranks) {
  const int32_t all = RanksOf(job);
  if (ranks >= all || all <= 0) return job;
  PendingJob part = job;
  if (job.gpus > 0) {
    part.gpus = ranks;
  } else {
    part.cpu_slots = ranks;
  }
  // Rounded up so the parts never give less than the job asks in all.
  const auto share = [&](int64_t total) {
    return total / all * ranks + (total % all * ranks + all - 1) / all;
  };
  part.cpu_milli = share(job.cpu_milli);
  part.memory_bytes = share(job.memory_bytes);
  return part;
}

int32_t RanksFitting(const WorkerCapacity& w, const PendingJob& job,
                     const GpuDemand& demand, int32_t limit, bool when_idle) {
  int32_t bound = limit;
  if (job.gpus > 0) {
    int32_t gpus = 0;
    for (const GpuCapacity& g : w.devices) {
      gpus += when_idle ? GpuFitsWhenIdle(g, demand) : GpuFits(g, demand);
    }
    bound = std::min(bound, gpus);
  } else {
    bound = std::min(bound, when_idle ? w.cpu_slots : w.free_cpu_slots);
  }
  // Fewer ranks ask less of the host, so the first count that fits is the
  // most.
  for (int32_t r = bound; r > 0; --r) {
    const PendingJob part = PartOf(job, r);
    if (when_idle ? HostFitsWhenIdle(w, part) : HostFits(w, part)) return r;
  }
  return 0;
}

int64_t FreeGpuMilli(const WorkerCapacity& w) {
  int64_t sum = 0;
  for (const GpuCapacity& g : w.devices) sum += g.free_compute_milli;
  return sum;
}

namespace {

// `value / unit` with at most one decimal ("16", "2.5"); plain StrCat, as
// this runs once per waiting job shape in every pass.
std::string OneDecimal(int64_t value, int64_t unit) {
  // Whole units and the rest apart, so that no value overflows.
  const int64_t tenths =
      value / unit * 10 + (value % unit * 10 + unit / 2) / unit;
  if (tenths % 10 == 0) return absl::StrCat(tenths / 10);
  return absl::StrCat(tenths / 10, ".", tenths % 10);
}

std::string Bytes(int64_t b) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  if (b >= (int64_t{1} << 30)) return OneDecimal(b, kMiB * 1024) + " GiB";
  return OneDecimal(b, kMiB) + " MiB";
}

std::string HostPart(const PendingJob& job) {
  std::string out;
  if (job.cpu_milli > 0) {
    absl::StrAppend(&out, OneDecimal(job.cpu_milli, 1000), " CPUs");
  }
  if (job.memory_bytes > 0) {
    absl::StrAppend(&out, out.empty() ? "" : " and ", Bytes(job.memory_bytes),
                    " host memory");
  }
  return out;
}

}  // namespace

std::string DescribeNeed(const PendingJob& job, const GpuDemand& demand) {
  std::string out;
  const char* each = job.gpus == 1 ? "" : " each";
  if (job.gpus == 0) {
    if (job.cpu_slots > 0) {
      out = job.cpu_slots == 1 ? std::string("a CPU slot")
                               : absl::StrCat(job.cpu_slots, " CPU slots");
    }
  } else if (demand.estimated) {
    // "1 GPU with 12 GiB free (whole if it has under 24 GiB or is not
    // shared)"
    out = absl::StrCat(job.gpus, job.gpus == 1 ? " GPU with " : " GPUs with ",
                       Bytes(demand.memory_bytes));
    if (demand.compute_milli > 0) {
      absl::StrAppend(&out, " and ", demand.compute_milli, " milli-GPU");
    }
    const int64_t twice =
        std::min(demand.memory_bytes, std::numeric_limits<int64_t>::max() / 2) *
        2;
    absl::StrAppend(
        &out, " free", each, " (whole if ",
        job.gpus == 1 ? "it has" : "they have", " under ", Bytes(twice),
        job.gpus == 1 ? " or is not shared)" : " or are not shared)");
  } else if (demand.whole) {
    out = absl::StrCat(job.gpus, job.gpus == 1 ? " whole GPU" : " whole GPUs");
    if (demand.memory_bytes > 0) {
      absl::StrAppend(&out, " with ", Bytes(demand.memory_bytes), each);
    }
  } else {
    out = absl::StrCat(job.gpus, job.gpus == 1 ? " GPU with " : " GPUs with ",
                       Bytes(demand.memory_bytes), " and ",
                       demand.compute_milli, " milli-GPU free", each);
  }
  if (job.gpus > 0 && !job.gpu_models.empty()) {
    absl::StrAppend(&out, " of model ", DescribeGpuModels(job.gpu_models));
  }
  const std::string host = HostPart(job);
  if (!host.empty()) absl::StrAppend(&out, out.empty() ? "" : ", ", host);
  if (RanksOf(job) > 1 && job.max_nodes != 1) {
    absl::StrAppend(&out, " on ",
                    job.max_nodes <= 0
                        ? std::string("any number of")
                        : absl::StrCat("at most ", job.max_nodes),
                    " nodes");
  } else if (job.gpus > 1) {
    absl::StrAppend(&out, " on one node");
  }
  return out;
}

}  // namespace trainyard::scheduler
