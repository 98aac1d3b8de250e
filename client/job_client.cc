// JobClient implementation. Streams are resumed by re-issuing the call from
// the last position seen; gRPC's channel does the reconnecting, with short
// backoff settings so a restarted server is noticed within about a second.
#include "client/job_client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/rpc_status.h"

namespace trainyard::client {
namespace {

namespace v1 = ::trainyard::v1;

std::chrono::system_clock::time_point Deadline(absl::Duration d) {
  return absl::ToChronoTime(absl::Now() + d);
}

// Why the channel cannot connect, in gRPC's words: the last connection
// error that a call failing fast carries (a refused port, a TLS handshake
// that failed and why), "" when the call gets through or says nothing.
std::string LastConnectError(grpc::Channel& channel) {
  grpc::GenericStub stub(channel.shared_from_this());
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(absl::Seconds(2)));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), reply;
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &reply, [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return "";
  std::string why = status.error_message();
  // "failed to connect to all addresses; last error: UNKNOWN: ipv4:...: X"
  if (size_t at = why.rfind(": ");
      at != std::string::npos && absl::StrContains(why, "last error")) {
    why = why.substr(at + 2);
  }
  return why;
}

// The error for a server the channel could not connect to (`tls`: the
// client speaks TLS), saying why when gRPC knows: a TLS handshake that
// failed is told apart from a server that is not there.
absl::Status Unreachable(grpc::Channel& channel, const std::string& server,
                         bool tls, absl::string_view within) {
  // Asked only of a channel whose connection failed: one still connecting
  // (a port that drops packets) would only make the answer 2 s later.
  const std::string why =
      channel.GetState(false) == GRPC_CHANNEL_TRANSIENT_FAILURE
          ? LastConnectError(channel)
          : "";
  const std::string head =
      absl::StrCat("cannot reach yard-server at ", server, within);
  // yard presents no client certificate.
  const std::string hint = TlsFailureHint(why, tls, /*client_cert=*/false);
  if (!hint.empty()) {
    return absl::UnavailableError(absl::StrCat(head, ": ", why, "; ", hint));
  }
  return absl::UnavailableError(
      absl::StrCat(head, why.empty() ? "" : absl::StrCat(": ", why),
                   " (is it running? set --server or YARD_SERVER)"));
}

// Waits until the channel is READY. Connection failures are retried for a
// short grace period (a server that is restarting, or a listen backlog that
// refused once) before giving up, so a server that is not running is still
// reported in about two seconds rather than at the full timeout.
absl::Status WaitUntilReady(grpc::Channel& channel, const std::string& server,
                            bool tls, absl::Duration timeout) {
  constexpr absl::Duration kRefusedGrace = absl::Seconds(2);
  auto deadline = Deadline(timeout);
  absl::Time give_up_on_failure =
      absl::Now() + std::min(kRefusedGrace, timeout);
  grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    bool failed = state == GRPC_CHANNEL_TRANSIENT_FAILURE ||
                  state == GRPC_CHANNEL_SHUTDOWN;
    if (failed && absl::Now() >= give_up_on_failure) {
      return Unreachable(channel, server, tls, "");
    }
    if (!channel.WaitForStateChange(state, deadline)) {
      return Unreachable(
          channel, server, tls,
          absl::StrCat(" within ", absl::FormatDuration(timeout)));
    }
    state = channel.GetState(/*try_to_connect=*/true);
  }
  return absl::OkStatus();
}

// Tracks how long a stream has been failing, to bound the retries.
class RetryBudget {
 public:
  explicit RetryBudget(absl::Duration limit) : limit_(limit) {}
  void Progress() {
    broken_since_ = absl::InfiniteFuture();
    backoff_ = absl::Milliseconds(100);
  }
  // Returns false once the stream has been broken for longer than the limit;
  // otherwise sleeps a little (growing) before the next try.
  bool Backoff() {
    absl::Time now = absl::Now();
    if (broken_since_ == absl::InfiniteFuture()) broken_since_ = now;
    if (now - broken_since_ > limit_) return false;
    absl::SleepFor(backoff_);
    backoff_ = std::min(backoff_ * 2, absl::Seconds(1));
    return true;
  }
  absl::Time deadline() const {
    return broken_since_ == absl::InfiniteFuture() ? absl::Now() + limit_
                                                   : broken_since_ + limit_;
  }

 private:
  absl::Duration limit_;
  absl::Time broken_since_ = absl::InfiniteFuture();
  absl::Duration backoff_ = absl::Milliseconds(100);
};

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> JobClient::MakeChannel(
    const ClientOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  ApplyTlsChannelArgs(options.tls, args);
  return grpc::CreateCustomChannel(options.server, *credentials, args);
}

