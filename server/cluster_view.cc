#include "server/cluster_view.h"

#include <algorithm>

#include "absl/types/span.h"
#include "common/proto_time.h"
#include "common/status_macros.h"

namespace trainyard::server {
namespace {

const std::vector<v1::JobState> kActive = {v1::SCHEDULED, v1::RUNNING,
                                           v1::PREEMPTING};

// The hello's device with the live figures of the latest heartbeat.
v1::Device WithFigures(const v1::Device& capacity, const WorkerStatus& w) {
  v1::Device out = capacity;
  auto it = w.device_figures.find(capacity.index());
  if (it == w.device_figures.end()) return out;
  const v1::Device& live = it->second;
  out.set_memory_used_bytes(live.memory_used_bytes());
  out.set_utilization_percent(live.utilization_percent());
  out.set_temperature_celsius(live.temperature_celsius());
  out.set_power_milliwatts(live.power_milliwatts());
  return out;
}

// What of `device` no job holds.
scheduler::GpuCapacity FreeOf(const v1::Device& device, const WorkerUsage& used,
                              bool share_without_mps) {
  scheduler::GpuCapacity g;
  g.index = device.index();
  g.shareable = device.mps() || share_without_mps;
  g.memory_bytes = std::max<int64_t>(0, device.memory_bytes());
  g.free_memory_bytes = g.memory_bytes;
  g.free_compute_milli = scheduler::kWholeGpuMilli;
  auto it = used.gpu_use.find(g.index);
  if (it == used.gpu_use.end()) return g;
  const GpuUse& u = it->second;
  if (u.whole || g.memory_bytes == 0 ||
      (u.memory_bytes <= 0 && u.compute_milli <= 0)) {
    g.free_memory_bytes = 0;
    g.free_compute_milli = 0;
    return g;
  }
  g.free_memory_bytes =
      std::clamp<int64_t>(g.memory_bytes - u.memory_bytes, 0, g.memory_bytes);
  g.free_compute_milli = std::clamp(scheduler::kWholeGpuMilli - u.compute_milli,
                                    0, scheduler::kWholeGpuMilli);
  return g;
}

v1::Worker ToProto(const WorkerStatus& w, const WorkerUsage& used) {
  v1::Worker out;
  out.set_id(w.id);
  out.set_hostname(w.hello.hostname());
  out.set_state(w.state);
  for (const v1::Device& d : w.hello.devices()) {
    *out.add_devices() = WithFigures(d, w);
  }
  out.set_cpu_slots(w.hello.cpu_slots());
  // Only a connected worker has anything free: a lost one's capacity is
  // gone, and one not back yet (after a server restart, or between two
  // streams) takes no job until it is.
  if (w.connected && w.state != v1::WORKER_LOST) {
    out.set_free_cpu_slots(std::max(0, w.hello.cpu_slots() - used.cpu_slots));
    out.set_free_gpus(std::max(
        0, w.hello.devices_size() - static_cast<int32_t>(used.gpus.size())));
  }
  for (const v1::RunningJobRef& ref : used.jobs) *out.add_jobs() = ref;
  if (w.connect_time != absl::InfinitePast()) {
    *out.mutable_connect_time() = ToProtoTime(w.connect_time);
  }
  if (w.last_heartbeat != absl::InfinitePast()) {
    *out.mutable_last_heartbeat() = ToProtoTime(w.last_heartbeat);
  }
  out.set_version(w.hello.version());
  if (w.drain) *out.mutable_drain() = *w.drain;
  return out;
}

}  // namespace

JobNeed NeedOf(const v1::JobSpec& spec) {
  const int32_t gpus = spec.resources().gpus();
  // A CPU job takes one slot per data-parallel rank, all on one worker.
  return gpus > 0 ? JobNeed{gpus, 0}
                  : JobNeed{0, std::max(1, spec.resources().cpu_ranks())};
}

namespace {

// What a job holds of each GPU given `grants`: a placement grants the same
// share of each GPU of a job on one worker (its GPUs there are alike).
GpuHold HoldOf(const google::protobuf::RepeatedPtrField<v1::GpuGrant>& grants) {
  if (grants.empty()) return GpuHold{};
  const v1::GpuGrant& g = grants[0];
  return GpuHold{std::max<int64_t>(g.memory_bytes(), 1), g.compute_milli()};
}

// Adds to `u` one worker's share of a job: `cpu_slots`, and `hold` of each
// of `gpus`.
void AddUse(const JobRecord& r, int32_t cpu_slots,
            absl::Span<const int32_t> gpus, const GpuHold& hold,
            WorkerUsage& u) {
  u.cpu_slots += cpu_slots;
  u.gpus.insert(gpus.begin(), gpus.end());
  for (int32_t g : gpus) {
    GpuUse& use = u.gpu_use[g];
    if (hold.memory_bytes <= 0) {
      use.whole = true;
      continue;
    }
    use.memory_bytes += hold.memory_bytes;
    use.compute_milli += hold.compute_milli;
  }
  v1::RunningJobRef& ref = u.jobs.emplace_back();
  ref.set_job_id(r.job.id());
  ref.set_attempt(r.job.attempt());
}

}  // namespace

GpuHold RecordedHold(const JobRecord& record) {
  return HoldOf(record.job.gpu_grants());
}

int32_t OwnWorkerCpuSlots(const JobRecord& record) {
  int32_t slots = NeedOf(record.job.spec()).cpu_slots;
  if (!record.job.gang_parts().empty()) {
    slots = std::min(slots, record.job.gang_parts(0).first_rank());
  }
  return slots;
}

std::map<std::string, WorkerUsage> UsageByWorker(
    const std::vector<JobRecord>& active_jobs, const GpuHoldOf& hold_of) {
  std::map<std::string, WorkerUsage> usage;
  for (const JobRecord& r : active_jobs) {
    AddUse(r, OwnWorkerCpuSlots(r), r.gpu_indices,
           hold_of ? hold_of(r) : RecordedHold(r), usage[r.job.worker_id()]);
    const bool cpu_job = NeedOf(r.job.spec()).gpus == 0;
    for (const v1::GangPart& part : r.job.gang_parts()) {
      if (part.exited()) continue;
      AddUse(r, cpu_job ? part.ranks() : 0,
             absl::MakeConstSpan(part.gpu_indices()), HoldOf(part.gpu_grants()),
             usage[part.worker_id()]);
    }
  }
  return usage;
}

std::vector<scheduler::WorkerCapacity> SchedulableCapacity(
    const std::vector<WorkerStatus>& workers,
    const std::map<std::string, WorkerUsage>& usage, bool share_without_mps) {
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
    for (const v1::Device& d : w.hello.devices()) {
      c.devices.push_back(FreeOf(d, used, share_without_mps));
      c.devices.back().name_id = c.GpuNameId(d.name());
    }
    std::sort(
        c.devices.begin(), c.devices.end(),
        [](const scheduler::GpuCapacity& a, const scheduler::GpuCapacity& b) {
          return a.index < b.index;
        });
    for (const scheduler::GpuCapacity& g : c.devices) {
      c.gpus.push_back(g.index);
      if (g.wholly_free()) c.free_gpus.push_back(g.index);
    }
    out.push_back(std::move(c));
  }
  return out;
}

