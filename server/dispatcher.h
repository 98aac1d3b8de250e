// Dispatcher: carries out a placement Plan ("policy decides, mechanism
// acts"). For each preemption it first commits RUNNING -> PREEMPTING (the
// reason names the job it makes room for), then sends the worker a Preempt;
// a job already stopping is left alone. The job it makes room for is placed
// by a later pass, once the victims have exited. For each placement it
// first commits QUEUED -> SCHEDULED to the store, then sends the Assignment
// on the worker's stream; if the worker is gone by then, the attempt goes
// straight back to the queue. For each job
// the plan leaves waiting it records the reason (only when it changed).
// Used by the scheduler loop's thread; holds no state of its own.
#ifndef TRAINYARD_SERVER_DISPATCHER_H_
#define TRAINYARD_SERVER_DISPATCHER_H_

#include <map>
#include <string>

#include "scheduler/placement_policy.h"
#include "server/job_lifecycle.h"
#include "server/job_store.h"
#include "server/worker_registry.h"

namespace trainyard::server {

struct DispatchCounts {
  int placed = 0;
  int undeliverable = 0;  // committed, but the worker went away
  int skipped = 0;        // the job changed meanwhile (e.g. cancelled)
  int preempted = 0;      // victims told to stop
};

class Dispatcher {
 public:
  Dispatcher(JobLifecycle* lifecycle, WorkerRegistry* workers)
      : lifecycle_(lifecycle), workers_(workers) {}

  // `queued`: the snapshot's pending jobs by id, as read from the store.
  DispatchCounts Carry(const scheduler::Plan& plan,
                       const std::map<std::string, JobRecord>& queued);

  // Records why queued job `job_id` waits, unless `stored` (its reason as
  // read this pass; null when not read) already says so: a pass must not
  // cost a store write per waiting job.
  void RecordWaitReason(const std::string& job_id, const std::string* stored,
                        const std::string& reason);

  // RUNNING -> PREEMPTING, then tells every worker of its ranks. False when
  // the job is not running on worker_id (already stopping, or moved on).
  bool Preempt(const std::string& job_id, const std::string& worker_id,
               const std::string& reason, const PreemptedFor& for_job = {});

 private:
  void CarryPreemptions(const scheduler::Plan& plan,
                        const std::map<std::string, JobRecord>& queued,
                        DispatchCounts& counts);

  JobLifecycle* const lifecycle_;
  WorkerRegistry* const workers_;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_DISPATCHER_H_
