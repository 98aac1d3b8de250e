#include "scheduler/packing_pass.h"

#include <algorithm>
#include <deque>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "scheduler/fair_share.h"
#include "scheduler/gpu_models.h"
#include "scheduler/preemption.h"

namespace trainyard::scheduler {
namespace {

// Jobs with equal keys fit exactly the same places.
using ShapeKey = std::tuple<int32_t, int32_t, int64_t, int32_t, int64_t,
                            int64_t, bool, int32_t, uint64_t>;

ShapeKey KeyOf(const PendingJob& j) {
  const bool gpu = j.gpus > 0;
  return {j.gpus,
          gpu ? 0 : j.cpu_slots,
          gpu ? j.gpu_memory_bytes : 0,
          gpu ? j.gpu_compute_milli : 0,
          j.cpu_milli,
          j.memory_bytes,
          gpu && j.gpu_memory_estimated,
          j.max_nodes,
          gpu ? j.gpu_model_mask : ~uint64_t{0}};
}

// How many of the job's ranks the idle cluster holds on the `NodeLimit`
// nodes with the most room.
int64_t SpreadRoomWhenIdle(const PendingJob& job, const GpuDemand& demand,
                           const std::vector<WorkerCapacity>& all) {
  const int32_t ranks = RanksOf(job);
  std::vector<int32_t> room;
  for (const WorkerCapacity& w : all) {
    room.push_back(RanksFitting(w, job, demand, ranks, /*when_idle=*/true));
  }
  std::sort(room.rbegin(), room.rend());
  int64_t fit = 0;
  for (size_t i = 0; i < room.size() && i < size_t(NodeLimit(job)); ++i) {
    fit += room[i];
  }
  return fit;
}

std::string LargestWorker(const std::vector<WorkerCapacity>& workers,
                          const PendingJob& job, const GpuDemand& demand) {
  int32_t gpus = 0;  // of a model the job may use
  int32_t slots = 0;
  for (const WorkerCapacity& w : workers) {
    int32_t allowed = 0;
    for (const GpuCapacity& g : w.devices) allowed += ModelAllowed(g, demand);
    gpus = std::max(gpus, allowed);
    slots = std::max(slots, w.cpu_slots);
  }
  if (job.gpus > gpus) {
    return absl::StrCat("; the largest worker has ", gpus,
                        job.gpu_models.empty() ? " GPUs" : " GPUs of them");
  }
  if (job.gpus == 0 && job.cpu_slots > slots) {
    return absl::StrCat("; the largest worker has ", slots, " CPU slots");
  }
  return "; no worker can hold it even when idle";
}

// The wait of a job naming GPU models no worker's GPU is of, naming them
// and the models the cluster has (the first few). With more kinds of GPU
// than model slots, GPUs of its models may be here but in the shared slot
// it may not use (ClusterSnapshot::Create): the reason says so.
std::optional<JobWait> NoGpuOfModel(const PendingJob& job,
                                    const GpuDemand& demand,
                                    const std::vector<WorkerCapacity>& all) {
  std::vector<std::string> names;
  bool of_its_models = false;
  for (const WorkerCapacity& w : all) {
    for (const GpuCapacity& g : w.devices) {
      if (ModelAllowed(g, demand)) return std::nullopt;
      const std::string& name = w.GpuName(g);
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        names.push_back(name);
        of_its_models = of_its_models || AllowsGpu(job.gpu_models, name);
      }
    }
  }
  if (of_its_models) {
    return JobWait{job.id, WaitKind::kInfeasible,
                   absl::StrCat("infeasible: GPUs of model ",
                                DescribeGpuModels(job.gpu_models),
                                " are here, but among more than 64 kinds of "
                                "GPU the scheduler cannot tell them from GPUs "
                                "of models the job does not allow")};
  }
  constexpr size_t kShown = 4;
  const size_t n = names.size();
  if (n > kShown) names.resize(kShown);
  for (std::string& name : names) {
    name = name.empty() ? "unnamed" : absl::StrCat("\"", name, "\"");
  }
  return JobWait{
      job.id, WaitKind::kInfeasible,
      absl::StrCat(
          "infeasible: no connected worker has a GPU of model ",
          DescribeGpuModels(job.gpu_models),
          n == 0 ? std::string(" (no worker has GPUs)")
                 : absl::StrCat(" (GPUs here: ", absl::StrJoin(names, ", "),
                                n > kShown ? ", ..." : "", ")"))};
}

std::optional<JobWait> Infeasibility(const PendingJob& job,
                                     const GpuDemand& demand,
                                     const std::vector<WorkerCapacity>& all) {
  if (all.empty()) {
    return JobWait{job.id, WaitKind::kInfeasible, kNoWorkerReason};
  }
  for (const WorkerCapacity& w : all) {
    if (FitsWhenIdle(w, job, demand)) return std::nullopt;
  }
  if (job.gpus > 0 && !job.gpu_models.empty()) {
    if (std::optional<JobWait> none = NoGpuOfModel(job, demand, all)) {
      return none;
    }
  }
  if (!MaySpread(job)) {
    return JobWait{job.id, WaitKind::kInfeasible,
                   absl::StrCat("infeasible: needs ", DescribeNeed(job, demand),
                                LargestWorker(all, job, demand))};
  }
  const int64_t room = SpreadRoomWhenIdle(job, demand, all);
  if (room >= RanksOf(job)) return std::nullopt;
  return JobWait{
      job.id, WaitKind::kInfeasible,
      absl::StrCat("infeasible: needs ", DescribeNeed(job, demand),
                   "; the idle cluster holds only ", room, " of its ",
                   RanksOf(job), " ranks",
                   job.max_nodes > 0
                       ? absl::StrCat(" on ", job.max_nodes, " nodes")
                       : "")};
}

// Does `a` ask at least as much as `b` on every dimension, so that `a` fits
// nowhere `b` does not fit?
bool AsksAtLeast(const PendingJob& a, const GpuDemand& ad, const PendingJob& b,
                 const GpuDemand& bd) {
  if (a.gpus < b.gpus || (a.gpus > 0) != (b.gpus > 0)) return false;
  // A job spread over nodes asks each node for a part of it: comparing
  // totals says nothing there.
  if (MaySpread(a) || MaySpread(b)) return false;
  if (a.cpu_milli < b.cpu_milli || a.memory_bytes < b.memory_bytes) {
    return false;
  }
  if (a.gpus == 0) return a.cpu_slots >= b.cpu_slots;
  // `a` may use only GPUs `b` may use.
  if ((ad.models & ~bd.models) != 0) return false;
  if (ad.whole != bd.whole || ad.estimated != bd.estimated) return false;
  if (ad.estimated) {
    // A larger estimate takes more of every GPU, and whole GPUs sooner; a
    // share in proportion to memory (0) grows with it too.
    return ad.memory_bytes >= bd.memory_bytes &&
           (ad.compute_milli == 0) == (bd.compute_milli == 0) &&
           ad.compute_milli >= bd.compute_milli;
  }
  return ad.whole ? ad.memory_bytes >= bd.memory_bytes
                  : (ad.compute_milli >= bd.compute_milli &&
                     ad.memory_bytes >= bd.memory_bytes);
}

// What a pass knows of each job shape: why it can never fit (no worker
// could hold it even idle), or why it cannot fit now because it, or a shape
// asking no more on any dimension, found no place earlier in the pass (free
// capacity only shrinks during a pass). Such jobs are turned away without
// another scan of the workers. Nearly every job of a long queue may have a
// shape of its own, so the map holds only an index into the waits.
class KnownWaits {
 public:
  explicit KnownWaits(const std::vector<WorkerCapacity>& all) : all_(all) {}

