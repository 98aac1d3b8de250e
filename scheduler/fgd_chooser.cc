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
           std::make_tuple(demands_[d].whole, demands_[d].estimated,
                           demands_[d].compute_milli, demands_[d].memory_bytes,
                           demands_[d].models) !=
               std::make_tuple(c.demand.whole, c.demand.estimated,
                               c.demand.compute_milli, c.demand.memory_bytes,
                               c.demand.models)) {
      ++d;
    }
    if (d == demands_.size()) demands_.push_back(c.demand);
    demand_of_.push_back(d);
  }
  for (const FragClass& c : classes_) {
    kind_cpus_.push_back(c.shape.cpu_milli);
    kind_memories_.push_back(c.shape.memory_bytes);
  }
  for (std::vector<int64_t>* asks : {&kind_cpus_, &kind_memories_}) {
    std::sort(asks->begin(), asks->end());
    asks->erase(std::unique(asks->begin(), asks->end()), asks->end());
  }
  group_of_.resize(free.workers.size());
  for (size_t i = 0; i < free.workers.size(); ++i) Join(i, free);
}

std::string FgdChooser::Signature(const WorkerCapacity& w,
                                  const NodeSummary& s) const {
  std::string out;
  out.reserve(32 + w.devices.size() * 32);
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
    // Jobs naming GPU models fit only GPUs of those models. One word with
    // `shareable`: the signature is hashed for every changed worker.
    Append(out, (g.shareable ? 1 : 0) | int64_t{g.model_slot} << 1);
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
  g.kinds_cpu = g.kinds_memory = 0;
  for (size_t c = 0; c < classes_.size(); ++c) {
    const PendingJob& kind = classes_[c].shape;
    const DemandStat& k = g.stats[demand_of_[c]];
    const bool host = HostFits(w, kind);
    const bool fits = host && k.fitting >= kind.gpus;
    g.frag += classes_[c].weight *
              static_cast<double>(fits ? k.unusable : g.free_milli);
    if (host) {
      g.kinds_cpu = std::max(g.kinds_cpu, kind.cpu_milli);
      g.kinds_memory = std::max(g.kinds_memory, kind.memory_bytes);
    }
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
    alive_.push_back({it->second, worker});
    Fill(g, w);
  }
  Group& g = groups_[it->second];
  g.members.insert(worker);
  group_of_[worker] = it->second;
  if (added || *g.members.begin() == worker) {
    alive_[g.alive_at].rep = worker;
    Touch(it->second);
  }
}

void FgdChooser::Leave(size_t worker) {
  const uint32_t id = group_of_[worker];
  Group& g = groups_[id];
  const bool was_rep = *g.members.begin() == worker;
  g.members.erase(worker);
  if (!g.members.empty()) {
    if (was_rep) {
      alive_[g.alive_at].rep = *g.members.begin();
      Touch(id);
    }
    return;
  }
  by_signature_.erase(g.signature);
  g.stamp = stamps_[id] = 0;
  groups_[alive_.back().id].alive_at = g.alive_at;
  alive_[g.alive_at] = alive_.back();
  alive_.pop_back();
  spare_.push_back(id);
}

