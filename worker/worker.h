// Worker: one yard-worker node put together. It joins the JobRunner (the
// jobs on this node) to the ServerLink (the stream to the server): server
// messages become job starts, cancels and preemptions, job reports go up
// the link, and every hello and heartbeat lists the running attempts. When
// the server has not answered for its lease (it re-queues this worker's
// jobs), the jobs are stopped, so none runs twice. The hello carries the
// devices' capacity, each heartbeat their live figures. The process-level
// concerns (flags, signals) stay in worker_main.cc.
//
// Thread-safe. Shutdown() may be called once, from any thread.
#ifndef TRAINYARD_WORKER_WORKER_H_
#define TRAINYARD_WORKER_WORKER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "trainyard/v1/cluster.pb.h"
#include "trainyard/v1/worker.pb.h"
#include "worker/job_runner.h"
#include "worker/server_link.h"

namespace trainyard::worker {

inline constexpr char kWorkerVersion[] = "0.1.0";

struct WorkerConfig {
  std::string worker_id;
  std::string hostname;
  // WorkerHello.instance_id; empty: a random one made for this Worker.
  std::string instance_id;
  std::vector<trainyard::v1::Device> devices;
  JobRunnerOptions runner;  // cpu_slots and gpus come from here
  ServerLinkOptions link;
  // Sees every job report before it goes to the server (metrics).
  std::function<void(const trainyard::v1::JobUpdate&)> observe_report;
  // The devices' live figures for each heartbeat (a cached reading, see
  // DeviceTelemetry); empty: heartbeats carry none.
  std::function<std::vector<trainyard::v1::Device>()> device_figures;
  // The server refused this worker (UNAUTHENTICATED or PERMISSION_DENIED:
  // its join token, role or client certificate): nothing but the operator
  // can change that, so the process should end (worker_main: exit 3).
  // Called from the link's thread, once per refusal.
  std::function<void(const absl::Status&)> on_refused;
};

class Worker : public ServerLink::Delegate {
 public:
  explicit Worker(WorkerConfig config);
  // Stops the link, then kills and reaps whatever still runs.
  ~Worker() override;

  // Connects to the server in the background.
  void Start();
  // Refuses new assignments and tells the server it is draining (so the
  // jobs it hands back go elsewhere), SIGTERMs the jobs (they checkpoint
  // and exit),
  // SIGKILLs what still runs after `grace`, then sends the exits (for at
  // most `flush_timeout`) and closes the link.
  void Shutdown(absl::Duration grace, absl::Duration flush_timeout);
  // SIGKILL every job now (a second SIGTERM during shutdown).
  void KillJobs();

  JobRunner& runner() { return *runner_; }
  ServerLink& link() { return *link_; }

  // ServerLink::Delegate
  trainyard::v1::WorkerHello Hello() override;
  std::vector<trainyard::v1::RunningJobRef> RunningJobs() override;
  std::vector<trainyard::v1::Device> DeviceFigures() override;
  void OnServerMessage(const trainyard::v1::ServerMessage& message) override;
  void OnConnectFailed(const absl::Status& status) override;
  void OnLeaseExpired() override;
  void OnLeaseRenewed(absl::Time deadline) override;

 private:
  const WorkerConfig config_;
  const std::string instance_id_;
  // The link outlives the runner: the runner reports into it to the end.
  std::unique_ptr<ServerLink> link_;
  std::unique_ptr<JobRunner> runner_;
};

}  // namespace trainyard::worker

#endif  // TRAINYARD_WORKER_WORKER_H_