  // The wait of `job` if it surely cannot be placed now; nullptr when it
  // must be tried.
  const JobWait* Find(const ShapeKey& key, const PendingJob& job,
                      const GpuDemand& demand) {
    auto [it, added] = at_.try_emplace(key, kNone);
    if (added) {
      if (std::optional<JobWait> never = Infeasibility(job, demand, all_)) {
        it->second = Keep(*std::move(never));
      }
    }
    if (it->second != kNone) return &waits_[it->second];
    for (const Failed& f : dominators_) {
      if (AsksAtLeast(job, demand, f.job, f.demand)) {
        it->second = Keep(RetryLater(job, demand));
        return &waits_[it->second];
      }
    }
    return nullptr;
  }

  // Records that `job`, for which Find found nothing, fits nowhere now;
  // returns its wait.
  const JobWait& Add(const ShapeKey& key, const PendingJob& job,
                     const GpuDemand& demand) {
    if (dominators_.size() < kMaxDominators) {
      dominators_.push_back({job, demand});
    }
    const uint32_t i = Keep(RetryLater(job, demand));
    at_[key] = i;
    return waits_[i];
  }

 private:
  static constexpr size_t kMaxDominators = 64;
  static constexpr uint32_t kNone = ~uint32_t{0};
  struct Failed {
    PendingJob job;
    GpuDemand demand;
  };