void FgdChooser::Touch(uint32_t id) {
  if (stamps_.size() < groups_.size()) stamps_.resize(groups_.size());
  groups_[id].stamp = stamps_[id] = next_stamp_++;
  touched_.emplace_back(id, groups_[id].stamp);
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
    const GpuDemand on = OnGpu(w.devices[pos], demand);
    taken += on.whole ? w.devices[pos].free_compute_milli : on.compute_milli;
  }
  const int64_t left = g.free_milli - taken;
  if (left == 0) return {std::round(-g.frag * 1024) / 1024, 0};
  // Only the taken GPUs change: move them from before to after.
  scratch_stats_ = g.stats;
  for (size_t d = 0; d < demands_.size(); ++d) {
    DemandStat& k = scratch_stats_[d];
    for (size_t pos : devices) {
      GpuCapacity gpu = w.devices[pos];
      const GpuDemand on = OnGpu(gpu, demand);
      if (GpuFits(gpu, demands_[d])) {
        --k.fitting;
      } else {
        k.unusable -= gpu.free_compute_milli;
      }
      gpu.free_compute_milli =
          on.whole ? 0 : gpu.free_compute_milli - on.compute_milli;
      gpu.free_memory_bytes =
          on.whole ? 0 : gpu.free_memory_bytes - on.memory_bytes;
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
             o.free_memory_bytes == d.free_memory_bytes &&
             o.memory_bytes == d.memory_bytes && o.shareable == d.shareable &&
             o.model_slot == d.model_slot;
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

// The groups a job of one GPU need may go to, in order of the least score
// the job could get there: (delta, left, lowest member) with the job taking
// no CPU or host memory. Its real score on a group is never less: taking
// host resources can only make task kinds stop fitting the node, each then
// counting the node's free compute instead of the part it cannot use (never
// less, and floating-point sums and rounding keep that order), while the
// free compute left does not depend on the host. It is the same when the
// job leaves the host needs of every kind that fits there now. So a scan
// in this order stops at the first group that could not beat the best one
// found: no group behind it can.
//
// Groups change as jobs are placed; each change is in touched_, and an
// order takes in what changed since it was last used: fresh entries wait,
// unsorted, in `recent` (every scan looks at all of them) until there are
// enough to merge into `sorted`, which drops the entries of groups that
// changed since.
struct FgdChooser::CandidateOrder {
  struct Entry {
    double delta = 0;
    int64_t left = 0;
    size_t rep = 0;
    uint32_t id = 0;
    uint32_t stamp = 0;
    int32_t device = -1;
    // The group's kinds_cpu and kinds_memory, read here in a scan.
    int64_t kinds_cpu = 0;
    int64_t kinds_memory = 0;

    bool operator<(const Entry& o) const {
      return std::tie(delta, left, rep) < std::tie(o.delta, o.left, o.rep);
    }
  };
  // Where a job goes on one group state when it leaves less CPU or host
  // memory than some task kind there asks. Its score depends on the job's
  // host needs only through which kinds still fit the host after it: how
  // many of the kinds' distinct CPU asks, and of their host memory asks,
  // are at most what it leaves.
  struct Exact {
    uint16_t cpu_rank = 0;
    uint16_t memory_rank = 0;
    std::optional<Placed> placed;
  };
  // The least score of the need on one group state, and the exact ones
  // found on it so far.
  struct Bound {
    uint32_t epoch = 0;  // 0: not known
    std::optional<Placed> placed;
    std::vector<Exact> exact;
  };
  static constexpr size_t kMaxRecent = 32;

  PendingJob shape;  // the need; no CPU, host memory or slots
  GpuDemand demand;
  std::vector<Entry> sorted;
  std::vector<Entry> recent;
  std::vector<Entry> merged;  // scratch
  size_t seen = 0;            // touched_ entries taken in
  std::vector<Bound> bounds;  // by group id
};

FgdChooser::~FgdChooser() = default;

const std::optional<FgdChooser::Placed>& FgdChooser::ExactOn(
    CandidateOrder& order, uint32_t id, const WorkerCapacity& w,
    const PendingJob& job, const GpuDemand& demand) {
  auto rank = [](const std::vector<int64_t>& asks, int64_t left) {
    return static_cast<uint16_t>(
        std::upper_bound(asks.begin(), asks.end(), left) - asks.begin());
  };
  const uint16_t cpu = rank(kind_cpus_, w.free_cpu_milli - job.cpu_milli);
  const uint16_t memory =
      rank(kind_memories_, w.free_memory_bytes - job.memory_bytes);
  std::vector<CandidateOrder::Exact>& known = order.bounds[id].exact;
  for (const CandidateOrder::Exact& e : known) {
    if (e.cpu_rank == cpu && e.memory_rank == memory) return e.placed;
  }
  known.push_back({cpu, memory, BestIn(groups_[id], w, job, demand)});
  return known.back().placed;
}

const std::optional<FgdChooser::Placed>& FgdChooser::Bound(
    CandidateOrder& order, uint32_t id, const FreeCapacity& free) {
  if (order.bounds.size() < groups_.size()) order.bounds.resize(groups_.size());
  const Group& g = groups_[id];
  CandidateOrder::Bound& b = order.bounds[id];
  if (b.epoch != g.epoch) {
    const size_t rep = alive_[g.alive_at].rep;
    b.epoch = g.epoch;
    b.placed.reset();
    b.exact.clear();
    if (free.Fits(rep, order.shape, order.demand)) {
      b.placed = BestIn(g, free.workers[rep], order.shape, order.demand);
    }
  }
  return b.placed;
}

void FgdChooser::CatchUp(CandidateOrder& order, const FreeCapacity& free) {
  auto entry = [&](uint32_t id) -> std::optional<CandidateOrder::Entry> {
    const std::optional<Placed>& b = Bound(order, id, free);
    if (!b) return std::nullopt;
    const Group& g = groups_[id];
    return CandidateOrder::Entry{
        b->score.delta, b->score.left, alive_[g.alive_at].rep, id, g.stamp,
        b->device,      g.kinds_cpu,   g.kinds_memory};
  };
  if (touched_.size() - order.seen > alive_.size()) {
    // Fewer to look at afresh than changes to take in.
    order.sorted.clear();
    order.recent.clear();
    for (const Alive& a : alive_) {
      if (auto e = entry(a.id)) order.sorted.push_back(*e);
    }
    std::sort(order.sorted.begin(), order.sorted.end());
    order.seen = touched_.size();
    return;
  }
  for (; order.seen < touched_.size(); ++order.seen) {
    const auto [id, stamp] = touched_[order.seen];
    if (stamps_[id] != stamp) continue;  // changed again since
    if (auto e = entry(id)) order.recent.push_back(*e);
  }
  if (order.recent.size() <= CandidateOrder::kMaxRecent) return;
  std::sort(order.recent.begin(), order.recent.end());
  auto live = [&](const CandidateOrder::Entry& e) {
    return stamps_[e.id] == e.stamp;
  };
  order.merged.clear();
  auto a = order.sorted.begin(), b = order.recent.begin();
  while (a != order.sorted.end() || b != order.recent.end()) {
    const bool take_a =
        b == order.recent.end() || (a != order.sorted.end() && *a < *b);
    const CandidateOrder::Entry& e = take_a ? *a++ : *b++;
    if (live(e)) order.merged.push_back(e);
  }
  order.sorted.swap(order.merged);
  order.recent.clear();
}

FgdChooser::CandidateOrder* FgdChooser::OrderFor(const PendingJob& job,
                                                 const GpuDemand& demand,
                                                 const FreeCapacity& free) {
  const GpuKey key =
      job.gpus == 0 ? GpuKey{0, true, false, kWholeGpuMilli, 0, ~uint64_t{0}}
                    : GpuKey{job.gpus,
                             demand.whole,
                             demand.estimated,
                             demand.compute_milli,
                             demand.memory_bytes,
                             demand.models};
  auto it = orders_.find(key);
  if (it == orders_.end()) {
    if (orders_.size() >= kMaxOrders) return nullptr;
    auto order = std::make_unique<CandidateOrder>();
    order->shape.gpus = job.gpus;
    order->shape.cpu_slots = 0;
    order->shape.gpu_memory_bytes = job.gpu_memory_bytes;
    order->shape.gpu_compute_milli = job.gpu_compute_milli;
    order->shape.gpu_memory_estimated = job.gpu_memory_estimated;
    order->shape.gpu_model_mask = job.gpu_model_mask;
    order->demand = demand;
    it = orders_.emplace(key, std::move(order)).first;
  }
  CatchUp(*it->second, free);
  return it->second.get();
}

std::optional<std::pair<size_t, FgdChooser::Placed>> FgdChooser::ScanOrder(
    CandidateOrder& order, const PendingJob& job, const GpuDemand& demand,
    const FreeCapacity& free) {
  std::optional<std::pair<size_t, Placed>> best;
  auto beats = [&](const Scored& s, size_t rep) {
    return !best || std::make_tuple(s.delta, s.left, rep) <
                        std::make_tuple(best->second.score.delta,
                                        best->second.score.left, best->first);
  };
  auto consider = [&](const CandidateOrder::Entry& e) {
    if (stamps_[e.id] != e.stamp || !beats({e.delta, e.left}, e.rep)) return;
    const NodeSummary& host = free.summaries[e.rep];
    if ((job.gpus == 0 && host.free_cpu_slots < job.cpu_slots) ||
        host.free_cpu_milli < job.cpu_milli ||
        host.free_memory_bytes < job.memory_bytes) {
      return;
    }
    Placed placed{{e.delta, e.left}, e.device};
    if (host.free_cpu_milli - job.cpu_milli < e.kinds_cpu ||
        host.free_memory_bytes - job.memory_bytes < e.kinds_memory) {
      // Some kind stops fitting the host: score the job itself.
      const std::optional<Placed>& exact =
          ExactOn(order, e.id, free.workers[e.rep], job, demand);
      if (!exact || !beats(exact->score, e.rep)) return;
      placed = *exact;
    }
    best.emplace(e.rep, placed);
  };
  for (const CandidateOrder::Entry& e : order.recent) consider(e);
  for (const CandidateOrder::Entry& e : order.sorted) {
    if (best && !beats({e.delta, e.left}, e.rep)) break;
    consider(e);
  }
  return best;
}

std::optional<std::pair<size_t, FgdChooser::Placed>> FgdChooser::ScanAll(
    const PendingJob& job, const GpuDemand& demand, const FreeCapacity& free) {
  // (delta, left, worker) is a total order, so the answer does not depend
  // on the order groups are visited in.
  std::optional<std::pair<size_t, Placed>> best;
  for (const Alive& a : alive_) {
    if (!free.Fits(a.rep, job, demand)) continue;
    std::optional<Placed> placed =
        BestIn(groups_[a.id], free.workers[a.rep], job, demand);
    if (!placed) continue;
    const Scored& s = placed->score;
    if (best && std::make_tuple(s.delta, s.left, a.rep) >=
                    std::make_tuple(best->second.score.delta,
                                    best->second.score.left, best->first)) {
      continue;
    }
    best.emplace(a.rep, *placed);
  }
  return best;
}

std::optional<Choice> FgdChooser::Choose(const PendingJob& job,
                                         const GpuDemand& demand,
                                         const FreeCapacity& free) {
  CandidateOrder* order = OrderFor(job, demand, free);
  std::optional<std::pair<size_t, Placed>> best =
      order != nullptr ? ScanOrder(*order, job, demand, free)
                       : ScanAll(job, demand, free);
  if (!best) return std::nullopt;
  return Choice{best->first, DevicesOn(free.workers[best->first], job, demand,
                                       best->second.device)};
}

}  // namespace trainyard::scheduler
