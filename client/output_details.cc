// The longer human views of `yard`: one job's details (`yard get`) and the
// worker list (`yard workers`). Declared in output_format.h.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "client/output_format.h"
#include "common/proto_time.h"

namespace trainyard::client {
namespace {

namespace v1 = ::trainyard::v1;

std::string When(const google::protobuf::Timestamp& ts, absl::Time now) {
  absl::Time t = FromProtoTime(ts);
  return absl::StrCat(FormatUtcTime(t), " (", FormatAge(t, now), " ago)");
}

// "Key:  value" lines with the values aligned.
class DetailLines {
 public:
  void Add(std::string key, std::string value) {
    if (!value.empty()) lines_.emplace_back(std::move(key), std::move(value));
  }
  std::string Render() const {
    size_t width = 0;
    for (const auto& [key, value] : lines_) width = std::max(width, key.size());
    std::string out;
    // A value of several lines keeps its later lines in the value column.
    std::string indent(width + 4, ' ');
    indent[0] = '\n';
    for (const auto& [key, value] : lines_) {
      absl::StrAppend(&out, key, ":", std::string(width - key.size() + 2, ' '),
                      absl::StrReplaceAll(value, {{"\n", indent}}), "\n");
    }
    return out;
  }

 private:
  std::vector<std::pair<std::string, std::string>> lines_;
};

std::string EventLine(const v1::TrainerEvent& trainer) {
  v1::JobEvent event;
  *event.mutable_trainer() = trainer;
  return FormatEvent(event);
}

void AddProgress(const v1::Job& job, DetailLines* d) {
  if (job.has_progress()) {
    v1::TrainerEvent t;
    *t.mutable_progress() = job.progress();
    d->Add("Progress", EventLine(t));
  }
  if (job.has_last_eval()) {
    v1::TrainerEvent t;
    *t.mutable_eval() = job.last_eval();
    d->Add("Last eval", EventLine(t));
  }
  if (job.has_last_checkpoint()) {
    d->Add("Checkpoint", absl::StrCat("step ", job.last_checkpoint().step(),
                                      ": ", job.last_checkpoint().path()));
  }
  if (job.has_result()) {
    v1::TrainerEvent t;
    *t.mutable_finished() = job.result();
    d->Add("Result", EventLine(t));
    d->Add("Final checkpoint", job.result().checkpoint_path());
    if (!job.result().best_checkpoint_path().empty()) {
      d->Add("Best checkpoint",
             absl::StrFormat("%s (step %d, eval loss %.4f)",
                             job.result().best_checkpoint_path(),
                             job.result().best_step(),
                             job.result().best_eval_loss()));
    }
  }
}

// "3 on worker w1", or for ranks spread over workers
// "3 on worker w1 (ranks 0-1), w2 (ranks 2-3)".
std::string AttemptLine(const v1::Job& job) {
  std::string out = absl::StrCat(job.attempt());
  if (job.worker_id().empty()) return out;
  if (job.gang_parts().empty()) {
    // An ended attempt keeps the workers of its ranks in its record.
    const v1::Attempt* last =
        job.attempts().empty() ? nullptr : &*job.attempts().rbegin();
    if (last != nullptr && last->number() == job.attempt() &&
        !last->more_workers().empty()) {
      return absl::StrCat(out, " on workers ", last->worker_id(), ", ",
                          absl::StrJoin(last->more_workers(), ", "));
    }
    return absl::StrCat(out, " on worker ", job.worker_id());
  }
  absl::StrAppend(&out, " on worker ", job.worker_id());
  const auto ranks = [](int32_t first, int32_t n) {
    return n == 1 ? absl::StrCat(" (rank ", first, ")")
                  : absl::StrCat(" (ranks ", first, "-", first + n - 1, ")");
  };
  absl::StrAppend(&out, ranks(0, job.gang_parts(0).first_rank()));
  for (const v1::GangPart& part : job.gang_parts()) {
    absl::StrAppend(&out, ", ", part.worker_id(),
                    ranks(part.first_rank(), part.ranks()),
                    part.exited() ? " exited" : "");
  }
  return out;
}

// "GPU 0: 4.0 GiB and 250 milli-GPU, shared".
std::string GrantLine(const v1::GpuGrant& g) {
  return absl::StrFormat("GPU %d: %.1f GiB and %d milli-GPU%s", g.index(),
                         static_cast<double>(g.memory_bytes()) / (1 << 30),
                         g.compute_milli(), g.shared() ? ", shared" : "");
}

std::string AttemptsTable(const v1::Job& job, absl::Time now) {
  std::vector<std::vector<std::string>> rows;
  for (const v1::Attempt& a : job.attempts()) {
    std::string workers = a.worker_id().empty() ? "-" : a.worker_id();
    for (const std::string& more : a.more_workers()) {
      absl::StrAppend(&workers, "+", more);
    }
    rows.push_back(
        {absl::StrCat("  ", a.number()), workers,
         IsSet(a.start_time()) ? FormatAge(FromProtoTime(a.start_time()), now)
                               : "-",
         IsSet(a.end_time()) ? FormatAge(FromProtoTime(a.end_time()), now)
                             : "-",
         a.outcome() == v1::JOB_STATE_UNSPECIFIED ? "running"
                                                  : StateName(a.outcome()),
         absl::StrCat(a.resumed_from_step()), a.reason()});
  }
  return FormatTable(
      {"  #", "WORKER", "STARTED", "ENDED", "OUTCOME", "FROM-STEP", "REASON"},
      rows);
}

}  // namespace

std::string FormatJobDetails(const v1::Job& job, absl::Time now) {
  DetailLines d;
  d.Add("ID", job.id());
  d.Add("Name", job.name());
  std::string state = StateName(job.state());
  const bool queued = job.state() == v1::QUEUED;
  if (queued && job.queue_position() > 0) {
    absl::StrAppend(&state, " (#", job.queue_position(), " in the queue)");
  }
  if (!queued && !job.state_reason().empty())
    absl::StrAppend(&state, ": ", job.state_reason());
  d.Add("State", state);
  if (queued) d.Add("Waiting", job.state_reason());
  d.Add("Tenant", job.tenant());
  if (job.attempt() > 0) {
    d.Add("Attempt", AttemptLine(job));
  }
  if (job.spec().max_restarts() > 0) {
    std::string backoff;
    const absl::Time after = FromProtoTime(job.restart_after());
    if (job.state() == v1::QUEUED && IsSet(job.restart_after()) &&
        after > now) {
      // Rounded up: "0s" would read as over while it still waits.
      backoff = absl::StrCat(
          "; the next attempt waits ",
          FormatAge(now, now + absl::Ceil(after - now, absl::Seconds(1))));
    }
    d.Add("Restarts",
          absl::StrCat(job.restarts(), " of ", job.spec().max_restarts(),
                       " after failures", backoff));
  }
  if (!job.spec().depends_on().empty()) {
    d.Add("Depends on",
          absl::StrCat(absl::StrJoin(job.spec().depends_on(), ", "),
                       job.dependencies_met() ? " (all succeeded)" : ""));
  }
  if (job.spec().has_warm_start()) {
    const v1::WarmStart& w = job.spec().warm_start();
    const std::string which = w.best()       ? "its best checkpoint"
                              : w.step() > 0 ? absl::StrCat("step ", w.step())
                                             : "its newest checkpoint";
    d.Add("Warm start",
          job.warm_start_checkpoint().empty()
              ? absl::StrCat(w.job(), ", ", which, " (picked when ", w.job(),
                             " ends)")
              : absl::StrCat(w.job(), " step ", job.warm_start_step(), " (",
                             job.warm_start_checkpoint(), ")"));
  }
  if (const v1::Concurrency& c = job.spec().concurrency(); !c.group().empty()) {
    d.Add("Concurrency",
          absl::StrCat("group ", OneLine(c.group()), ", at most ",
                       c.max_running(), " running"));
  }
  if (const v1::Halving& h = job.spec().halving(); !h.group().empty()) {
    d.Add("Halving",
          absl::StrCat("group ", OneLine(h.group()), ", rungs at step ",
                       h.min_steps(), " and each ", h.factor(),
                       "x further, the best 1/", h.factor(), " going on"));
  }
  if (job.spec().time_limit_s() > 0) {
    d.Add("Time limit",
          absl::FormatDuration(absl::Seconds(job.spec().time_limit_s())));
  }
  if (const auto& models = job.spec().resources().gpu_models();
      !models.empty()) {
    // The server's rule (scheduler/gpu_models.h), so users need not guess.
    d.Add("GPU models",
          absl::StrCat(absl::StrJoin(models, ", "),
                       " (only GPUs whose name contains one, case ignored)"));
  }
  for (const v1::GpuGrant& g : job.gpu_grants()) {
    d.Add("GPU share", GrantLine(g));
  }
  if (IsSet(job.create_time())) d.Add("Created", When(job.create_time(), now));
  if (IsSet(job.start_time())) d.Add("Started", When(job.start_time(), now));
  if (IsSet(job.end_time())) d.Add("Ended", When(job.end_time(), now));
  if (IsSet(job.delete_time())) {
    const absl::Time t = FromProtoTime(job.delete_time());
    d.Add("Deleted at",
          absl::StrCat(FormatUtcTime(t), " (in ", FormatAge(now, t),
                       ", by the server's job retention)"));
  }
  AddProgress(job, &d);
  d.Add("Checkpoint dir", job.checkpoint_dir());
  d.Add("Request id", job.request_id());
  std::string out = d.Render();
  if (job.attempts_size() > 0) {
    absl::StrAppend(&out, "Attempts:\n", AttemptsTable(job, now));
  }
  return out;
}

std::string WorkerStateName(v1::WorkerState state) {
  if (state == v1::WORKER_STATE_UNSPECIFIED) return "-";
  const std::string& name = v1::WorkerState_Name(state);
  if (name.empty()) return absl::StrCat(static_cast<int>(state));
  return std::string(absl::StripPrefix(name, "WORKER_"));
}

namespace {

// The FREE-GPUS cell: "1/2", and whether the worker's GPUs run under NVIDIA
// MPS (the server shares only those): "1/2 MPS", or "1/2 (1 MPS)" for
// some of them.
std::string FreeGpus(const v1::Worker& w) {
  const int n = w.devices_size();
  const int mps = static_cast<int>(
      std::count_if(w.devices().begin(), w.devices().end(),
                    [](const v1::Device& d) { return d.mps(); }));
  std::string out = absl::StrCat(w.free_gpus(), "/", n);
  if (mps == n && n > 0) {
    absl::StrAppend(&out, " MPS");
  } else if (mps > 0) {
    absl::StrAppend(&out, " (", mps, " MPS)");
  }
  return out;
}

}  // namespace

std::string FormatWorkersTable(const std::vector<v1::Worker>& workers,
                               const v1::ClusterStatus* status,
                               absl::Time now) {
  std::vector<std::vector<std::string>> rows;
  for (const v1::Worker& w : workers) {
    std::string state = WorkerStateName(w.state());
    if (w.has_drain()) {
      // A drained worker can also be lost; it stays drained when it returns.
      const std::string reason = OneLine(w.drain().reason());
      absl::StrAppend(
          &state,
          w.state() == v1::WORKER_DRAINING ? " (admin" : " (drained by admin",
          reason.empty() ? "" : ": ", reason, ")");
    }
    std::vector<std::string> jobs;
    for (const auto& ref : w.jobs()) jobs.push_back(ref.job_id());
    rows.push_back(
        {w.id(), w.hostname().empty() ? "-" : w.hostname(), state,
         absl::StrCat(w.free_cpu_slots(), "/", w.cpu_slots()), FreeGpus(w),
         jobs.empty() ? "-" : absl::StrJoin(jobs, ","),
         IsSet(w.last_heartbeat())
             ? FormatAge(FromProtoTime(w.last_heartbeat()), now) + " ago"
             : "-"});
  }
  std::string out = FormatTable(
      {"ID", "HOST", "STATE", "FREE-SLOTS", "FREE-GPUS", "JOBS", "HEARTBEAT"},
      rows);
  if (status != nullptr) {
    absl::StrAppend(
        &out,
        absl::StrFormat(
            "\n%d ready, %s%d lost; cpu slots %d/%d free; gpus %d/%d free; "
            "jobs %d queued, %s%d running, %d succeeded, %d failed, %d "
            "cancelled\n",
            status->workers_ready(),
            status->workers_draining() == 0
                ? std::string()
                : absl::StrCat(status->workers_draining(), " draining, "),
            status->workers_lost(), status->cpu_slots_free(),
            status->cpu_slots_total(), status->gpus_free(),
            status->gpus_total(), status->jobs_queued(),
            status->jobs_suspended() == 0
                ? std::string()
                : absl::StrCat(status->jobs_suspended(), " suspended, "),
            status->jobs_running() + status->jobs_scheduled(),
            status->jobs_succeeded(), status->jobs_failed(),
            status->jobs_cancelled()));
  }
  return out;
}

}  // namespace trainyard::client