absl::StatusOr<std::unique_ptr<JobClient>> JobClient::Connect(
    const ClientOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> made = MakeChannel(options);
  if (!made.ok()) return made.status();
  std::shared_ptr<grpc::Channel> channel = std::move(*made);
  absl::Status ready = WaitUntilReady(
      *channel, options.server, options.tls.enabled(), options.connect_timeout);
  if (!ready.ok()) return ready;
  return std::make_unique<JobClient>(std::move(channel), options);
}

JobClient::JobClient(std::shared_ptr<grpc::Channel> channel,
                     const ClientOptions& options)
    : options_(options),
      channel_(std::move(channel)),
      jobs_(v1::JobService::NewStub(channel_)),
      cluster_(v1::ClusterService::NewStub(channel_)) {}

absl::Status JobClient::Annotate(const grpc::Status& status) const {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      return absl::UnavailableError(absl::StrCat("cannot reach yard-server at ",
                                                 options_.server, ": ",
                                                 status.error_message()));
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::DeadlineExceededError(absl::StrCat(
          "yard-server at ", options_.server, " did not answer within ",
          absl::FormatDuration(options_.call_timeout)));
    case grpc::StatusCode::UNAUTHENTICATED:
      if (options_.token.empty()) {
        return absl::UnauthenticatedError(absl::StrCat(
            status.error_message(),
            "; pass --token, set YARD_TOKEN, or put token = ... in the "
            "config file"));
      }
      return FromGrpcStatus(status);
    default:
      return FromGrpcStatus(status);
  }
}

void JobClient::Prepare(grpc::ClientContext* context, bool stream) const {
  if (!stream) context->set_deadline(Deadline(options_.call_timeout));
  AddBearerToken(*context, options_.token);
}

absl::StatusOr<v1::SubmitJobResponse> JobClient::Submit(
    const v1::JobSpec& spec, const std::string& request_id,
    bool validate_only) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  request.set_request_id(request_id);
  request.set_validate_only(validate_only);
  v1::SubmitJobResponse response;
  grpc::Status s = jobs_->SubmitJob(&context, request, &response);
  if (!s.ok()) return Annotate(s);
  return response;
}

absl::StatusOr<v1::Job> JobClient::Get(const std::string& job_id) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  grpc::Status s = jobs_->GetJob(&context, request, &job);
  if (!s.ok()) return Annotate(s);
  return job;
}

absl::StatusOr<v1::ListJobsResponse> JobClient::List(
    const ListOptions& options) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::ListJobsRequest request;
  request.set_page_size(options.page_size);
  request.set_page_token(options.page_token);
  for (v1::JobState state : options.states) request.add_states(state);
  request.set_name_contains(options.name_contains);
  v1::ListJobsResponse response;
  grpc::Status s = jobs_->ListJobs(&context, request, &response);
  if (!s.ok()) return Annotate(s);
  return response;
}

absl::StatusOr<std::vector<v1::Job>> JobClient::ListAll(
    const ListOptions& filter, int64_t limit, bool* truncated) {
  constexpr int64_t kMaxPage = 500;
  std::vector<v1::Job> jobs;
  ListOptions page;
  page.states = filter.states;
  page.name_contains = filter.name_contains;
  if (truncated != nullptr) *truncated = false;
  while (true) {
    int64_t want = limit > 0 ? limit - static_cast<int64_t>(jobs.size()) : 0;
    page.page_size =
        static_cast<int32_t>(want > 0 ? std::min(want, kMaxPage) : kMaxPage);
    absl::StatusOr<v1::ListJobsResponse> response = List(page);
    if (!response.ok()) return response.status();
    for (v1::Job& job : *response->mutable_jobs()) {
      if (limit > 0 && static_cast<int64_t>(jobs.size()) >= limit) {
        if (truncated != nullptr) *truncated = true;
        return jobs;
      }
      jobs.push_back(std::move(job));
    }
    const std::string& next = response->next_page_token();
    if (next.empty()) return jobs;
    if (next == page.page_token) {
      return absl::InternalError("ListJobs returned the same page token twice");
    }
    if (limit > 0 && static_cast<int64_t>(jobs.size()) >= limit) {
      if (truncated != nullptr) *truncated = true;
      return jobs;
    }
    page.page_token = next;
  }
}