  static JobWait RetryLater(const PendingJob& job, const GpuDemand& demand) {
    return {job.id, WaitKind::kRetryLater,
            absl::StrCat("waiting for ", DescribeNeed(job, demand),
                         ": no worker has that free now")};
  }
  uint32_t Keep(JobWait wait) {
    waits_.push_back(std::move(wait));
    return static_cast<uint32_t>(waits_.size() - 1);
  }

  const std::vector<WorkerCapacity>& all_;
  absl::flat_hash_map<ShapeKey, uint32_t> at_;  // index into waits_
  std::deque<JobWait> waits_;  // never moves what Find returned
  std::vector<Failed> dominators_;
};

}  // namespace

namespace {

// Backfill: the worker to hold for a blocked job — one that could hold it
// when idle, with the most of its GPUs (then CPU) already free.
std::optional<size_t> WorkerToReserve(const PendingJob& job,
                                      const GpuDemand& demand,
                                      const FreeCapacity& free) {
  std::optional<size_t> best;
  std::pair<int32_t, int64_t> best_key;
  for (size_t i = 0; i < free.workers.size(); ++i) {
    const WorkerCapacity& w = free.workers[i];
    if (free.summaries[i].reserved || !FitsWhenIdle(w, job, demand)) continue;
    int32_t fitting = 0;
    for (const GpuCapacity& g : w.devices) fitting += GpuFits(g, demand);
    const std::pair<int32_t, int64_t> key{fitting, w.free_cpu_milli};
    if (!best || key > best_key) best = i, best_key = key;
  }
  return best;
}

// Where the ranks of a job that fits no single node go: SpreadOver the
// unreserved nodes, on each the tightest fitting GPUs. Empty when they do
// not fit NodeLimit nodes now.
std::vector<SpreadPart> ChooseSpread(const PendingJob& job,
                                     const GpuDemand& demand,
                                     const FreeCapacity& free) {
  std::vector<int32_t> room(free.workers.size(), 0);
  for (size_t i = 0; i < free.workers.size(); ++i) {
    if (free.summaries[i].reserved) continue;
    room[i] = RanksFitting(free.workers[i], job, demand, RanksOf(job),
                           /*when_idle=*/false);
  }
  std::vector<SpreadPart> parts = SpreadOver(job, room);
  if (job.gpus > 0) {
    for (SpreadPart& part : parts) {
      part.devices =
          TightestDevices(free.workers[part.worker], demand, part.ranks);
    }
  }
  return parts;
}

// While it lives, `workers` (those a restarted job failed on) are held back
// from the chooser as reservations are, so the job goes elsewhere if it
// can; workers already reserved stay so.
class HeldBack {
 public:
  HeldBack(const std::vector<std::string>& workers, FreeCapacity& free,
           NodeChooser& chooser)
      : free_(free), chooser_(chooser) {
    for (size_t i = 0; i < free.workers.size(); ++i) {
      NodeSummary& s = free.summaries[i];
      if (s.reserved || std::find(workers.begin(), workers.end(),
                                  free.workers[i].id) == workers.end()) {
        continue;
      }
      s.reserved = true;
      chooser.Changed(i, free);
      held_.push_back(i);
    }
  }
  ~HeldBack() {
    for (size_t i : held_) {
      free_.summaries[i].reserved = false;
      chooser_.Changed(i, free_);
    }
  }
  HeldBack(const HeldBack&) = delete;
  HeldBack& operator=(const HeldBack&) = delete;

