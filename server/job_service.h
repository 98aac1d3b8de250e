// JobServiceImpl: the gRPC face of JobService. Thin: it converts requests,
// calls JobLifecycle / JobStore / JobWatcher, and converts statuses. All
// logic and its tests live in those classes. Thread-safe (gRPC calls it from
// many threads; every callee is thread-safe).
#ifndef TRAINYARD_SERVER_JOB_SERVICE_H_
#define TRAINYARD_SERVER_JOB_SERVICE_H_

#include <functional>

#include "server/job_lifecycle.h"
#include "server/job_store.h"
#include "server/job_watch.h"
#include "server/queue_positions.h"
#include "trainyard/v1/jobs.grpc.pb.h"

namespace trainyard::server {

class JobServiceImpl final : public v1::JobService::Service {
 public:
  JobServiceImpl(JobLifecycle* lifecycle, JobStore* store,
                 const JobWatcher* watcher)
      : lifecycle_(lifecycle), store_(store), watcher_(watcher) {}

  // Told about every refused SubmitJob (metrics). Set before serving.
  void set_on_submit_rejected(std::function<void(const absl::Status&)> f) {
    on_submit_rejected_ = std::move(f);
  }

  // Fills Job.queue_position of queued jobs in GetJob and ListJobs. Set
  // before serving; without it positions stay 0.
  void set_queue_positions(const QueuePositions* positions) {
    queue_positions_ = positions;
  }

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
  grpc::Status WatchJob(grpc::ServerContext* context,
                        const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status GetJobLogs(grpc::ServerContext* context,
                          const v1::GetJobLogsRequest* request,
                          grpc::ServerWriter<v1::LogChunk>* writer) override;

 private:
  JobLifecycle* const lifecycle_;
  JobStore* const store_;
  const JobWatcher* const watcher_;
  std::function<void(const absl::Status&)> on_submit_rejected_;
  const QueuePositions* queue_positions_ = nullptr;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_JOB_SERVICE_H_