absl::StatusOr<v1::Job> JobClient::Cancel(const std::string& job_id,
                                          const std::string& reason) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  v1::Job job;
  grpc::Status s = jobs_->CancelJob(&context, request, &job);
  if (!s.ok()) return Annotate(s);
  return job;
}

absl::StatusOr<v1::Job> JobClient::Suspend(const std::string& job_id,
                                           const std::string& reason) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::SuspendJobRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  v1::Job job;
  grpc::Status s = jobs_->SuspendJob(&context, request, &job);
  if (!s.ok()) return Annotate(s);
  return job;
}

absl::StatusOr<v1::Job> JobClient::Resume(const std::string& job_id) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::ResumeJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  grpc::Status s = jobs_->ResumeJob(&context, request, &job);
  if (!s.ok()) return Annotate(s);
  return job;
}

absl::StatusOr<v1::Job> JobClient::SetPriority(const std::string& job_id,
                                               int32_t priority) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::SetJobPriorityRequest request;
  request.set_job_id(job_id);
  request.set_priority(priority);
  v1::Job job;
  grpc::Status s = jobs_->SetJobPriority(&context, request, &job);
  if (!s.ok()) return Annotate(s);
  return job;
}

absl::StatusOr<v1::DeleteJobResponse> JobClient::Delete(
    const std::string& job_id, bool keep_checkpoints) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::DeleteJobRequest request;
  request.set_job_id(job_id);
  request.set_keep_checkpoints(keep_checkpoints);
  v1::DeleteJobResponse response;
  grpc::Status s = jobs_->DeleteJob(&context, request, &response);
  if (!s.ok()) return Annotate(s);
  return response;
}

absl::Status JobClient::Watch(
    const std::string& job_id, int64_t after_sequence,
    const std::function<bool(const v1::JobEvent&)>& on_event) {
  RetryBudget budget(options_.reconnect_timeout);
  int64_t last = after_sequence;
  while (true) {
    grpc::ClientContext context;
    Prepare(&context, /*stream=*/true);
    v1::WatchJobRequest request;
    request.set_job_id(job_id);
    request.set_after_sequence(last);
    auto reader = jobs_->WatchJob(&context, request);
    v1::JobEvent event;
    bool stopped = false;
    while (reader->Read(&event)) {
      budget.Progress();
      if (event.sequence() <= last) continue;  // already delivered
      last = event.sequence();
      if (!on_event(event)) {
        context.TryCancel();
        stopped = true;
        break;
      }
    }
    grpc::Status s = reader->Finish();
    if (stopped || s.ok()) return absl::OkStatus();
    // A server shutting down cancels open streams; one that died drops them.
    bool retryable = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                     s.error_code() == grpc::StatusCode::CANCELLED;
    if (!retryable || !budget.Backoff() ||
        !channel_->WaitForConnected(absl::ToChronoTime(budget.deadline()))) {
      return Annotate(s);
    }
  }
}

absl::StatusOr<std::vector<v1::CheckpointInfo>> JobClient::ListCheckpoints(
    const std::string& job_id) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::ListCheckpointsRequest request;
  request.set_job_id(job_id);
  v1::ListCheckpointsResponse response;
  grpc::Status s = jobs_->ListCheckpoints(&context, request, &response);
  if (!s.ok()) return Annotate(s);
  return std::vector<v1::CheckpointInfo>(response.checkpoints().begin(),
                                         response.checkpoints().end());
}

absl::StatusOr<v1::JobMetrics> JobClient::GetMetrics(
    const std::string& job_id) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::GetJobMetricsRequest request;
  request.set_job_id(job_id);
  v1::JobMetrics metrics;
  grpc::Status s = jobs_->GetJobMetrics(&context, request, &metrics);
  if (!s.ok()) return Annotate(s);
  return metrics;
}

absl::StatusOr<v1::UsageReport> JobClient::GetUsage(
    const v1::GetUsageRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::UsageReport report;
  grpc::Status s = jobs_->GetUsage(&context, request, &report);
  if (!s.ok()) return Annotate(s);
  return report;
}

