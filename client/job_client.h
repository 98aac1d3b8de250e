// JobClient: a small C++ client for a yard-server (JobService and
// ClusterService). Unary calls carry a deadline; the streaming calls (Watch,
// Logs) run until the server ends them and survive a server restart by
// reconnecting and resuming from the last event or byte seen. Errors are
// absl::Status with the server's canonical codes; an unreachable server is
// UNAVAILABLE "cannot reach yard-server at ADDR".
//
// Thread-safety: a JobClient may be used from several threads at once (gRPC
// stubs are thread-safe and the client holds no other mutable state).
#ifndef TRAINYARD_CLIENT_JOB_CLIENT_H_
#define TRAINYARD_CLIENT_JOB_CLIENT_H_

#include <grpcpp/channel.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_credentials.h"
#include "trainyard/v1/cluster.grpc.pb.h"
#include "trainyard/v1/jobs.grpc.pb.h"

namespace trainyard::client {

struct ClientOptions {
  std::string server = "127.0.0.1:7070";
  // Bearer token sent with every call (the server refuses calls without).
  std::string token;
  // TLS: the CA that signed the server's certificate; empty: plaintext.
  ClientTlsFiles tls;
  // How long Connect waits for the channel to become ready.
  absl::Duration connect_timeout = absl::Seconds(5);
  // Deadline of each unary call.
  absl::Duration call_timeout = absl::Seconds(10);
  // How long a broken Watch/Logs stream keeps trying to reconnect (e.g.
  // while yard-server restarts) before giving up.
  absl::Duration reconnect_timeout = absl::Seconds(60);
};

struct ListOptions {
  std::vector<trainyard::v1::JobState> states;  // empty = every state
  std::string name_contains;                    // empty = any name
  int32_t page_size = 0;                        // 0 = the server's default
  std::string page_token;
};

class JobClient {
 public:
  // Opens a channel to options.server and waits until it is ready.
  // INVALID_ARGUMENT for unreadable TLS files.
  static absl::StatusOr<std::unique_ptr<JobClient>> Connect(
      const ClientOptions& options);
  // The channel Connect would use, not yet connected.
  static absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
      const ClientOptions& options);

  // Uses an existing channel (tests, in-process servers); no connect wait.
  JobClient(std::shared_ptr<grpc::Channel> channel,
            const ClientOptions& options);

  // With validate_only the server checks the submission and creates
  // nothing (SubmitJobRequest.validate_only).
  absl::StatusOr<trainyard::v1::SubmitJobResponse> Submit(
      const trainyard::v1::JobSpec& spec, const std::string& request_id,
      bool validate_only = false);
  absl::StatusOr<trainyard::v1::Job> Get(const std::string& job_id);
  // One page of jobs.
  absl::StatusOr<trainyard::v1::ListJobsResponse> List(
      const ListOptions& options);
  // Pages through ListJobs with the filters of `filter` (its page fields
  // are not used); stops after `limit` jobs when limit > 0. Sets
  // *truncated when jobs were left out because of the limit.
  absl::StatusOr<std::vector<trainyard::v1::Job>> ListAll(
      const ListOptions& filter, int64_t limit, bool* truncated = nullptr);
  absl::StatusOr<trainyard::v1::Job> Cancel(const std::string& job_id,
                                            const std::string& reason);
  absl::StatusOr<trainyard::v1::Job> Suspend(const std::string& job_id,
                                             const std::string& reason);
  absl::StatusOr<trainyard::v1::Job> Resume(const std::string& job_id);
  absl::StatusOr<trainyard::v1::Job> SetPriority(const std::string& job_id,
                                                 int32_t priority);
  // Deletes an ended job for good, and unless keep_checkpoints its
  // checkpoint directory. FAILED_PRECONDITION for a job that has not ended.
  absl::StatusOr<trainyard::v1::DeleteJobResponse> Delete(
      const std::string& job_id, bool keep_checkpoints);

  // Calls on_event for each event after `after_sequence` until the stream
  // ends (after the job's terminal event) or on_event returns false.
  // Resumes from the last sequence seen when the stream breaks with
  // UNAVAILABLE.
  absl::Status Watch(
      const std::string& job_id, int64_t after_sequence,
      const std::function<bool(const trainyard::v1::JobEvent&)>& on_event);

  // Calls on_chunk for the job's log from `offset`, or with `tail_lines` > 0
  // from its last that-many lines; with `follow`, until the job ends.
  // Resumes from the last byte seen on UNAVAILABLE.
  absl::Status Logs(
      const std::string& job_id, int64_t offset, bool follow,
      const std::function<void(const trainyard::v1::LogChunk&)>& on_chunk,
      int32_t tail_lines = 0);

  // The job's training curve (JobService.GetJobMetrics).
  absl::StatusOr<trainyard::v1::JobMetrics> GetMetrics(
      const std::string& job_id);
  // The job's checkpoints on the server, newest first.
  absl::StatusOr<std::vector<trainyard::v1::CheckpointInfo>> ListCheckpoints(
      const std::string& job_id);
  // Streams the checkpoint `request` names to on_chunk, in order. A stream
  // broken off (UNAVAILABLE, e.g. a server restart or a dropped
  // connection) is resumed after the last chunk on_chunk took, within the
  // reconnect budget, so every byte reaches it once. A non-OK status from
  // on_chunk ends the download and is returned as is.
  absl::Status DownloadCheckpoint(
      const trainyard::v1::DownloadCheckpointRequest& request,
      const std::function<absl::Status(const trainyard::v1::CheckpointChunk&)>&
          on_chunk);

  // GPU- and CPU-slot-seconds jobs held in the request's window.
  absl::StatusOr<trainyard::v1::UsageReport> GetUsage(
      const trainyard::v1::GetUsageRequest& request);

  absl::StatusOr<trainyard::v1::ListWorkersResponse> ListWorkers();
  absl::StatusOr<trainyard::v1::ClusterStatus> GetClusterStatus();
  // Admin only: stop placing jobs on a worker and (unless keep_jobs) preempt
  // its jobs; let it take jobs again. Return the worker as it is now.
  absl::StatusOr<trainyard::v1::Worker> DrainWorker(
      const std::string& worker_id, const std::string& reason, bool keep_jobs);
  absl::StatusOr<trainyard::v1::Worker> UndrainWorker(
      const std::string& worker_id);
  // Admin only: remove a lost worker from the server's list.
  absl::Status ForgetWorker(const std::string& worker_id);

  const std::string& server() const { return options_.server; }
  const ClientOptions& options() const { return options_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

  // Adds the server address to UNAVAILABLE / DEADLINE_EXCEEDED errors, and
  // to UNAUTHENTICATED how to pass a token.
  absl::Status Annotate(const grpc::Status& status) const;
  // The token, and (unless `stream`) the unary deadline.
  void Prepare(grpc::ClientContext* context, bool stream = false) const;

 private:
  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<trainyard::v1::JobService::Stub> jobs_;
  std::unique_ptr<trainyard::v1::ClusterService::Stub> cluster_;
};

}  // namespace trainyard::client

#endif  // TRAINYARD_CLIENT_JOB_CLIENT_H_
