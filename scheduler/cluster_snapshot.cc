#include "scheduler/cluster_snapshot.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace trainyard::scheduler {
namespace {

absl::Status CheckWorker(WorkerCapacity& w) {
  if (w.id.empty()) return absl::InvalidArgumentError("worker: empty id");
  if (w.cpu_slots < 0 || w.free_cpu_slots < 0 ||
      w.free_cpu_slots > w.cpu_slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", w.id, ": free_cpu_slots ", w.free_cpu_slots,
                     " outside [0, cpu_slots ", w.cpu_slots, "]"));
  }
  std::set<int32_t> all;
  for (int32_t g : w.gpus) {
    if (g < 0 || !all.insert(g).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker ", w.id, ": bad or repeated gpu index ", g));
    }
  }
  std::set<int32_t> free;
  for (int32_t g : w.free_gpus) {
    if (!all.contains(g) || !free.insert(g).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "worker ", w.id, ": free gpu ", g, " is unknown or repeated"));
    }
  }
  std::sort(w.free_gpus.begin(), w.free_gpus.end());
  return absl::OkStatus();
}

absl::Status CheckJob(const PendingJob& j) {
  if (j.id.empty()) return absl::InvalidArgumentError("job: empty id");
  if (j.gpus < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", j.id, ": negative gpus ", j.gpus));
  }
  if (j.gpus == 0 && j.cpu_slots < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", j.id, ": a CPU job needs at least one slot"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClusterSnapshot> ClusterSnapshot::Create(
    std::vector<WorkerCapacity> workers, std::vector<PendingJob> pending) {
  std::set<std::string> ids;
  for (WorkerCapacity& w : workers) {
    RETURN_IF_ERROR(CheckWorker(w));
    if (!ids.insert(w.id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker ", w.id, ": repeated id"));
    }
  }
  ids.clear();
  for (const PendingJob& j : pending) {
    RETURN_IF_ERROR(CheckJob(j));
    if (!ids.insert(j.id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("job ", j.id, ": repeated id"));
    }
  }
  return ClusterSnapshot(std::move(workers), std::move(pending));
}

const WorkerCapacity* ClusterSnapshot::FindWorker(const std::string& id) const {
  for (const WorkerCapacity& w : workers_) {
    if (w.id == id) return &w;
  }
  return nullptr;
}

const PendingJob* ClusterSnapshot::FindJob(const std::string& id) const {
  for (const PendingJob& j : pending_) {
    if (j.id == id) return &j;
  }
  return nullptr;
}

}  // namespace trainyard::scheduler
