#include "scheduler/fgd_chooser.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>
#include <utility>

namespace trainyard::scheduler {
namespace {

void Append(std::string& out, int64_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

bool HostFitsAfter(int64_t cpu, int64_t memory, const PendingJob& kind) {
  return cpu >= kind.cpu_milli && memory >= kind.memory_bytes;
}

}  // namespace

FgdChooser::FgdChooser(const ClusterSnapshot& snapshot,
                       const FreeCapacity& free, std::vector<FragClass> classes)
    : classes_(std::move(classes)) {
  auto widen = [&](const PendingJob& j) {
    cpu_cap_ = std::max(cpu_cap_, 2 * j.cpu_milli);
    memory_cap_ = std::max(memory_cap_, 2 * j.memory_bytes);
    slots_cap_ = std::max(slots_cap_, 2 * j.cpu_slots);
  };
  for (const PendingJob& j : snapshot.pending()) widen(j);
  for (const FragClass& c : classes_) {
    widen(c.shape);
    size_t d = 0;
    while (d < demands_.size() &&
           std::make_tuple(demands_[d].whole, demands_[d].compute_milli,
                           demands_[d].memory_bytes) !=
               std::make_tuple(c.demand.whole, c.demand.compute_milli,
                               c.demand.memory_bytes)) {
      ++d;
    }
    if (d == demands_.size()) demands_.push_back(c.demand);
    demand_of_.push_back(d);
  }
  group_of_.resize(free.workers.size());
  for (size_t i = 0; i < free.workers.size(); ++i) Join(i, free);
}

std::string FgdChooser::Signature(const WorkerCapacity& w,
                                  const NodeSummary& s) const {
  std::string out;
  out.reserve(32 + w.devices.size() * 24);
  Append(out, std::min(w.free_cpu_milli, cpu_cap_));
  Append(out, std::min(w.free_memory_bytes, memory_cap_));
  Append(out, std::min(w.free_cpu_slots, slots_cap_));
  Append(out, s.reserved ? 1 : 0);
  // In device order, so that alike workers have their GPUs at the same
  // positions and a placement found for one fits any of them.
  for (const GpuCapacity& g : w.devices) {
    Append(out, g.free_compute_milli);
    Append(out, g.free_memory_bytes);
    Append(out, g.memory_bytes);
  }
  return out;
}

void FgdChooser::Fill(Group& g, const WorkerCapacity& w) const {
  g.free_milli = FreeGpuMilli(w);
  g.stats.assign(demands_.size(), DemandStat{});
  for (size_t d = 0; d < demands_.size(); ++d) {
    for (const GpuCapacity& gpu : w.devices) {
      if (GpuFits(gpu, demands_[d])) {
        ++g.stats[d].fitting;
      } else {
        g.stats[d].unusable += gpu.free_compute_milli;
      }
    }
  }
  // NodeFragmentation(w, classes_), from the counts just made.
  g.frag = 0;
  for (size_t c = 0; c < classes_.size(); ++c) {
    const DemandStat& k = g.stats[demand_of_[c]];
    const bool fits =
        HostFits(w, classes_[c].shape) && k.fitting >= classes_[c].shape.gpus;
    g.frag += classes_[c].weight *
              static_cast<double>(fits ? k.unusable : g.free_milli);
  }
}

void FgdChooser::Join(size_t worker, const FreeCapacity& free) {
  const WorkerCapacity& w = free.workers[worker];
  std::string signature = Signature(w, free.summaries[worker]);
  auto [it, added] = by_signature_.try_emplace(signature, 0);
  if (added) {
    if (spare_.empty()) {
      spare_.push_back(static_cast<uint32_t>(groups_.size()));
      groups_.emplace_back();
    }
    it->second = spare_.back();
    spare_.pop_back();
    Group& g = groups_[it->second];
    g.signature = std::move(signature);
    g.members.clear();
    g.epoch = next_epoch_++;
    g.alive_at = alive_.size();
    alive_.push_back({it->second, g.epoch, worker});
    Fill(g, w);
  }
  Group& g = groups_[it->second];
  g.members.insert(worker);
  alive_[g.alive_at].rep = *g.members.begin();
  group_of_[worker] = it->second;
}

void FgdChooser::Leave(size_t worker) {
  const uint32_t id = group_of_[worker];
  Group& g = groups_[id];
  g.members.erase(worker);
  if (!g.members.empty()) {
    alive_[g.alive_at].rep = *g.members.begin();
    return;
  }
  by_signature_.erase(g.signature);
  groups_[alive_.back().id].alive_at = g.alive_at;
  alive_[g.alive_at] = alive_.back();
  alive_.pop_back();
  spare_.push_back(id);
}

void FgdChooser::Changed(size_t worker, const FreeCapacity& free) {
  Leave(worker);
  Join(worker, free);
}

// The expected fragmentation change of taking `demand` on `devices` of a
// worker in group `g`: only the taken GPUs and the host change.
FgdChooser::Scored FgdChooser::Score(const Group& g, const WorkerCapacity& w,
                                     const PendingJob& job,
                                     const GpuDemand& demand,
                                     const std::vector<size_t>& devices) const {
  const int64_t cpu = w.free_cpu_milli - job.cpu_milli;
  const int64_t memory = w.free_memory_bytes - job.memory_bytes;
  int64_t taken = 0;
  for (size_t pos : devices) {
    taken +=
        demand.whole ? w.devices[pos].free_compute_milli : demand.compute_milli;
  }
  const int64_t left = g.free_milli - taken;
  if (left == 0) return {std::round(-g.frag * 1024) / 1024, 0};
  // Only the taken GPUs change: move them from before to after.
  scratch_stats_ = g.stats;
  for (size_t d = 0; d < demands_.size(); ++d) {
    DemandStat& k = scratch_stats_[d];
    for (size_t pos : devices) {
      GpuCapacity gpu = w.devices[pos];
      if (GpuFits(gpu, demands_[d])) {
        --k.fitting;
      } else {
        k.unusable -= gpu.free_compute_milli;
      }
      gpu.free_compute_milli =
          demand.whole ? 0 : gpu.free_compute_milli - demand.compute_milli;
      gpu.free_memory_bytes =
          demand.whole ? 0 : gpu.free_memory_bytes - demand.memory_bytes;
      if (GpuFits(gpu, demands_[d])) {
        ++k.fitting;
      } else {
        k.unusable += gpu.free_compute_milli;
      }
    }
  }
  double after = 0;
  for (size_t c = 0; c < classes_.size(); ++c) {
    const FragClass& kind = classes_[c];
    const DemandStat& k = scratch_stats_[demand_of_[c]];
    const bool fits =
        HostFitsAfter(cpu, memory, kind.shape) && k.fitting >= kind.shape.gpus;
    after += kind.weight * static_cast<double>(fits ? k.unusable : left);
  }
  // Rounded to 1/1024 milli-GPU so that equal changes summed in a different
  // order still compare equal.
  return {std::round((after - g.frag) * 1024) / 1024, left};
}

std::vector<size_t> FgdChooser::DevicesOn(const WorkerCapacity& w,
                                          const PendingJob& job,
                                          const GpuDemand& demand,
                                          int32_t device) {
  if (device >= 0) return {static_cast<size_t>(device)};
  if (job.gpus == 0) return {};
  return demand.whole ? FirstDevices(w, demand, job.gpus)
                      : TightestDevices(w, demand, job.gpus);
}

// The best place for `job` on the group's workers (all alike), or nullopt.
std::optional<FgdChooser::Placed> FgdChooser::BestIn(const Group& g,
                                                     const WorkerCapacity& w,
                                                     const PendingJob& job,
                                                     const GpuDemand& demand) {
  if (job.gpus == 0 || demand.whole || job.gpus > 1) {
    return Placed{Score(g, w, job, demand, DevicesOn(w, job, demand, -1)), -1};
  }
  // One shared GPU: every distinct state of a fitting GPU is a candidate;
  // ties go to the lower device index.
  std::optional<Placed> best;
  for (size_t i = 0; i < w.devices.size(); ++i) {
    const GpuCapacity& d = w.devices[i];
    if (!GpuFits(d, demand)) continue;
    bool seen = false;
    for (size_t j = 0; j < i && !seen; ++j) {
      const GpuCapacity& o = w.devices[j];
      seen = GpuFits(o, demand) &&
             o.free_compute_milli == d.free_compute_milli &&
             o.free_memory_bytes == d.free_memory_bytes;
    }
    if (seen) continue;
    scratch_devices_.assign(1, i);
    const Scored s = Score(g, w, job, demand, scratch_devices_);
    if (!best || std::make_pair(s.delta, s.left) <
                     std::make_pair(best->score.delta, best->score.left)) {
      best = Placed{s, static_cast<int32_t>(i)};
    }
  }
  return best;
}

std::optional<Choice> FgdChooser::Choose(const PendingJob& job,
                                         const GpuDemand& demand,
                                         const FreeCapacity& free) {
  const JobKey key{job.gpus,
                   demand.whole,
                   demand.compute_milli,
                   demand.memory_bytes,
                   job.cpu_milli,
                   job.memory_bytes,
                   job.gpus == 0 ? job.cpu_slots : 0};
  std::vector<Cached>* cache = nullptr;
  if (auto it = cache_.find(key); it != cache_.end()) {
    cache = &it->second;
  } else if (cache_.size() < kMaxCachedShapes) {
    cache = &cache_[key];
  }
  if (cache != nullptr && cache->size() < groups_.size()) {
    cache->resize(groups_.size());
  }
  // (delta, left, worker) is a total order, so the answer does not depend
  // on the order groups are visited in.
  bool found = false;
  size_t best_worker = 0;
  Placed best;
  Cached scratch;
  for (const Alive& a : alive_) {
    Cached& c = cache != nullptr ? (*cache)[a.id] : scratch;
    if (cache == nullptr || c.epoch != a.epoch) {
      std::optional<Placed> placed;
      if (free.Fits(a.rep, job, demand)) {
        placed = BestIn(groups_[a.id], free.workers[a.rep], job, demand);
      }
      c = {a.epoch, placed.has_value(), placed.value_or(Placed{})};
    }
    if (!c.fits) continue;
    const Scored& s = c.placed.score;
    if (found &&
        std::make_tuple(s.delta, s.left, a.rep) >=
            std::make_tuple(best.score.delta, best.score.left, best_worker)) {
      continue;
    }
    found = true;
    best_worker = a.rep;
    best = c.placed;
  }
  if (!found) return std::nullopt;
  return Choice{best_worker,
                DevicesOn(free.workers[best_worker], job, demand, best.device)};
}

}  // namespace trainyard::scheduler
