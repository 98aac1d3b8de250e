#include "scheduler/cluster_snapshot.h"

#include <algorithm>
#include <limits>
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
    if (d.name_id > w.gpu_names.size()) {
      return Bad("worker", w.id,
                 absl::StrCat("gpu ", d.index, " has name_id ", d.name_id,
                              " past its ", w.gpu_names.size(), " gpu_names"));
    }
    w.gpus.push_back(d.index);
    if (d.wholly_free()) w.free_gpus.push_back(d.index);
  }
  return absl::OkStatus();
}

absl::Status CheckWorker(WorkerCapacity& w) {
  if (w.id.empty()) return absl::InvalidArgumentError("worker: empty id");
  if (w.gpu_names.size() > std::numeric_limits<uint16_t>::max()) {
    return Bad("worker", w.id, "more than 65535 gpu_names");
  }
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

// GPUs share a slot when every list of models treats their names alike
// (see Create); the kinds from the 64th on share the last slot.
constexpr size_t kSharedSlot = 63;

// Which of `lists` allow `name`, one '1' or '0' per list: GPUs with equal
// patterns are of one kind.
std::string KindOf(const std::vector<const std::vector<std::string>*>& lists,
                   const std::string& name) {
  std::string pattern(lists.size(), '0');
  for (size_t i = 0; i < lists.size(); ++i) {
    if (AllowsGpu(*lists[i], name)) pattern[i] = '1';
  }
  return pattern;
}

// The mask of list `list` over `kinds` (KindOf patterns, in slot order): a
// kind past the shared slot counts only if the list allows all of them.
uint64_t MaskOf(size_t list, const std::vector<std::string>& kinds) {
  uint64_t mask = 0;
  bool all_shared = true;
  for (size_t k = 0; k < kinds.size(); ++k) {
    const bool allowed = kinds[k][list] == '1';
    if (k < kSharedSlot) {
      if (allowed) mask |= uint64_t{1} << k;
    } else if (!allowed) {
      all_shared = false;
    }
  }
  if (kinds.size() > kSharedSlot && all_shared) mask |= uint64_t{1} << 63;
  return mask;
}

// Gives each GPU the slot of its kind and each job naming models its mask;
// nothing to do (every slot 0, every mask full) when no job names models.
void AssignModelSlots(std::vector<WorkerCapacity>& workers,
                      std::vector<PendingJob>& pending,
                      std::vector<TaskClass>& workload) {
  // The distinct lists (a workload may list thousands of tasks naming the
  // same few), each with its position.
  absl::flat_hash_map<std::vector<std::string>, size_t> list_at;
  std::vector<const std::vector<std::string>*> lists;
  const auto note = [&](PendingJob& j) {
    j.gpu_model_mask = ~uint64_t{0};  // not one a caller left there
    if (j.gpu_models.empty()) return;
    if (list_at.try_emplace(j.gpu_models, lists.size()).second) {
      lists.push_back(&j.gpu_models);
    }
  };
  for (PendingJob& j : pending) note(j);
  for (TaskClass& c : workload) note(c.shape);
  if (lists.empty()) return;
  absl::flat_hash_map<std::string, uint8_t> slot_of_name;
  absl::flat_hash_map<std::string, size_t> kind_at;  // by KindOf pattern
  std::vector<std::string> kinds;
  for (WorkerCapacity& w : workers) {
    for (GpuCapacity& g : w.devices) {
      const std::string& name = w.GpuName(g);
      auto [slot, added] = slot_of_name.try_emplace(name, 0);
      if (added) {
        auto [kind, new_kind] = kind_at.try_emplace(KindOf(lists, name), 0);
        if (new_kind) {
          kind->second = kinds.size();
          kinds.push_back(kind->first);
        }
        slot->second =
            static_cast<uint8_t>(std::min(kind->second, kSharedSlot));
      }
      g.model_slot = slot->second;
    }
  }
  std::vector<uint64_t> mask_of(lists.size());
  for (size_t i = 0; i < lists.size(); ++i) mask_of[i] = MaskOf(i, kinds);
  const auto assign = [&](PendingJob& j) {
    if (!j.gpu_models.empty()) {
      j.gpu_model_mask = mask_of[list_at.find(j.gpu_models)->second];
    }
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
  AssignModelSlots(workers, pending, workload);
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

const std::string& WorkerCapacity::GpuName(const GpuCapacity& gpu) const {
  static const std::string* const kUnknown = new std::string();
  return gpu.name_id == 0 || gpu.name_id > gpu_names.size()
             ? *kUnknown
             : gpu_names[gpu.name_id - 1];
}

uint16_t WorkerCapacity::GpuNameId(absl::string_view name) {
  if (name.empty()) return 0;
  auto it = std::find(gpu_names.begin(), gpu_names.end(), name);
  if (it == gpu_names.end()) {
    it = gpu_names.emplace(gpu_names.end(), name.data(), name.size());
  }
  return static_cast<uint16_t>(it - gpu_names.begin() + 1);
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