absl::Status JobClient::DownloadCheckpoint(
    const v1::DownloadCheckpointRequest& request,
    const std::function<absl::Status(const v1::CheckpointChunk&)>& on_chunk) {
  RetryBudget budget(options_.reconnect_timeout);
  v1::DownloadCheckpointRequest next = request;
  while (true) {
    grpc::ClientContext context;
    Prepare(&context, /*stream=*/true);
    auto reader = jobs_->DownloadCheckpoint(&context, next);
    v1::CheckpointChunk chunk;
    absl::Status stopped;
    while (stopped.ok() && reader->Read(&chunk)) {
      budget.Progress();
      stopped = on_chunk(chunk);
      if (stopped.ok()) {
        // A retry asks for the same checkpoint, after this chunk.
        next.set_step(chunk.step());
        next.set_best(false);
        next.set_resume_file(chunk.file());
        next.set_resume_offset(chunk.offset() +
                               static_cast<int64_t>(chunk.data().size()));
      }
    }
    if (!stopped.ok()) {
      context.TryCancel();
      while (reader->Read(&chunk)) {
      }
    }
    grpc::Status s = reader->Finish();
    if (!stopped.ok()) return stopped;
    if (s.ok()) return absl::OkStatus();
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE || !budget.Backoff() ||
        !channel_->WaitForConnected(absl::ToChronoTime(budget.deadline()))) {
      return Annotate(s);
    }
  }
}

absl::Status JobClient::Logs(
    const std::string& job_id, int64_t offset, bool follow,
    const std::function<void(const v1::LogChunk&)>& on_chunk,
    int32_t tail_lines) {
  RetryBudget budget(options_.reconnect_timeout);
  int64_t next = offset;
  bool tail = tail_lines > 0;  // until the first chunk says where it began
  while (true) {
    grpc::ClientContext context;
    Prepare(&context, /*stream=*/follow);
    v1::GetJobLogsRequest request;
    request.set_job_id(job_id);
    if (tail) {
      request.set_tail_lines(tail_lines);
    } else {
      request.set_offset(next);
    }
    request.set_follow(follow);
    auto reader = jobs_->GetJobLogs(&context, request);
    v1::LogChunk chunk;
    while (reader->Read(&chunk)) {
      budget.Progress();
      if (tail) {
        tail = false;
        next = chunk.offset();
      }
      int64_t end = chunk.offset() + static_cast<int64_t>(chunk.data().size());
      if (end <= next) continue;    // already delivered
      if (chunk.offset() < next) {  // overlaps what we have: trim
        chunk.mutable_data()->erase(0,
                                    static_cast<size_t>(next - chunk.offset()));
        chunk.set_offset(next);
      }
      next = end;
      on_chunk(chunk);
    }
    grpc::Status s = reader->Finish();
    if (s.ok()) return absl::OkStatus();
    bool retryable = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                     s.error_code() == grpc::StatusCode::CANCELLED;
    if (!retryable || !budget.Backoff() ||
        !channel_->WaitForConnected(absl::ToChronoTime(budget.deadline()))) {
      return Annotate(s);
    }
  }
}

absl::StatusOr<v1::ListWorkersResponse> JobClient::ListWorkers() {
  grpc::ClientContext context;
  Prepare(&context);
  v1::ListWorkersResponse response;
  grpc::Status s =
      cluster_->ListWorkers(&context, v1::ListWorkersRequest(), &response);
  if (!s.ok()) return Annotate(s);
  return response;
}

absl::StatusOr<v1::ClusterStatus> JobClient::GetClusterStatus() {
  grpc::ClientContext context;
  Prepare(&context);
  v1::ClusterStatus response;
  grpc::Status s = cluster_->GetClusterStatus(
      &context, v1::GetClusterStatusRequest(), &response);
  if (!s.ok()) return Annotate(s);
  return response;
}

absl::StatusOr<v1::Worker> JobClient::DrainWorker(const std::string& worker_id,
                                                  const std::string& reason,
                                                  bool keep_jobs) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::DrainWorkerRequest request;
  request.set_worker_id(worker_id);
  request.set_reason(reason);
  request.set_keep_jobs(keep_jobs);
  v1::Worker worker;
  grpc::Status s = cluster_->DrainWorker(&context, request, &worker);
  if (!s.ok()) return Annotate(s);
  return worker;
}

absl::StatusOr<v1::Worker> JobClient::UndrainWorker(
    const std::string& worker_id) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::UndrainWorkerRequest request;
  request.set_worker_id(worker_id);
  v1::Worker worker;
  grpc::Status s = cluster_->UndrainWorker(&context, request, &worker);
  if (!s.ok()) return Annotate(s);
  return worker;
}

absl::Status JobClient::ForgetWorker(const std::string& worker_id) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::ForgetWorkerRequest request;
  request.set_worker_id(worker_id);
  v1::ForgetWorkerResponse response;
  grpc::Status s = cluster_->ForgetWorker(&context, request, &response);
  return s.ok() ? absl::OkStatus() : Annotate(s);
}

}  // namespace trainyard::client