  bool any() const { return !held_.empty(); }

 private:
  FreeCapacity& free_;
  NodeChooser& chooser_;
  std::vector<size_t> held_;
};

FreeCapacity InitialFree(const ClusterSnapshot& snapshot) {
  FreeCapacity free{snapshot.workers(), {}};
  free.summaries.reserve(free.workers.size());
  for (const WorkerCapacity& w : free.workers) {
    free.summaries.push_back(Summarize(w));
  }
  return free;
}

// Returns the GPU compute the job was given, as fair share counts it: the
// share of each GPU it declares where an exclusive policy gives the GPU
// whole, else what each GPU gave it (a share, or all of a GPU that is not
// shareable or that an estimated job takes whole).
int64_t TakePart(const PendingJob& job, const GpuDemand& demand,
                 const Choice& choice, FreeCapacity& free,
                 std::vector<int32_t>& gpu_indices,
                 std::vector<GpuShare>& shares) {
  WorkerCapacity& w = free.workers[choice.worker];
  int64_t given = 0;
  if (demand.whole) {
    const bool whole = job.whole_gpus() || job.gpu_memory_estimated;
    given =
        int64_t{job.gpus} * (whole ? kWholeGpuMilli : job.gpu_compute_milli);
  } else {
    for (size_t pos : choice.devices) {
      given += OnGpu(w.devices[pos], demand).compute_milli;
    }
  }
  Take(w, job, demand, choice.devices);
  free.summaries[choice.worker] = Summarize(w);
  for (size_t pos : choice.devices) {
    const GpuCapacity& gpu = w.devices[pos];
    gpu_indices.push_back(gpu.index);
    const GpuDemand held = OnGpu(gpu, demand);
    if (!held.whole) {
      shares.push_back({gpu.index, held.memory_bytes, held.compute_milli});
    }
  }
  return given;
}

int64_t AddPlacement(const PendingJob& job, const GpuDemand& demand,
                     const Choice& choice, FreeCapacity& free, Plan& plan) {
  Placement p{job.id,
              free.workers[choice.worker].id,
              {},
              demand.whole && !job.whole_gpus()};
  const int64_t given =
      TakePart(job, demand, choice, free, p.gpu_indices, p.shares);
  plan.placements.push_back(std::move(p));
  return given;
}

// The placement of a job spread over `parts` (rank order: the first part's
// node runs rank 0).
int64_t AddSpreadPlacement(const PendingJob& job, const GpuDemand& demand,
                           const std::vector<SpreadPart>& parts,
                           FreeCapacity& free, Plan& plan) {
  Placement p{job.id,
              free.workers[parts[0].worker].id,
              {},
              demand.whole && !job.whole_gpus()};
  int64_t given = 0;
  int32_t first_rank = 0;
  for (const SpreadPart& part : parts) {
    const Choice choice{part.worker, part.devices};
    const PendingJob piece = PartOf(job, part.ranks);
    if (first_rank == 0) {
      given += TakePart(piece, demand, choice, free, p.gpu_indices, p.shares);
    } else {
      PlacementPart& more = p.more_nodes.emplace_back();
      more.worker_id = free.workers[part.worker].id;
      more.first_rank = first_rank;
      more.ranks = part.ranks;
      given +=
          TakePart(piece, demand, choice, free, more.gpu_indices, more.shares);
    }
    first_rank += part.ranks;
  }
  plan.placements.push_back(std::move(p));
  return given;
}

}  // namespace

