// JobServiceImpl: the gRPC face of JobService. Thin: it authenticates the
// caller, converts requests, calls JobLifecycle / JobStore / JobWatcher, and
// converts statuses. All logic and its tests live in those classes.
//
// Tenancy: a tenant token sees, watches, reads the logs of and cancels only
// its own tenant's jobs. Another tenant's job answers NOT_FOUND with the
// very message of a job that does not exist, so its existence, state and
// spec do not leak; an admin token sees every job. ListJobs and GetUsage
// for another tenant are PERMISSION_DENIED (tenant names are not secret,
// jobs are).
// The streams run on gRPC's callback API, so an open one holds no thread:
// LiveStreams pumps WatchJob and GetJobLogs when their job changes, and
// DownloadCheckpoint reads each chunk when the one before is written, on
// gRPC's thread from the page cache or else on a small pool of its own.
// The other calls are synchronous.
// Thread-safe (gRPC calls it from many threads; every callee is
// thread-safe).
#ifndef TRAINYARD_SERVER_JOB_SERVICE_H_
#define TRAINYARD_SERVER_JOB_SERVICE_H_

#include <functional>

#include "server/authenticator.h"
#include "server/job_lifecycle.h"
#include "server/job_store.h"
#include "server/job_watch.h"
#include "server/live_streams.h"
#include "server/queue_positions.h"
#include "server/task_pool.h"
#include "server/tenant_limits.h"
#include "trainyard/v1/jobs.grpc.pb.h"

namespace trainyard::server {

using JobServiceBase = v1::JobService::WithCallbackMethod_WatchJob<
    v1::JobService::WithCallbackMethod_GetJobLogs<
        v1::JobService::WithCallbackMethod_DownloadCheckpoint<
            v1::JobService::Service>>>;

class JobServiceImpl final : public JobServiceBase {
 public:
  JobServiceImpl(JobLifecycle* lifecycle, JobStore* store,
                 const JobWatcher* watcher, LiveStreams* streams,
                 const Authenticator* auth, TenantGate* gate)
      : lifecycle_(lifecycle),
        store_(store),
        watcher_(watcher),
        streams_(streams),
        auth_(auth),
        gate_(gate) {}

  // Told about every refused SubmitJob (metrics). Set before serving.
  void set_on_submit_rejected(std::function<void(const absl::Status&)> f) {
    on_submit_rejected_ = std::move(f);
  }
  // Called after each job DeleteJob deletes.
  void set_on_job_deleted(std::function<void(const DeletedJob&)> f) {
    on_job_deleted_ = std::move(f);
  }

  // Fills Job.queue_position of queued jobs in GetJob and ListJobs. Set
  // before serving; without it positions stay 0.
  void set_queue_positions(const QueuePositions* positions) {
    queue_positions_ = positions;
  }
  // The server's retention of ended jobs (JobRetention): GetJob and
  // ListJobs fill Job.delete_time of ended jobs from it. Set before
  // serving; zero (the default) leaves it unset.
  void set_job_retention(absl::Duration keep_for) { job_retention_ = keep_for; }

  // Threads that read checkpoints for DownloadCheckpoint streams.
  static constexpr int kCheckpointReadThreads = 4;
  // Ends what the download streams left on the pool: after gRPC's server
  // has stopped.
  void Shutdown() { checkpoint_reads_.Shutdown(); }

  grpc::Status SubmitJob(grpc::ServerContext* context,
                         const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context,
                      const v1::GetJobRequest* request,
                      v1::Job* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context,
                        const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context,
                         const v1::CancelJobRequest* request,
                         v1::Job* response) override;
  grpc::Status SuspendJob(grpc::ServerContext* context,
                          const v1::SuspendJobRequest* request,
                          v1::Job* response) override;
  grpc::Status ResumeJob(grpc::ServerContext* context,
                         const v1::ResumeJobRequest* request,
                         v1::Job* response) override;
  grpc::Status SetJobPriority(grpc::ServerContext* context,
                              const v1::SetJobPriorityRequest* request,
                              v1::Job* response) override;
  grpc::Status DeleteJob(grpc::ServerContext* context,
                         const v1::DeleteJobRequest* request,
                         v1::DeleteJobResponse* response) override;
  grpc::ServerWriteReactor<v1::JobEvent>* WatchJob(
      grpc::CallbackServerContext* context,
      const v1::WatchJobRequest* request) override;
  grpc::ServerWriteReactor<v1::LogChunk>* GetJobLogs(
      grpc::CallbackServerContext* context,
      const v1::GetJobLogsRequest* request) override;
  grpc::Status ListCheckpoints(grpc::ServerContext* context,
                               const v1::ListCheckpointsRequest* request,
                               v1::ListCheckpointsResponse* response) override;
  grpc::ServerWriteReactor<v1::CheckpointChunk>* DownloadCheckpoint(
      grpc::CallbackServerContext* context,
      const v1::DownloadCheckpointRequest* request) override;
  grpc::Status GetJobMetrics(grpc::ServerContext* context,
                             const v1::GetJobMetricsRequest* request,
                             v1::JobMetrics* response) override;
  grpc::Status GetUsage(grpc::ServerContext* context,
                        const v1::GetUsageRequest* request,
                        v1::UsageReport* response) override;

 private:
  using StopFn = absl::StatusOr<v1::Job> (JobLifecycle::*)(
      const std::string& job_id, const std::string& reason);
  // CancelJob and SuspendJob: the caller's job, a reason of bounded
  // length, then `stop` (JobLifecycle::Cancel or Suspend).
  grpc::Status StopJob(const grpc::ServerContext& context,
                       const std::string& job_id, const std::string& reason,
                       StopFn stop, v1::Job* response);
  struct CallersJob {
    Caller caller;
    JobRecord record;
  };
  // Authenticates the caller and reads its job `job_id`: NOT_FOUND when it
  // does not exist or belongs to another tenant (the same message either
  // way).
  absl::StatusOr<CallersJob> JobOfCaller(const grpc::ServerContextBase& context,
                                         const std::string& job_id) const;
  // The tenant whose jobs a ListJobs or GetUsage asking for `requested`
  // covers: an admin's as asked (empty: every tenant), a tenant token's
  // always its own (PERMISSION_DENIED naming another).
  static absl::StatusOr<std::string> TenantFilter(const Caller& caller,
                                                  const std::string& requested,
                                                  const char* what);
  // Fills the output-only fields GetJob and ListJobs add to a stored job:
  // its queue position and its delete time.
  void FillOutputFields(v1::Job& job) const;
  // WatchJob and GetJobLogs once their arguments are checked: a stream
  // slot of the caller's tenant, then `feed` followed as `job_id` changes.
  template <typename M>
  grpc::ServerWriteReactor<M>* Follow(
      const grpc::CallbackServerContext& context, const std::string& tenant,
      const std::string& job_id, typename FollowedStream<M>::Read feed);

  JobLifecycle* const lifecycle_;
  JobStore* const store_;
  const JobWatcher* const watcher_;
  LiveStreams* const streams_;
  const Authenticator* const auth_;
  TenantGate* const gate_;
  std::function<void(const absl::Status&)> on_submit_rejected_;
  std::function<void(const DeletedJob&)> on_job_deleted_;
  const QueuePositions* queue_positions_ = nullptr;
  absl::Duration job_retention_ = absl::ZeroDuration();
  // DownloadCheckpoint's reads that may wait on the disk (opening a
  // checkpoint, a chunk not in the page cache); each download reads one
  // chunk at a time, so downloads take turns.
  TaskPool checkpoint_reads_{kCheckpointReadThreads};
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_JOB_SERVICE_H_
