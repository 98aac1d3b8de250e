#include "server/cluster_view.h"

#include <algorithm>

#include "common/status_macros.h"
#include "common/proto_time.h"

namespace trainyard::server {
namespace {

const std::vector<v1::JobState> kActive = {v1::SCHEDULED, v1::RUNNING,
                                           v1::PREEMPTING};

std::vector<int32_t> DeviceIndices(const v1::WorkerHello& hello) {
  std::vector<int32_t> out;
  for (const v1::Device& d : hello.devices()) out.push_back(d.index());
  std::sort(out.begin(), out.end());
  return out;
}

v1::Worker ToProto(const WorkerStatus& w, const WorkerUsage& used) {
  v1::Worker out;
  out.set_id(w.id);
  out.set_hostname(w.hello.hostname());
  out.set_state(w.state);
  *out.mutable_devices() = w.hello.devices();
  out.set_cpu_slots(w.hello.cpu_slots());
  out.set_free_cpu_slots(std::max(0, w.hello.cpu_slots() - used.cpu_slots));
  out.set_free_gpus(std::max(
      0, w.hello.devices_size() - static_cast<int32_t>(used.gpus.size())));
  for (const v1::RunningJobRef& ref : used.jobs) *out.add_jobs() = ref;
  if (w.connect_time != absl::InfinitePast()) {
    *out.mutable_connect_time() = ToProtoTime(w.connect_time);
  }
  if (w.last_heartbeat != absl::InfinitePast()) {
    *out.mutable_last_heartbeat() = ToProtoTime(w.last_heartbeat);
  }
  out.set_version(w.hello.version());
  return out;
}

}  // namespace

JobNeed NeedOf(const v1::JobSpec& spec) {
  const int32_t gpus = spec.resources().gpus();
  return gpus > 0 ? JobNeed{gpus, 0} : JobNeed{0, 1};
}

std::map<std::string, WorkerUsage> UsageByWorker(
    const std::vector<JobRecord>& active_jobs) {
  std::map<std::string, WorkerUsage> usage;
  for (const JobRecord& r : active_jobs) {
    WorkerUsage& u = usage[r.job.worker_id()];
    u.cpu_slots += NeedOf(r.job.spec()).cpu_slots;
    u.gpus.insert(r.gpu_indices.begin(), r.gpu_indices.end());
    v1::RunningJobRef& ref = u.jobs.emplace_back();
    ref.set_job_id(r.job.id());
    ref.set_attempt(r.job.attempt());
  }
  return usage;
}

std::vector<scheduler::WorkerCapacity> SchedulableCapacity(
    const std::vector<WorkerStatus>& workers,
    const std::map<std::string, WorkerUsage>& usage) {
  static const WorkerUsage kIdle;
  std::vector<scheduler::WorkerCapacity> out;
  for (const WorkerStatus& w : workers) {
    if (!w.schedulable) continue;
    auto it = usage.find(w.id);
    const WorkerUsage& used = it == usage.end() ? kIdle : it->second;
    scheduler::WorkerCapacity c;
    c.id = w.id;
    c.cpu_slots = w.hello.cpu_slots();
    c.free_cpu_slots = std::max(0, c.cpu_slots - used.cpu_slots);
    c.gpus = DeviceIndices(w.hello);
    for (int32_t g : c.gpus) {
      if (!used.gpus.contains(g)) c.free_gpus.push_back(g);
    }
    out.push_back(std::move(c));
  }
  return out;
}

ClusterView::ClusterView(JobStore* store, WorkerRegistry* workers,
                         std::string version)
    : store_(store), workers_(workers), version_(std::move(version)) {}

absl::StatusOr<std::vector<v1::Worker>> ClusterView::ListWorkers() const {
  ASSIGN_OR_RETURN(std::vector<JobRecord> active, store_->JobsInStates(kActive));
  const std::map<std::string, WorkerUsage> usage = UsageByWorker(active);
  static const WorkerUsage kIdle;
  std::vector<v1::Worker> out;
  for (const WorkerStatus& w : workers_->List()) {
    auto it = usage.find(w.id);
    out.push_back(ToProto(w, it == usage.end() ? kIdle : it->second));
  }
  return out;
}

absl::StatusOr<v1::ClusterStatus> ClusterView::Status() const {
  ASSIGN_OR_RETURN(std::vector<v1::Worker> workers, ListWorkers());
  ASSIGN_OR_RETURN(auto counts, store_->CountJobsByState());
  v1::ClusterStatus s;
  for (const v1::Worker& w : workers) {
    if (w.state() == v1::WORKER_LOST) {
      s.set_workers_lost(s.workers_lost() + 1);
      continue;
    }
    s.set_workers_ready(s.workers_ready() + 1);
    s.set_cpu_slots_total(s.cpu_slots_total() + w.cpu_slots());
    s.set_cpu_slots_free(s.cpu_slots_free() + w.free_cpu_slots());
    s.set_gpus_total(s.gpus_total() + w.devices_size());
    s.set_gpus_free(s.gpus_free() + w.free_gpus());
  }
  s.set_jobs_queued(counts[v1::QUEUED]);
  s.set_jobs_scheduled(counts[v1::SCHEDULED]);
  s.set_jobs_running(counts[v1::RUNNING] + counts[v1::PREEMPTING]);
  s.set_jobs_succeeded(counts[v1::SUCCEEDED]);
  s.set_jobs_failed(counts[v1::FAILED]);
  s.set_jobs_cancelled(counts[v1::CANCELLED]);
  s.set_version(version_);
  return s;
}

}  // namespace trainyard::server