Plan RunPackingPass(const ClusterSnapshot& snapshot,
                    const PackingPassOptions& options,
                    ChooserFactory make_chooser) {
  FreeCapacity free = InitialFree(snapshot);  // shrinks as jobs are placed
  std::unique_ptr<NodeChooser> chooser = make_chooser(free);
  JobOrder order(snapshot, options.fair_share);
  KnownWaits known_waits(snapshot.workers());
  int32_t reservations_left = options.reservations;
  Plan plan;
  plan.waits.reserve(snapshot.pending().size());
  // Workers held for a blocked job (backfill, or its victims stopping):
  // (position, that job's id), so a job that would fit there is told why
  // it does not go there.
  std::vector<std::pair<size_t, std::string>> held;
  // Holds `worker` for `for_job`; false when it is held already.
  auto hold = [&](size_t worker, const std::string& for_job) {
    if (free.summaries[worker].reserved) return false;
    free.summaries[worker].reserved = true;  // later jobs fit nowhere there
    chooser->Changed(worker, free);
    plan.reservations.push_back({for_job, free.workers[worker].id});
    held.push_back({worker, for_job});
    return true;
  };
  while (const PendingJob* job = order.Next()) {
    const GpuDemand demand = DemandOf(*job, options.exclusive);
    const ShapeKey key = KeyOf(*job);
    const JobWait* known = known_waits.Find(key, *job, demand);
    // One node preferred; a job that may spread goes over several when
    // none has room for all its ranks.
    auto place = [&] {
      if (std::optional<Choice> choice = chooser->Choose(*job, demand, free)) {
        const int64_t given = AddPlacement(*job, demand, *choice, free, plan);
        chooser->Changed(choice->worker, free);
        order.Placed(*job, given);
        return true;
      }
      if (!MaySpread(*job)) return false;
      const std::vector<SpreadPart> parts = ChooseSpread(*job, demand, free);
      if (parts.empty()) return false;
      const int64_t given = AddSpreadPlacement(*job, demand, parts, free, plan);
      for (const SpreadPart& part : parts) chooser->Changed(part.worker, free);
      order.Placed(*job, given);
      return true;
    };
    if (known == nullptr) {
      bool placed = false;
      if (const std::vector<std::string>* avoid = snapshot.AvoidedBy(job->id)) {
        HeldBack avoided(*avoid, free, *chooser);
        placed = avoided.any() && place();
      }
      if (placed || place()) continue;
    }
    plan.waits.push_back(known ? *known : known_waits.Add(key, *job, demand));
    plan.waits.back().job_id = job->id;
    std::string& reason = plan.waits.back().reason;
    if (plan.waits.back().kind == WaitKind::kInfeasible) continue;
    for (const auto& [worker, for_job] : held) {
      if (FitsNow(free.workers[worker], *job, demand)) {
        absl::StrAppend(&reason, "; worker ", free.workers[worker].id,
                        " has room for it but is held for ", for_job);
        break;
      }
    }
    if (const std::vector<std::string>* room = snapshot.HeldFor(job->id)) {
      std::vector<std::string> names;
      for (const std::string& id : *room) {
        // The pass's free capacity lists the snapshot's workers in order.
        const WorkerCapacity* w = snapshot.FindWorker(id);
        if (w != nullptr &&
            hold(static_cast<size_t>(w - snapshot.workers().data()), job->id)) {
          names.push_back(id);
        }
      }
      if (!names.empty()) {
        absl::StrAppend(&reason, "; worker", names.size() > 1 ? "s " : " ",
                        absl::StrJoin(names, ", "),
                        " held for it while the jobs it preempted stop");
      }
      continue;
    }
    if (reservations_left == 0) continue;
    if (std::optional<size_t> r = WorkerToReserve(*job, demand, free)) {
      --reservations_left;
      hold(*r, job->id);
      absl::StrAppend(&reason, "; worker ", free.workers[*r].id,
                      " is reserved for it");
    }
  }
  if (options.preemption) {
    PlanPreemptions(snapshot, options.exclusive, free, plan);
  }
  order.NumberWaits(plan.waits);
  return plan;
}

bool MaySpread(const PendingJob& job) {
  return job.max_nodes != 1 && RanksOf(job) > 1;
}

int32_t NodeLimit(const PendingJob& job) {
  return job.max_nodes > 0 ? job.max_nodes : RanksOf(job);
}

