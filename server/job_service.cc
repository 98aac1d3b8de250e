#include "server/job_service.h"

#include <atomic>
#include <memory>

#include "absl/functional/any_invocable.h"
#include "absl/strings/str_cat.h"
#include "common/field_errors.h"
#include "common/grpc_handoffs.h"
#include "common/proto_time.h"
#include "common/rpc_status.h"
#include "common/status_macros.h"
#include "server/checkpoint_access.h"
#include "server/job_state.h"
#include "server/task_pool.h"
#include "server/usage_report.h"
#include "spec/limits.h"
#include "spec/spec.h"

namespace trainyard::server {
namespace {

absl::Status RequireJobId(const std::string& job_id) {
  if (job_id.empty()) return InvalidFieldError("job_id", "required");
  if (!spec::IsJobIdForm(job_id)) {
    return InvalidFieldError("job_id", spec::NotAJobId(job_id));
  }
  return absl::OkStatus();
}

// The longest reason a client may give for a cancel or a suspend: it is
// kept in the job's record and events.
constexpr size_t kMaxReasonLength = 1024;

absl::Status CheckReason(const std::string& reason) {
  return CheckFreeText("reason", reason, kMaxReasonLength);
}

// What the store says about a job id that does not exist.
absl::Status JobNotFound(const std::string& job_id) {
  return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
}

// A stream call refused before it started: finished at once.
template <typename M>
class RefusedStream final : public grpc::ServerWriteReactor<M> {
 public:
  explicit RefusedStream(const absl::Status& status) {
    handoffs_.Handing(GrpcHandoffs::kFinish);
    this->Finish(ToGrpcStatus(status));
  }
  void OnDone() override {
    handoffs_.Done();
    delete this;
  }