ClusterView::ClusterView(JobStore* store, WorkerRegistry* workers,
                         std::string version)
    : store_(store), workers_(workers), version_(std::move(version)) {}

absl::StatusOr<std::vector<v1::Worker>> ClusterView::ListWorkers() const {
  ASSIGN_OR_RETURN(std::vector<JobRecord> active,
                   store_->JobsInStates(kActive));
  const std::map<std::string, WorkerUsage> usage = UsageByWorker(active);
  static const WorkerUsage kIdle;
  std::vector<v1::Worker> out;
  for (const WorkerStatus& w : workers_->List()) {
    auto it = usage.find(w.id);
    out.push_back(ToProto(w, it == usage.end() ? kIdle : it->second));
  }
  return out;
}

absl::StatusOr<v1::ClusterStatus> ClusterView::Status(
    std::string_view tenant) const {
  ASSIGN_OR_RETURN(std::vector<v1::Worker> workers, ListWorkers());
  ASSIGN_OR_RETURN(auto counts, store_->CountJobsByState(tenant));
  v1::ClusterStatus s;
  for (const v1::Worker& w : workers) {
    if (w.state() == v1::WORKER_LOST) {
      s.set_workers_lost(s.workers_lost() + 1);
      continue;
    }
    s.set_cpu_slots_total(s.cpu_slots_total() + w.cpu_slots());
    s.set_gpus_total(s.gpus_total() + w.devices_size());
    if (w.state() == v1::WORKER_DRAINING) {
      s.set_workers_draining(s.workers_draining() + 1);
      continue;
    }
    s.set_workers_ready(s.workers_ready() + 1);
    s.set_cpu_slots_free(s.cpu_slots_free() + w.free_cpu_slots());
    s.set_gpus_free(s.gpus_free() + w.free_gpus());
  }
  s.set_jobs_queued(counts[v1::QUEUED]);
  s.set_jobs_scheduled(counts[v1::SCHEDULED]);
  s.set_jobs_running(counts[v1::RUNNING] + counts[v1::PREEMPTING]);
  s.set_jobs_succeeded(counts[v1::SUCCEEDED]);
  s.set_jobs_failed(counts[v1::FAILED]);
  s.set_jobs_cancelled(counts[v1::CANCELLED]);
  s.set_jobs_suspended(counts[v1::SUSPENDED]);
  s.set_version(version_);
  return s;
}

}  // namespace trainyard::server