std::vector<SpreadPart> SpreadOver(const PendingJob& job,
                                   const std::vector<int32_t>& room) {
  std::vector<std::pair<int32_t, size_t>> by_room;  // (-ranks that fit, worker)
  for (size_t i = 0; i < room.size(); ++i) {
    if (room[i] > 0) by_room.push_back({-room[i], i});
  }
  std::sort(by_room.begin(), by_room.end());
  std::vector<SpreadPart> parts;
  int32_t left = RanksOf(job);
  for (const auto& [minus_r, worker] : by_room) {
    if (left == 0 || static_cast<int32_t>(parts.size()) == NodeLimit(job)) {
      break;
    }
    parts.push_back({worker, std::min(left, -minus_r), {}});
    left -= parts.back().ranks;
  }
  if (left > 0) parts.clear();
  return parts;
}

std::string NameWithFeatures(std::string_view base, const PassFeatures& f) {
  std::string name(base);
  if (f.fair_share) name += "+drf";
  if (f.reservations > 0) name += "+backfill";
  if (f.preemption) name += "+preempt";
  return name;
}

NodeSummary Summarize(const WorkerCapacity& w) {
  NodeSummary s;
  s.free_cpu_milli = w.free_cpu_milli;
  s.free_memory_bytes = w.free_memory_bytes;
  s.free_cpu_slots = w.free_cpu_slots;
  s.gpus = static_cast<int32_t>(w.devices.size());
  for (const GpuCapacity& g : w.devices) {
    s.free_gpu_milli += g.free_compute_milli;
    s.max_free_gpu_memory =
        std::max(s.max_free_gpu_memory, g.free_memory_bytes);
    s.max_free_compute = std::max(s.max_free_compute, g.free_compute_milli);
    if (g.wholly_free()) ++s.wholly_free_gpus;
  }
  return s;
}

bool MayFit(const NodeSummary& s, const PendingJob& job,
            const GpuDemand& demand) {
  if (s.reserved || s.free_cpu_milli < job.cpu_milli ||
      s.free_memory_bytes < job.memory_bytes) {
    return false;
  }
  if (job.gpus == 0) return s.free_cpu_slots >= job.cpu_slots;
  if (demand.whole) return s.wholly_free_gpus >= job.gpus;
  if (demand.estimated) {
    // Each GPU gives it either the whole GPU or at least the estimate.
    return s.gpus >= job.gpus && (s.wholly_free_gpus > 0 ||
                                  s.max_free_gpu_memory >= demand.memory_bytes);
  }
  // A fixed share, or the whole of a GPU that is not shareable.
  return s.gpus >= job.gpus && (s.wholly_free_gpus > 0 ||
                                (s.max_free_compute >= demand.compute_milli &&
                                 s.max_free_gpu_memory >= demand.memory_bytes));
}

std::vector<size_t> TightestDevices(const WorkerCapacity& w,
                                    const GpuDemand& demand, int32_t count) {
  std::vector<size_t> fit;
  for (size_t i = 0; i < w.devices.size(); ++i) {
    if (GpuFits(w.devices[i], demand)) fit.push_back(i);
  }
  // Shareable GPUs first on a tie, unless the demand takes GPUs whole.
  const bool share = !demand.whole;
  std::stable_sort(fit.begin(), fit.end(), [&](size_t a, size_t b) {
    const GpuCapacity& x = w.devices[a];
    const GpuCapacity& y = w.devices[b];
    return std::make_pair(x.free_compute_milli, share && !x.shareable) <
           std::make_pair(y.free_compute_milli, share && !y.shareable);
  });
  if (static_cast<int32_t>(fit.size()) > count) fit.resize(count);
  return fit;
}

std::vector<size_t> FirstDevices(const WorkerCapacity& w,
                                 const GpuDemand& demand, int32_t count) {
  std::vector<size_t> fit;
  for (size_t i = 0;
       i < w.devices.size() && static_cast<int32_t>(fit.size()) < count; ++i) {
    if (GpuFits(w.devices[i], demand)) fit.push_back(i);
  }
  return fit;
}

}  // namespace trainyard::scheduler