 private:
  GrpcHandoffs handoffs_;
};

// The gRPC side of a FollowedStream: the call's reactor, its sink, and the
// holder of its tenant's stream slot until gRPC is done with the call.
template <typename M>
class FollowReactor final : public grpc::ServerWriteReactor<M>,
                            public StreamSink<M> {
 public:
  FollowReactor(LiveStreams* streams, TenantGate::StreamSlot slot,
                typename FollowedStream<M>::Read feed, StreamCheck check)
      : streams_(streams),
        slot_(std::move(slot)),
        stream_(std::make_shared<FollowedStream<M>>(
            this, streams, std::move(feed), std::move(check))) {}
  // Reactions come only after the handler returns the reactor, by when
  // the stream is added.
  void Start(const std::string& job_id) {
    handoffs_.Handing(GrpcHandoffs::kReturn);
    streams_->Add(stream_, job_id);
  }

  void Write(const M* message) override {
    handoffs_.Handing(GrpcHandoffs::kWrite);
    this->StartWrite(message);
  }
  void Close(const absl::Status& status) override {
    handoffs_.Handing(GrpcHandoffs::kFinish);
    this->Finish(ToGrpcStatus(status));
  }
  void OnWriteDone(bool ok) override {
    GrpcHandoffs::Reaction reaction(&handoffs_, GrpcHandoffs::kWrite);
    stream_->OnWriteDone(ok);
  }
  void OnCancel() override {
    GrpcHandoffs::Reaction reaction(&handoffs_, GrpcHandoffs::kCancel);
    stream_->OnCancel();
  }
  void OnDone() override {
    handoffs_.Done();
    streams_->Remove(stream_.get());
    delete this;
  }

 private:
  GrpcHandoffs handoffs_;
  LiveStreams* const streams_;
  TenantGate::StreamSlot slot_;
  const std::shared_ptr<FollowedStream<M>> stream_;
};

// A DownloadCheckpoint stream. Each chunk is read and written before the
// next is read. The checkpoint is opened on `pool` (it lists and opens
// files, which may wait on the disk: gRPC's threads must not); a chunk the
// page cache holds is read on the gRPC thread whose write just finished,
// one that is not (or not all of it) on the pool. So one of a read and a
// write is under way at any time, and the one under way when the stream
// ends calls Finish: nothing touches the reactor after gRPC is done with
// it. Its tenant's stream slot is held until then.
class DownloadReactor final
    : public grpc::ServerWriteReactor<v1::CheckpointChunk> {
 public:
  using OpenFn =
      absl::AnyInvocable<absl::StatusOr<std::unique_ptr<CheckpointReader>>()>;
  DownloadReactor(TaskPool* pool, TenantGate::StreamSlot slot, OpenFn open,
                  StreamCheck token)
      : pool_(pool),
        slot_(std::move(slot)),
        open_(std::move(open)),
        token_(std::move(token)) {
    handoffs_.Handing(GrpcHandoffs::kReturn);
    pool_->Post([this] {
      absl::StatusOr<std::unique_ptr<CheckpointReader>> opened = open_();
      if (!opened.ok()) return End(opened.status());
      reader_ = *std::move(opened);
      ReadNext(CheckpointReader::Read::kMayWait);
    });
  }

  void OnWriteDone(bool ok) override {
    GrpcHandoffs::Reaction reaction(&handoffs_, GrpcHandoffs::kWrite);
    if (!ok) return End(absl::CancelledError("the client went away"));
    // The chunk's write is done: its message is free to refill.
    ReadNext(CheckpointReader::Read::kCachedOnly);
  }
  void OnCancel() override { cancelled_.store(true); }
  void OnDone() override {
    handoffs_.Done();
    delete this;
  }

 private:
  void End(const absl::Status& status) {
    handoffs_.Handing(GrpcHandoffs::kFinish);
    Finish(ToGrpcStatus(status));
  }

  void ReadNext(CheckpointReader::Read how) {
    if (cancelled_.load()) {
      return End(absl::CancelledError("the client went away"));
    }
    if (absl::Status s = token_(); !s.ok()) return End(s);
    absl::StatusOr<CheckpointReader::Got> got = reader_->Next(chunk_, how);
    if (!got.ok()) return End(got.status());
    switch (*got) {
      case CheckpointReader::Got::kChunk:
        handoffs_.Handing(GrpcHandoffs::kWrite);
        return StartWrite(&chunk_);
      case CheckpointReader::Got::kDone:
        return End(absl::OkStatus());
      case CheckpointReader::Got::kWouldWait:
        return pool_->Post(
            [this] { ReadNext(CheckpointReader::Read::kMayWait); });
    }
  }

  GrpcHandoffs handoffs_;
  TaskPool* const pool_;
  const TenantGate::StreamSlot slot_;
  OpenFn open_;
  const StreamCheck token_;
  std::unique_ptr<CheckpointReader> reader_;
  v1::CheckpointChunk chunk_;  // read into, then written
  std::atomic<bool> cancelled_{false};
};

}  // namespace

absl::StatusOr<JobServiceImpl::CallersJob> JobServiceImpl::JobOfCaller(
    const grpc::ServerContextBase& context, const std::string& job_id) const {
  ASSIGN_OR_RETURN(Caller caller, auth_->ForClient(context));
  RETURN_IF_ERROR(RequireJobId(job_id));
  ASSIGN_OR_RETURN(JobRecord record, store_->GetJob(job_id));
  if (!caller.is_admin() && record.job.tenant() != caller.tenant) {
    return JobNotFound(job_id);
  }
  return CallersJob{std::move(caller), std::move(record)};
}

absl::StatusOr<std::string> JobServiceImpl::TenantFilter(
    const Caller& caller, const std::string& requested, const char* what) {
  if (caller.is_admin()) return requested;
  if (!requested.empty() && requested != caller.tenant) {
    return absl::PermissionDeniedError(
        absl::StrCat("tenant: a token of tenant ", caller.tenant, " cannot ",
                     what, " of another tenant"));
  }
  return caller.tenant;
}

void JobServiceImpl::FillOutputFields(v1::Job& job) const {
  if (queue_positions_ != nullptr) queue_positions_->Fill(job);
  if (job_retention_ > absl::ZeroDuration() && IsTerminal(job.state()) &&
      job.has_end_time()) {
    *job.mutable_delete_time() =
        ToProtoTime(FromProtoTime(job.end_time()) + job_retention_);
  }
}

template <typename M>
grpc::ServerWriteReactor<M>* JobServiceImpl::Follow(
    const grpc::CallbackServerContext& context, const std::string& tenant,
    const std::string& job_id, typename FollowedStream<M>::Read feed) {
  absl::StatusOr<TenantGate::StreamSlot> slot = gate_->OpenStream(tenant);
  if (!slot.ok()) return new RefusedStream<M>(slot.status());
  // The check outlives the call's context: it holds the token itself.
  auto* reactor =
      new FollowReactor<M>(streams_, *std::move(slot), std::move(feed),
                           auth_->TokenStillValid(context));
  reactor->Start(job_id);
  return reactor;
}

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext* context,
                                       const v1::SubmitJobRequest* request,
                                       v1::SubmitJobResponse* response) {
  absl::StatusOr<Caller> caller = auth_->ForClient(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<SubmitResult> result = gate_->Submit(
      caller->tenant, *request, [&]() -> absl::StatusOr<SubmitResult> {
        // A client whose deadline passed has been told the call failed:
        // store nothing for it. A retry with the same request_id gets the
        // job if one was stored all the same. (The deadline, not
        // IsCancelled(), which cost a tenth of a submission's CPU.)
        if (absl::FromChrono(context->deadline()) <= absl::Now()) {
          return absl::CancelledError(
              "the call's deadline passed before the job was stored; nothing "
              "was submitted");
        }
        return lifecycle_->Submit(*request, caller->tenant);
      });
  if (!result.ok()) {
    // A dry run refused is not a submission refused.
    if (on_submit_rejected_ && !request->validate_only()) {
      on_submit_rejected_(result.status());
    }
    return ToGrpcStatus(result.status());
  }
  *response->mutable_job() = std::move(result->job);
  response->set_already_existed(result->already_existed);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* context,
                                    const v1::GetJobRequest* request,
                                    v1::Job* response) {
  absl::StatusOr<CallersJob> seen = JobOfCaller(*context, request->job_id());
  if (!seen.ok()) return ToGrpcStatus(seen.status());
  *response = std::move(seen->record.job);
  FillOutputFields(*response);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* context,
                                      const v1::ListJobsRequest* request,
                                      v1::ListJobsResponse* response) {
  absl::StatusOr<Caller> caller = auth_->ForClient(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  ListJobsQuery query;
  query.page_size = request->page_size();
  query.page_token = request->page_token();
  absl::StatusOr<std::string> tenant =
      TenantFilter(*caller, request->tenant(), "list the jobs");
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  query.tenant = *std::move(tenant);
  if (static_cast<int64_t>(request->name_contains().size()) >
      spec::kMaxNameLength) {
    return ToGrpcStatus(InvalidFieldError(
        "name_contains",
        absl::StrCat("at most ", spec::kMaxNameLength, " bytes, got ",
                     request->name_contains().size())));
  }
  query.name_contains = request->name_contains();
  for (int state : request->states()) {
    if (!IsKnownState(static_cast<v1::JobState>(state))) {
      return ToGrpcStatus(InvalidFieldError(
          "states", absl::StrCat(state, " is not a job state")));
    }
    query.states.push_back(static_cast<v1::JobState>(state));
  }
  absl::StatusOr<JobPage> page = store_->ListJobs(query);
  if (!page.ok()) return ToGrpcStatus(page.status());
  for (v1::Job& job : page->jobs) {
    FillOutputFields(job);
    *response->add_jobs() = std::move(job);
  }
  response->set_next_page_token(page->next_page_token);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::StopJob(const grpc::ServerContext& context,
                                     const std::string& job_id,
                                     const std::string& reason, StopFn stop,
                                     v1::Job* response) {
  if (absl::Status s = JobOfCaller(context, job_id).status(); !s.ok()) {
    return ToGrpcStatus(s);
  }
  if (absl::Status s = CheckReason(reason); !s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<v1::Job> job = (lifecycle_->*stop)(job_id, reason);
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext* context,
                                       const v1::CancelJobRequest* request,
                                       v1::Job* response) {
  return StopJob(*context, request->job_id(), request->reason(),
                 &JobLifecycle::Cancel, response);
}

grpc::Status JobServiceImpl::SuspendJob(grpc::ServerContext* context,
                                        const v1::SuspendJobRequest* request,
                                        v1::Job* response) {
  return StopJob(*context, request->job_id(), request->reason(),
                 &JobLifecycle::Suspend, response);
}

grpc::Status JobServiceImpl::ResumeJob(grpc::ServerContext* context,
                                       const v1::ResumeJobRequest* request,
                                       v1::Job* response) {
  absl::StatusOr<CallersJob> seen = JobOfCaller(*context, request->job_id());
  if (!seen.ok()) return ToGrpcStatus(seen.status());
  // Back in the queue, it counts against its tenant's max_queued_jobs.
  absl::StatusOr<v1::Job> job = gate_->Resume(seen->record.job.tenant(), [&] {
    return lifecycle_->Resume(request->job_id());
  });
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response = std::move(*job);
  FillOutputFields(*response);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::SetJobPriority(
    grpc::ServerContext* context, const v1::SetJobPriorityRequest* request,
    v1::Job* response) {
  absl::StatusOr<CallersJob> seen = JobOfCaller(*context, request->job_id());
  if (!seen.ok()) return ToGrpcStatus(seen.status());
  // The job's tenant's cap, whoever asks (an admin raises the cap first).
  if (absl::Status s = gate_->CheckPriority(seen->record.job.tenant(),
                                            request->priority(), "priority");
      !s.ok()) {
    return ToGrpcStatus(s);
  }
  absl::StatusOr<v1::Job> job =
      lifecycle_->SetPriority(request->job_id(), request->priority());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response = std::move(*job);
  FillOutputFields(*response);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::DeleteJob(grpc::ServerContext* context,
                                       const v1::DeleteJobRequest* request,
                                       v1::DeleteJobResponse* response) {
  if (absl::Status s = JobOfCaller(*context, request->job_id()).status();
      !s.ok()) {
    return ToGrpcStatus(s);
  }
  absl::StatusOr<DeletedJob> deleted =
      lifecycle_->Delete(request->job_id(), request->keep_checkpoints());
  if (!deleted.ok()) return ToGrpcStatus(deleted.status());
  if (on_job_deleted_) on_job_deleted_(*deleted);
  response->set_job_id(request->job_id());
  response->set_deleted_checkpoint_dir(deleted->checkpoint_dir);
  response->set_deleted_checkpoint_bytes(deleted->checkpoint_bytes);
  return grpc::Status::OK;
}

grpc::ServerWriteReactor<v1::JobEvent>* JobServiceImpl::WatchJob(
    grpc::CallbackServerContext* context, const v1::WatchJobRequest* request) {
  absl::StatusOr<CallersJob> seen = JobOfCaller(*context, request->job_id());
  if (!seen.ok()) return new RefusedStream<v1::JobEvent>(seen.status());
  return Follow<v1::JobEvent>(
      *context, seen->caller.tenant, request->job_id(),
      watcher_->Events(request->job_id(), request->after_sequence()));
}

grpc::ServerWriteReactor<v1::LogChunk>* JobServiceImpl::GetJobLogs(
    grpc::CallbackServerContext* context,
    const v1::GetJobLogsRequest* request) {
  auto refuse = [](const absl::Status& s) {
    return new RefusedStream<v1::LogChunk>(s);
  };
  // The caller first (as every call does), then its arguments.
  absl::StatusOr<CallersJob> seen = JobOfCaller(*context, request->job_id());
  if (!seen.ok()) return refuse(seen.status());
  if (request->tail_lines() < 0) {
    return refuse(InvalidFieldError(
        "tail_lines",
        absl::StrCat("must be >= 0, got ", request->tail_lines())));
  }
  if (request->tail_lines() > 0 && request->offset() != 0) {
    return refuse(InvalidFieldError("tail_lines",
                                    "not with offset: give one or the other"));
  }
  int64_t offset = request->offset();
  if (request->tail_lines() > 0) {
    absl::StatusOr<int64_t> tail =
        watcher_->TailOffset(request->job_id(), request->tail_lines());
    if (!tail.ok()) return refuse(tail.status());
    offset = *tail;
  }
  return Follow<v1::LogChunk>(
      *context, seen->caller.tenant, request->job_id(),
      watcher_->Log(request->job_id(), offset, request->follow()));
}

grpc::Status JobServiceImpl::ListCheckpoints(
    grpc::ServerContext* context, const v1::ListCheckpointsRequest* request,
    v1::ListCheckpointsResponse* response) {
  absl::StatusOr<CallersJob> seen = JobOfCaller(*context, request->job_id());
  if (!seen.ok()) return ToGrpcStatus(seen.status());
  absl::StatusOr<std::vector<v1::CheckpointInfo>> all =
      ListJobCheckpoints(seen->record.job);
  if (!all.ok()) return ToGrpcStatus(all.status());
  for (v1::CheckpointInfo& c : *all) {
    *response->add_checkpoints() = std::move(c);
  }
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetJobMetrics(
    grpc::ServerContext* context, const v1::GetJobMetricsRequest* request,
    v1::JobMetrics* response) {
  absl::StatusOr<CallersJob> seen = JobOfCaller(*context, request->job_id());
  if (!seen.ok()) return ToGrpcStatus(seen.status());
  absl::StatusOr<v1::JobMetrics> metrics =
      store_->ReadMetrics(request->job_id());
  if (!metrics.ok()) return ToGrpcStatus(metrics.status());
  *response = *std::move(metrics);
  return grpc::Status::OK;
}

grpc::ServerWriteReactor<v1::CheckpointChunk>*
JobServiceImpl::DownloadCheckpoint(
    grpc::CallbackServerContext* context,
    const v1::DownloadCheckpointRequest* request) {
  auto refuse = [](const absl::Status& s) {
    return new RefusedStream<v1::CheckpointChunk>(s);
  };
  absl::StatusOr<CallersJob> seen = JobOfCaller(*context, request->job_id());
  if (!seen.ok()) return refuse(seen.status());
  if (!request->resume_file().empty() && request->step() <= 0) {
    return refuse(InvalidFieldError(
        "resume_file", "needs step, the step of the checkpoint being resumed"));
  }
  absl::StatusOr<TenantGate::StreamSlot> slot =
      gate_->OpenStream(seen->caller.tenant);
  if (!slot.ok()) return refuse(slot.status());
  // Picking the checkpoint lists its directory: on the pool too.
  auto open = [job = std::move(seen->record.job), request = *request]()
      -> absl::StatusOr<std::unique_ptr<CheckpointReader>> {
    ASSIGN_OR_RETURN(int64_t step, PickCheckpoint(job, request));
    return CheckpointReader::Open(
        job, step, StreamFrom{request.resume_file(), request.resume_offset()});
  };
  return new DownloadReactor(&checkpoint_reads_, *std::move(slot),
                             std::move(open), auth_->TokenStillValid(*context));
}

grpc::Status JobServiceImpl::GetUsage(grpc::ServerContext* context,
                                      const v1::GetUsageRequest* request,
                                      v1::UsageReport* response) {
  absl::StatusOr<Caller> caller = auth_->ForClient(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  const absl::Time now = lifecycle_->clock()->Now();
  absl::StatusOr<UsageQuery> query = UsageQueryOf(*request, now);
  if (!query.ok()) return ToGrpcStatus(query.status());
  absl::StatusOr<std::string> tenant =
      TenantFilter(*caller, request->tenant(), "see the usage");
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  query->tenant = *std::move(tenant);
  // A running attempt as far as its workers were heard from: all of it
  // while they are, no more than it will be charged when it ends.
  absl::StatusOr<v1::UsageReport> report = ReportUsage(
      *store_, *query, now,
      [this](const JobRecord& r) { return lifecycle_->HeldUntil(r); });
  if (!report.ok()) return ToGrpcStatus(report.status());
  *response = *std::move(report);
  return grpc::Status::OK;
}

}  // namespace trainyard::server
