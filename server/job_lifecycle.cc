// JobLifecycle: client and scheduler driven changes. Worker reports are in
// job_reports.cc.
#include "server/job_lifecycle.h"

#include <google/protobuf/unknown_field_set.h>
#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/field_errors.h"
#include "common/log.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "server/attempt_usage.h"
#include "server/checkpoint_paths.h"
#include "server/exit_decision.h"
#include "server/halving.h"
#include "server/job_state.h"
#include "server/warm_starts.h"
#include "spec/limits.h"

namespace trainyard::server {
namespace {

// On the wire a spec field this server does not know, or a known one sent
// with the wrong wire type, arrives as an unknown field. Running the job
// without it would run something other than what was asked: refuse it,
// naming where it was and its field number.
absl::Status RejectUnknownFields(const google::protobuf::Message& message,
                                 const std::string& path) {
  const google::protobuf::Reflection* reflection = message.GetReflection();
  const google::protobuf::UnknownFieldSet& unknown =
      reflection->GetUnknownFields(message);
  if (!unknown.empty()) {
    return InvalidFieldError(
        path, absl::StrCat("unknown field number ", unknown.field(0).number(),
                           " (not part of this server's JobSpec, or sent "
                           "with the wrong type)"));
  }
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const google::protobuf::FieldDescriptor* f : fields) {
    if (f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
      continue;
    }
    const std::string child = absl::StrCat(path, ".", f->name());
    if (f->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(message, f); ++i) {
        RETURN_IF_ERROR(
            RejectUnknownFields(reflection->GetRepeatedMessage(message, f, i),
                                absl::StrCat(child, "[", i, "]")));
      }
    } else {
      RETURN_IF_ERROR(
          RejectUnknownFields(reflection->GetMessage(message, f), child));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Duration RestartBackoff(absl::Duration base, int32_t k) {
  const absl::Duration cap = std::max(base, kMaxRestartBackoff);
  absl::Duration wait = base;
  for (int32_t i = 1; i < k && wait < cap; ++i) wait *= 2;
  return std::min(wait, cap);
}

bool IsCurrentAttempt(const JobRecord& record, const std::string& worker_id,
                      int32_t attempt) {
  return IsActive(record.job.state()) && record.job.attempt() == attempt &&
         (record.job.worker_id() == worker_id ||
          PartOn(record, worker_id) != nullptr);
}

const v1::GangPart* PartOn(const JobRecord& record,
                           const std::string& worker_id) {
  if (!IsActive(record.job.state())) return nullptr;
  for (const v1::GangPart& part : record.job.gang_parts()) {
    if (part.worker_id() == worker_id) return &part;
  }
  return nullptr;
}

std::vector<std::string> WorkersOf(const JobRecord& record,
                                   const std::string& except) {
  std::vector<std::string> out;
  if (!IsActive(record.job.state())) return out;
  if (record.job.worker_id() != except && !record.job.own_ranks_exited()) {
    out.push_back(record.job.worker_id());
  }
  for (const v1::GangPart& part : record.job.gang_parts()) {
    if (!part.exited() && part.worker_id() != except) {
      out.push_back(part.worker_id());
    }
  }
  return out;
}

absl::Time HeldUntil(const WorkerRegistry& workers, const JobRecord& record) {
  const std::vector<std::string> held_by = WorkersOf(record);
  // No worker (not active): as a worker not known would be.
  if (held_by.empty()) return workers.HeldUntil("");
  absl::Time until = absl::InfinitePast();
  for (const std::string& worker : held_by) {
    until = std::max(until, workers.HeldUntil(worker, record.job.id(),
                                              record.job.attempt()));
  }
  return until;
}

absl::Time JobLifecycle::HeldUntil(const JobRecord& record) const {
  return server::HeldUntil(*workers_, record);
}

absl::Time ExitTimeOf(const v1::JobExited& exit, absl::Time now) {
  return exit.has_exit_time() ? FromProtoTime(exit.exit_time()) : now;
}

void ReleaseHoldings(JobRecord& record) {
  record.gpu_indices.clear();
  record.job.clear_gpu_grants();
  record.job.clear_gang_parts();
  record.job.clear_pending_failure();
  record.job.clear_pending_failure_echoes();
  record.job.clear_pending_failure_final();
  record.job.clear_own_ranks_exited();
}

void StopAttemptOn(WorkerRegistry* workers, const std::string& job_id,
                   int32_t attempt, const std::vector<std::string>& on) {
  v1::ServerMessage stop;
  stop.mutable_stop_attempt()->set_job_id(job_id);
  stop.mutable_stop_attempt()->set_attempt(attempt);
  for (const std::string& worker : on) workers->Send(worker, stop);
}

JobLifecycle::JobLifecycle(JobStore* store, WorkerRegistry* workers,
                           Clock* clock, JobLifecycleOptions options)
    : store_(store),
      workers_(workers),
      clock_(clock),
      options_(std::move(options)) {}

void JobLifecycle::WakeScheduler() const {
  if (wake_scheduler_) wake_scheduler_();
}

absl::StatusOr<v1::Job> JobLifecycle::SetPriority(const std::string& job_id,
                                                  int32_t priority) {
  RETURN_IF_ERROR(CheckFieldRange("priority", priority, -spec::kMaxPriority,
                                  spec::kMaxPriority));
  int32_t before = 0;
  ASSIGN_OR_RETURN(JobRecord record,
                   store_->UpdateJob(
                       job_id, Durability::kTransition,
                       [&](JobRecord& r,
                           std::vector<v1::JobEvent>&) -> absl::StatusOr<bool> {
                         RETURN_IF_ERROR(CheckNotEnded(r.job));
                         before = r.job.spec().priority();
                         if (before == priority) return false;
                         r.job.mutable_spec()->set_priority(priority);
                         return true;
                       }));
  if (before != priority) {
    YARD_LOG(INFO) << "job " << job_id << " priority " << before << " -> "
                   << priority;
    WakeScheduler();
  }
  return std::move(record.job);
}

absl::StatusOr<SubmitResult> JobLifecycle::Submit(
    const v1::SubmitJobRequest& request, const std::string& tenant) {
  if (!request.has_spec()) {
    return InvalidFieldError("spec", "required");
  }
  RETURN_IF_ERROR(CheckFreeText("request_id", request.request_id(),
                                options_.max_request_id_length));
  RETURN_IF_ERROR(RejectUnknownFields(request.spec(), "spec"));
  v1::JobSpec spec = spec::WithDefaults(request.spec());
  RETURN_IF_ERROR(
      PrefixFields("spec.", spec::ValidateJobSpec(spec, options_.validation)));

  v1::Job job;
  job.set_tenant(tenant);
  job.set_name(spec.name());
  *job.mutable_spec() = spec;
  // A request id used before with another spec is refused (the check and
  // the submission alike); with the same spec it names the earlier job.
  // Its priority may have been changed since (SetPriority): not compared.
  auto reuse = [&](const JobRecord& earlier) -> absl::Status {
    v1::JobSpec stored = earlier.job.spec();
    stored.set_priority(spec.priority());
    if (google::protobuf::util::MessageDifferencer::Equals(stored, spec)) {
      return absl::OkStatus();
    }
    return FieldError(
        absl::StatusCode::kAlreadyExists, "request_id",
        absl::StrCat(request.request_id(), " was already used by job ",
                     earlier.job.id(), " with a different spec"));
  };
  if (request.validate_only()) {
    ASSIGN_OR_RETURN(std::optional<JobRecord> earlier,
                     store_->FindJobByRequest(tenant, request.request_id()));
    if (earlier.has_value()) {
      RETURN_IF_ERROR(reuse(*earlier));
      return SubmitResult{std::move(earlier->job), true};
    }
    RETURN_IF_ERROR(PrefixFields("spec.", CheckSourceJobs(spec, tenant)));
    return SubmitResult{std::move(job), false};
  }
  job.set_request_id(request.request_id());
  // Only for a new job: a retried submission gets the job its first try
  // made even if a dependency has failed since.
  ASSIGN_OR_RETURN(
      JobStore::Created created, store_->CreateJob(std::move(job), [&] {
        return PrefixFields("spec.", CheckSourceJobs(spec, tenant));
      }));
  if (created.already_existed) RETURN_IF_ERROR(reuse(created.record));
  if (!created.already_existed) {
    YARD_LOG(INFO) << "job " << created.record.job.id() << " submitted"
                   << (spec.name().empty() ? "" : " (") << spec.name()
                   << (spec.name().empty() ? "" : ")");
    WakeScheduler();
  }
  return SubmitResult{std::move(created.record.job), created.already_existed};
}

// The job `id` that `field` of a tenant's spec names: INVALID_ARGUMENT, as
// if it did not exist, when it does not or is another tenant's.
absl::StatusOr<v1::Job> JobLifecycle::OwnJob(const std::string& id,
                                             const std::string& tenant,
                                             absl::string_view field) const {
  absl::StatusOr<JobRecord> r = store_->GetJob(id);
  if (absl::IsNotFound(r.status()) || (r.ok() && r->job.tenant() != tenant)) {
    return InvalidFieldError(field, absl::StrCat("job ", id, " not found"));
  }
  RETURN_IF_ERROR(r.status());
  return std::move(r->job);
}

// Each job of depends_on must exist, be the tenant's own and still be able
// to succeed.
absl::Status JobLifecycle::CheckDependencies(const v1::JobSpec& spec,
                                             const std::string& tenant) const {
  for (int i = 0; i < spec.depends_on_size(); ++i) {
    const std::string& id = spec.depends_on(i);
    const std::string field = absl::StrCat("depends_on[", i, "]");
    ASSIGN_OR_RETURN(v1::Job dep, OwnJob(id, tenant, field));
    const v1::JobState state = dep.state();
    if (IsTerminal(state) && state != v1::SUCCEEDED) {
      return FieldError(absl::StatusCode::kFailedPrecondition, field,
                        absl::StrCat("job ", id, " ended ", JobStateName(state),
                                     ", so this job could never start"));
    }
  }
  return absl::OkStatus();
}

// The source must exist and be the tenant's own; once it has ended, it
// must hold the checkpoint asked for (before then it is picked later).
absl::Status JobLifecycle::CheckWarmStart(const v1::JobSpec& spec,
                                          const std::string& tenant) const {
  if (!spec.has_warm_start()) return absl::OkStatus();
  ASSIGN_OR_RETURN(v1::Job source,
                   OwnJob(spec.warm_start().job(), tenant, "warm_start.job"));
  if (!IsTerminal(source.state())) return absl::OkStatus();
  return PickWarmStart(spec.warm_start(), source).status();
}

absl::Status JobLifecycle::CheckSourceJobs(const v1::JobSpec& spec,
                                           const std::string& tenant) const {
  RETURN_IF_ERROR(CheckDependencies(spec, tenant));
  return CheckWarmStart(spec, tenant);
}

absl::StatusOr<v1::Job> JobLifecycle::Cancel(const std::string& job_id,
                                             const std::string& reason) {
  const std::string why = reason.empty() ? "cancelled by user" : reason;
  v1::JobState before = v1::JOB_STATE_UNSPECIFIED;
  std::vector<std::string> held_by;  // of a SCHEDULED job, before the cancel
  ASSIGN_OR_RETURN(
      JobRecord record,
      store_->UpdateJob(
          job_id, Durability::kTransition,
          [&](JobRecord& r,
              std::vector<v1::JobEvent>& events) -> absl::StatusOr<bool> {
            before = r.job.state();
            RETURN_IF_ERROR(CheckNotEnded(r.job));
            if (before == v1::QUEUED || before == v1::SCHEDULED ||
                before == v1::SUSPENDED) {
              held_by = WorkersOf(r);
              ASSIGN_OR_RETURN(
                  *events.emplace_back().mutable_state_change(),
                  Transition(r.job, v1::CANCELLED, why, clock_->Now()));
              ReleaseHoldings(r);
              return true;
            }
            if (r.cancel_requested()) return false;  // already on its way
            r.cancel_reason = why;
            r.job.set_state_reason(absl::StrCat("cancel requested: ", why));
            return true;
          }));
  if (before == v1::SCHEDULED) {
    // The workers may have started it already: stop that attempt at once.
    StopAttemptOn(workers_, job_id, record.job.attempt(), held_by);
  } else if (IsActive(record.job.state())) {
    // Sent again on a repeated cancel: harmless, and it covers a Cancel
    // lost with a broken stream.
    for (const std::string& worker : WorkersOf(record)) {
      workers_->Send(worker, CancelFor(record));
    }
  }
  YARD_LOG(INFO) << "job " << job_id << " cancel: " << why << " (was "
                 << JobStateName(before) << ")";
  WakeScheduler();
  return std::move(record.job);
}

v1::ServerMessage JobLifecycle::CancelFor(const JobRecord& record) const {
  v1::ServerMessage msg;
  v1::Cancel* cancel = msg.mutable_cancel();
  cancel->set_job_id(record.job.id());
  cancel->set_attempt(record.job.attempt());
  cancel->set_grace_ms(options_.cancel_grace_ms);
  return msg;
}

absl::StatusOr<JobRecord> JobLifecycle::Assign(
    const std::string& job_id, const std::string& worker_id,
    const std::vector<int32_t>& gpu_indices,
    const std::vector<scheduler::GpuShare>& shares,
    const std::vector<scheduler::PlacementPart>& more_nodes) {
  const auto add_grants = [](const std::vector<scheduler::GpuShare>& from,
                             auto* to) {
    for (const scheduler::GpuShare& share : from) {
      v1::GpuGrant* g = to->Add();
      g->set_index(share.index);
      g->set_shared(true);
      g->set_memory_bytes(share.memory_bytes);
      g->set_compute_milli(share.compute_milli);
    }
  };
  return store_->UpdateJob(
      job_id, Durability::kTransition,
      [&](JobRecord& r,
          std::vector<v1::JobEvent>& events) -> absl::StatusOr<bool> {
        ASSIGN_OR_RETURN(*events.emplace_back().mutable_state_change(),
                         StartAttempt(r.job, worker_id, clock_->Now()));
        // The first attempt starts on an empty directory: one left there
        // under this id (by a job of an older or a discarded store) is not
        // this job's to resume from.
        if (r.job.checkpoint_dir().empty() &&
            !options_.checkpoint_root.empty()) {
          ASSIGN_OR_RETURN(
              std::string aside,
              SetAsideStaleCheckpoints(options_.checkpoint_root, job_id));
          if (!aside.empty()) {
            YARD_LOG(WARNING)
                << "job " << job_id << " starts its first attempt, but "
                << CheckpointDirOf(options_.checkpoint_root, job_id)
                << " already held checkpoints it did not write; moved them "
                   "to "
                << aside;
          }
        }
        // Every attempt resumes from ROOT/<id> under the current root.
        r.job.set_checkpoint_dir(
            CheckpointDirOf(options_.checkpoint_root, job_id));
        ReleaseHoldings(r);
        r.gpu_indices = gpu_indices;
        add_grants(shares, r.job.mutable_gpu_grants());
        v1::Attempt* attempt =
            r.job.mutable_attempts(r.job.attempts_size() - 1);
        for (const scheduler::PlacementPart& p : more_nodes) {
          v1::GangPart* part = r.job.add_gang_parts();
          part->set_worker_id(p.worker_id);
          part->set_first_rank(p.first_rank);
          part->set_ranks(p.ranks);
          part->mutable_gpu_indices()->Add(p.gpu_indices.begin(),
                                           p.gpu_indices.end());
          add_grants(p.shares, part->mutable_gpu_grants());
          attempt->add_more_workers(p.worker_id);
        }
        const Holding held =
            PlacementHolding(r.job, static_cast<int64_t>(r.gpu_indices.size()));
        attempt->set_gpu_milli(held.gpu_milli);
        attempt->set_cpu_slots(held.cpu_slots);
        return true;
      });
}

v1::ServerMessage JobLifecycle::AssignmentFor(const JobRecord& record) const {
  return AssignmentFor(record, record.job.worker_id());
}

v1::ServerMessage JobLifecycle::AssignmentFor(
    const JobRecord& record, const std::string& worker_id) const {
  v1::ServerMessage msg;
  v1::Assignment* a = msg.mutable_assignment();
  a->set_job_id(record.job.id());
  a->set_attempt(record.job.attempt());
  *a->mutable_spec() = record.job.spec();
  a->set_checkpoint_dir(record.job.checkpoint_dir());
  a->set_warm_start_checkpoint(record.job.warm_start_checkpoint());
  if (const v1::GangPart* part = PartOn(record, worker_id)) {
    *a->mutable_gpu_indices() = part->gpu_indices();
    *a->mutable_gpu_grants() = part->gpu_grants();
    a->set_first_rank(part->first_rank());
    a->set_ranks(part->ranks());
  } else {
    for (int32_t g : record.gpu_indices) a->add_gpu_indices(g);
    *a->mutable_gpu_grants() = record.job.gpu_grants();
    if (!record.job.gang_parts().empty()) {
      a->set_ranks(record.job.gang_parts(0).first_rank());
    }
  }
  if (!record.job.gang_parts().empty()) {
    const v1::GangPart& last = *record.job.gang_parts().rbegin();
    a->set_world_size(last.first_rank() + last.ranks());
  }
  return msg;
}

absl::Status JobLifecycle::ReturnToQueue(const std::string& job_id,
                                         int32_t attempt,
                                         const std::string& worker_id,
                                         const std::string& reason,
                                         absl::Time ended) {
  bool changed = false;
  std::vector<std::string> others;  // workers of the attempt's other ranks
  absl::StatusOr<JobRecord> r = store_->UpdateJob(
      job_id, Durability::kTransition,
      [&](JobRecord& r,
          std::vector<v1::JobEvent>& events) -> absl::StatusOr<bool> {
        if (!IsCurrentAttempt(r, worker_id, attempt)) return false;
        others = WorkersOf(r, worker_id);
        const bool cancel = r.cancel_requested();
        // The trainer reported TrainFinished (after its final checkpoint)
        // but its exit never arrived: the training is done, and running it
        // again would only finish it a second time.
        const bool finished = !cancel && r.job.has_result();
        v1::JobState to = finished ? v1::SUCCEEDED : v1::QUEUED;
        std::string why = finished ? absl::StrCat("finished (", reason,
                                                  " before reporting the exit)")
                                   : reason;
        if (cancel) {
          std::tie(to, why) = CancelledOutcome(r);
          absl::StrAppend(&why, " (", reason, ")");
        }
        ASSIGN_OR_RETURN(*events.emplace_back().mutable_state_change(),
                         Transition(r.job, to, why, clock_->Now(), ended));
        if (to == v1::SUCCEEDED) FillHalvingResult(r.job);
        ReleaseHoldings(r);
        changed = true;
        return true;
      });
  if (!r.ok()) return r.status();
  if (changed) {
    // The ranks elsewhere cannot go on without these.
    StopAttemptOn(workers_, job_id, attempt, others);
    YARD_LOG(INFO) << "job " << job_id << " attempt " << attempt << " -> "
                   << JobStateName(r->job.state()) << ": " << reason;
    WakeScheduler();
  }
  return absl::OkStatus();
}

absl::StatusOr<int> JobLifecycle::RecoverHeldJobs() {
  ASSIGN_OR_RETURN(
      std::vector<JobRecord> held,
      store_->JobsInStates({v1::SCHEDULED, v1::RUNNING, v1::PREEMPTING}));
  ASSIGN_OR_RETURN(std::optional<absl::Time> alive, store_->LastAlive());
  for (const JobRecord& r : held) {
    for (const std::string& worker : WorkersOf(r)) {
      workers_->AddRecovered(worker, {}, false,
                             alive.value_or(absl::InfinitePast()));
    }
  }
  return static_cast<int>(held.size());
}

absl::Status JobLifecycle::MarkDependenciesMet(const std::string& job_id) {
  return store_
      ->UpdateJob(job_id, Durability::kTransition,
                  [&](JobRecord& r, std::vector<v1::JobEvent>&) {
                    if (r.job.dependencies_met()) return false;
                    r.job.set_dependencies_met(true);
                    return true;
                  })
      .status();
}

absl::Status JobLifecycle::SetWarmStart(const std::string& job_id,
                                        const std::string& checkpoint,
                                        int64_t step) {
  return store_
      ->UpdateJob(job_id, Durability::kTransition,
                  [&](JobRecord& r, std::vector<v1::JobEvent>&) {
                    if (r.job.state() != v1::QUEUED ||
                        !r.job.warm_start_checkpoint().empty()) {
                      return false;
                    }
                    r.job.set_warm_start_checkpoint(checkpoint);
                    r.job.set_warm_start_step(step);
                    return true;
                  })
      .status();
}

absl::Status JobLifecycle::SetWaitReason(const std::string& job_id,
                                         const std::string& reason) {
  return store_
      ->UpdateJob(
          job_id, Durability::kTelemetry,
          [&](JobRecord& r, std::vector<v1::JobEvent>&) {
            if (r.job.state() != v1::QUEUED || r.job.state_reason() == reason) {
              return false;
            }
            r.job.set_state_reason(reason);
            return true;
          })
      .status();
}

}  // namespace trainyard::server
