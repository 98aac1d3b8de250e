#include "scheduler/cluster_snapshot.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "scheduler/gpu_models.h"

namespace trainyard::scheduler {
namespace {

absl::Status Bad(const std::string& what, const std::string& id,
                 const std::string& detail) {
  return absl::InvalidArgumentError(absl::StrCat(what, " ", id, ": ", detail));
}

absl::Status CheckRange(const std::string& id, const char* name, int64_t free,
                        int64_t total) {
  if (total < 0 || free < 0 || free > total) {
    return Bad(
        "worker", id,
        absl::StrCat("free ", name, " ", free, " outside [0, ", total, "]"));
  }
  return absl::OkStatus();
}

// Devices from the index lists, for workers described only by them.
absl::Status DevicesFromIndices(WorkerCapacity& w) {
  std::set<int32_t> all;
  for (int32_t g : w.gpus) {
    if (g < 0 || !all.insert(g).second) {
      return Bad("worker", w.id, absl::StrCat("bad or repeated gpu index ", g));
    }
  }
  std::set<int32_t> free;
  for (int32_t g : w.free_gpus) {
    if (!all.contains(g) || !free.insert(g).second) {
      return Bad("worker", w.id,
                 absl::StrCat("free gpu ", g, " is unknown or repeated"));
    }
  }
  for (int32_t g : all) {
    w.devices.push_back({g, 0, 0, free.contains(g) ? kWholeGpuMilli : 0});
  }
  return absl::OkStatus();
}

absl::Status CheckDevices(WorkerCapacity& w) {
  std::sort(w.devices.begin(), w.devices.end(),
            [](const GpuCapacity& a, const GpuCapacity& b) {
              return a.index < b.index;
            });
  w.gpus.clear();
  w.free_gpus.clear();
  for (size_t i = 0; i < w.devices.size(); ++i) {
    const GpuCapacity& d = w.devices[i];
    if (d.index < 0 || (i > 0 && w.devices[i - 1].index == d.index)) {
      return Bad("worker", w.id,
                 absl::StrCat("bad or repeated gpu index ", d.index));
    }
    RETURN_IF_ERROR(
        CheckRange(w.id, "gpu memory", d.free_memory_bytes, d.memory_bytes));
    RETURN_IF_ERROR(
        CheckRange(w.id, "gpu compute", d.free_compute_milli, kWholeGpuMilli));
    w.gpus.push_back(d.index);
    if (d.wholly_free()) w.free_gpus.push_back(d.index);
  }
  return absl::OkStatus();
}

absl::Status CheckWorker(WorkerCapacity& w) {
  if (w.id.empty()) return absl::InvalidArgumentError("worker: empty id");
  RETURN_IF_ERROR(CheckRange(w.id, "cpu_slots", w.free_cpu_slots, w.cpu_slots));
  RETURN_IF_ERROR(CheckRange(w.id, "cpu_milli", w.free_cpu_milli, w.cpu_milli));
  RETURN_IF_ERROR(
      CheckRange(w.id, "memory_bytes", w.free_memory_bytes, w.memory_bytes));
  if (w.devices.empty()) RETURN_IF_ERROR(DevicesFromIndices(w));
  return CheckDevices(w);
}

absl::Status CheckJob(const PendingJob& j) {
  if (j.id.empty()) return absl::InvalidArgumentError("job: empty id");
  if (j.gpus < 0 || j.cpu_slots < 0 || j.cpu_milli < 0 || j.memory_bytes < 0 ||
      j.gpu_memory_bytes < 0) {
    return Bad("job", j.id, "negative resource request");
  }
  if (j.gpus == 0 && j.cpu_slots < 1 && j.cpu_milli < 1) {
    return Bad("job", j.id, "a job without GPUs needs a CPU slot or CPU");
  }
  if (j.gpus == 0) return absl::OkStatus();
  // With an estimate, 0 asks for a share in proportion to the memory.
  const int32_t least = j.gpu_memory_estimated ? 0 : 1;
  if (j.gpu_compute_milli < least || j.gpu_compute_milli > kWholeGpuMilli) {
    return Bad("job", j.id,
               absl::StrCat("gpu_compute_milli ", j.gpu_compute_milli,
                            " outside [", least, ", ", kWholeGpuMilli, "]"));
  }
  if (j.gpu_memory_estimated && j.gpu_memory_bytes == 0) {
    return Bad("job", j.id, "a memory estimate of 0 bytes");
  }
  return absl::OkStatus();
}

// What a running job holds on one node (a RunningJob's own worker, or a
// RunningPart) is on that worker and in range. `what` prefixes the worker
// in messages.
template <typename Holding>
absl::Status CheckHolding(const std::string& job_id, const Holding& h,
                          const WorkerCapacity* w, const char* what) {
  if (w == nullptr) {
    return Bad("running job", job_id,
               absl::StrCat(what, "unknown worker \"", h.worker_id, "\""));
  }
  for (int32_t g : h.gpu_indices) {
    if (std::find(w->gpus.begin(), w->gpus.end(), g) == w->gpus.end()) {
      return Bad("running job", job_id,
                 absl::StrCat("GPU ", g, " is not on worker ", w->id));
    }
  }
  if (h.gpu_compute_milli < 0 || h.gpu_compute_milli > kWholeGpuMilli ||
      h.gpu_memory_bytes < 0 || h.cpu_slots < 0 || h.cpu_milli < 0 ||
      h.memory_bytes < 0) {
    return Bad(
        "running job", job_id,
        absl::StrCat("negative or out-of-range holding on worker ", w->id));
  }
  return absl::OkStatus();
}

absl::Status CheckRunning(const RunningJob& r, const ClusterSnapshot& s) {
  if (r.id.empty()) return absl::InvalidArgumentError("running job: empty id");
  RETURN_IF_ERROR(CheckHolding(r.id, r, s.FindWorker(r.worker_id), ""));
  for (const RunningPart& part : r.more_parts) {
    RETURN_IF_ERROR(
        CheckHolding(r.id, part, s.FindWorker(part.worker_id), "part on "));
  }
  if (!(r.work_since_checkpoint >= 0)) {
    return Bad("running job", r.id, "work_since_checkpoint is not >= 0");
  }
  return absl::OkStatus();
}

// The mask of the name classes (see Create) a job asking `models` may use.
uint64_t MaskOf(const std::vector<std::string>& models,
                const std::vector<std::string>& names) {
  if (models.empty()) return ~uint64_t{0};
  constexpr size_t kOverflow = 63;
  uint64_t mask = 0;
  bool all_past = true;  // every name sharing the overflow bit is allowed
  for (size_t i = 0; i < names.size(); ++i) {
    const bool ok = AllowsGpu(models, names[i]);
    if (i < kOverflow) {
      if (ok) mask |= uint64_t{1} << i;
    } else if (!ok) {
      all_past = false;
    }
  }
  if (names.size() > kOverflow && all_past) mask |= uint64_t{1} << kOverflow;
  return mask;
}

// Gives each GPU the bit of its name and each job naming models its mask;
// nothing to do (every bit 1, every mask full) when no job names models.
void AssignModelBits(std::vector<WorkerCapacity>& workers,
                     std::vector<PendingJob>& pending,
                     std::vector<TaskClass>& workload) {
  const auto names_models = [](const PendingJob& j) {
    return !j.gpu_models.empty();
  };
  if (std::none_of(pending.begin(), pending.end(), names_models) &&
      std::none_of(workload.begin(), workload.end(),
                   [&](const TaskClass& c) { return names_models(c.shape); })) {
    return;
  }
  std::vector<std::string> names;
  absl::flat_hash_map<std::string, uint64_t> bit_of;
  for (WorkerCapacity& w : workers) {
    for (GpuCapacity& g : w.devices) {
      auto [it, added] = bit_of.try_emplace(g.name, 0);
      if (added) {
        it->second = uint64_t{1} << std::min<size_t>(names.size(), 63);
        names.push_back(g.name);
      }
      g.model_bit = it->second;
    }
  }
  // A workload may list thousands of tasks naming the same few model lists.
  absl::flat_hash_map<std::vector<std::string>, uint64_t> mask_of;
  const auto assign = [&](PendingJob& j) {
    if (j.gpu_models.empty()) return;
    auto [it, added] = mask_of.try_emplace(j.gpu_models, 0);
    if (added) it->second = MaskOf(j.gpu_models, names);
    j.gpu_model_mask = it->second;
  };
  for (PendingJob& j : pending) assign(j);
  for (TaskClass& c : workload) assign(c.shape);
}

}  // namespace

absl::StatusOr<ClusterSnapshot> ClusterSnapshot::Create(
    std::vector<WorkerCapacity> workers, std::vector<PendingJob> pending,
    std::vector<TaskClass> workload, std::vector<RunningJob> running,
    absl::flat_hash_map<std::string, double> tenant_weights,
    AvoidedWorkers avoided, PreemptionHolds holds) {
  ClusterSnapshot s;
  s.avoided_ = std::move(avoided);
  s.holds_ = std::move(holds);
  for (size_t i = 0; i < workers.size(); ++i) {
    RETURN_IF_ERROR(CheckWorker(workers[i]));
    if (!s.worker_at_.emplace(workers[i].id, i).second) {
      return Bad("worker", workers[i].id, "repeated id");
    }
  }
  for (size_t i = 0; i < pending.size(); ++i) {
    RETURN_IF_ERROR(CheckJob(pending[i]));
    if (!s.job_at_.emplace(pending[i].id, i).second) {
      return Bad("job", pending[i].id, "repeated id");
    }
  }
  for (const TaskClass& c : workload) {
    if (!(c.weight > 0)) {
      return absl::InvalidArgumentError("workload: a class weight is not > 0");
    }
  }
  AssignModelBits(workers, pending, workload);
  s.workers_ = std::move(workers);
  std::set<std::string> running_ids;
  for (const RunningJob& r : running) {
    RETURN_IF_ERROR(CheckRunning(r, s));
    if (!running_ids.insert(r.id).second || s.job_at_.contains(r.id)) {
      return Bad("running job", r.id, "repeated id");
    }
  }
  for (const auto& [tenant, weight] : tenant_weights) {
    if (!(weight > 0)) {
      return Bad("tenant", tenant, "fair-share weight is not > 0");
    }
  }
  s.pending_ = std::move(pending);
  s.workload_ = std::move(workload);
  s.running_ = std::move(running);
  s.tenant_weights_ = std::move(tenant_weights);
  return s;
}

double ClusterSnapshot::TenantWeight(const std::string& tenant) const {
  auto it = tenant_weights_.find(tenant);
  return it == tenant_weights_.end() ? 1.0 : it->second;
}

const WorkerCapacity* ClusterSnapshot::FindWorker(const std::string& id) const {
  auto it = worker_at_.find(id);
  return it == worker_at_.end() ? nullptr : &workers_[it->second];
}

const PendingJob* ClusterSnapshot::FindJob(const std::string& id) const {
  auto it = job_at_.find(id);
  return it == job_at_.end() ? nullptr : &pending_[it->second];
}

}  // namespace trainyard::scheduler
