// JobRunner: the jobs running on this worker. It turns an Assignment into a
// JobProcess on its own thread (after writing the spec and the attempt's
// directory), accounts CPU slots and GPUs, and finds running attempts for
// Cancel, Preempt and StopAttempt. A GPU is held whole by one job, or shared
// by jobs whose grants (memory, compute) fit in it together; each sharing
// job is told its memory grant (YARD_GPU_MEMORY_BYTES: the engine's arena).
// A job sees only its own GPUs, named by UUID (CUDA_VISIBLE_DEVICES). An
// assignment that does not fit (no free slot, a GPU this worker does not have,
// a bad id) is refused: it is reported as a JobExited with exit_code
// kRefusedExitCode and the reason, never run oversubscribed.
//
// Every report of an attempt, ending with its JobExited, goes through the
// report callback (on the job's thread). An attempt stays in Running() until
// its JobExited has been handed to the callback, so a hello built from
// Running() plus the reports not yet sent never misses a job.
//
// Thread-safe. The report callback must not call back into the JobRunner.
#ifndef TRAINYARD_WORKER_JOB_RUNNER_H_
#define TRAINYARD_WORKER_JOB_RUNNER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "trainyard/v1/cluster.pb.h"
#include "trainyard/v1/worker.pb.h"
#include "worker/job_process.h"

namespace trainyard::worker {

struct JobRunnerOptions {
  std::string work_dir;   // attempts live in WORK_DIR/jobs/<job_id>/<attempt>
  std::string train_bin;  // the yard-train executable
  std::string data_root;  // passed to yard-train as --data-root
  int cpu_slots = 1;      // jobs without GPUs that may run at once
  std::vector<int32_t> gpus;  // device indices this worker may hand out
  // Memory of each of those GPUs, where known: shared grants on a GPU must
  // fit in it.
  std::map<int32_t, int64_t> gpu_memory_bytes;
  // UUID of each of those GPUs, where known. A job's CUDA_VISIBLE_DEVICES
  // names its GPUs by UUID, which means the same GPU with or without an MPS
  // server in between; a GPU without a usable UUID is named by index.
  std::map<int32_t, std::string> gpu_uuids;
  // NVIDIA MPS is running: a job sharing a GPU is capped at its compute
  // share (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE); without MPS the jobs of a
  // GPU are time-sliced.
  bool mps = false;
  // Where rank 0 of a job spread over several workers listens for the
  // others (yard-train --rendezvous-host).
  std::string rank_address = "127.0.0.1";
  // Used when a Cancel carries no grace period.
  absl::Duration default_cancel_grace = absl::Seconds(10);
  // Attempt directories of ended attempts kept in WORK_DIR/jobs (the most
  // recently used); older ones are removed as attempts end
  // (attempt_dirs.h).
  int keep_attempt_dirs = 100;
};

class JobRunner {
 public:
  using ReportFn = JobProcess::ReportFn;

  // JobExited.exit_code of an attempt that was refused and never started.
  static constexpr int kRefusedExitCode = -1;

  JobRunner(JobRunnerOptions options, ReportFn report);
  // Kills whatever still runs and waits for it (their exits are reported).
  ~JobRunner();
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;

  // Starts the attempt, or refuses it (reported as a JobExited). A second
  // assignment of an attempt that already runs here is ignored.
  void Start(const trainyard::v1::Assignment& assignment);

  // SIGTERM, then SIGKILL after `grace` (the default when not positive);
  // the exit is reported with cancelled=true. False for an unknown attempt.
  bool Cancel(const std::string& job_id, int32_t attempt, absl::Duration grace);
  // SIGKILL at once; reported with cancelled=true. False when unknown.
  bool Stop(const std::string& job_id, int32_t attempt);
  // Preemption: SIGTERM (the job checkpoints and exits), then SIGKILL after
  // `grace` (the default when not positive); the exit is reported with
  // cancelled=false, so the server re-queues the job. False when unknown.
  bool Preempt(const std::string& job_id, int32_t attempt,
               absl::Duration grace);

  // From now on every assignment is refused.
  void StopAccepting();
  // SIGTERM every job (they checkpoint and exit), SIGKILL after `grace`.
  void TerminateAll(absl::Duration grace);
  void KillAll();
  // SIGKILL every job because the server can no longer hear this worker
  // (it re-queues them); their exits say lost_server. Returns how many.
  int AbandonAll();
  // The worker's lease with the server now runs out at `deadline`
  // (InfiniteFuture: no lease): every running job and every job started
  // from now on is told (JobProcess, yard-train --lease-fd).
  void RenewLeases(absl::Time deadline);
  // Waits until no job runs; false if some still run at `deadline`.
  bool WaitIdle(absl::Time deadline);

  // The attempts running (or whose exit is being reported).
  std::vector<trainyard::v1::RunningJobRef> Running() const;
  int free_cpu_slots() const;

 private:
  using Key = std::pair<std::string, int32_t>;
  struct Entry {
    std::shared_ptr<JobProcess> process;
    std::thread thread;
    int cpu_slots = 0;  // one per rank of a job without GPUs
    std::vector<int32_t> gpus;
    std::map<int32_t, trainyard::v1::GpuGrant> shares;  // by GPU index
    bool released = false;  // its slot or GPUs are free again
  };

  // Why `entry` cannot run here, or OK. Also reserves its slots or GPUs.
  absl::Status ReserveLocked(const Entry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds (sign +1) or takes back (-1) what `entry` holds of each GPU.
  void AccountGpusLocked(const Entry& entry, int sign)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLocked(Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the attempt's slot or GPUs once its process is reaped, before its
  // exit is reported: the server may assign the place again at once.
  void ReleaseAtExit(const Key& key);
  // What rank `rank` (the `i`th here) of `world` finds in its environment
  // besides the worker's own: its GPU(s), the job, its grant.
  std::vector<std::string> RankEnvironment(const trainyard::v1::Assignment& a,
                                           int i, int rank, int world) const;
  // Creates the attempt directory and spec file; returns how to run it.
  absl::StatusOr<JobLaunch> PrepareLaunch(
      const trainyard::v1::Assignment& a) const;
  void Refuse(const trainyard::v1::Assignment& a, absl::string_view reason);
  void RunJob(Key key, std::shared_ptr<JobProcess> process);
  void JoinDone();
  std::shared_ptr<JobProcess> Find(const std::string& job_id,
                                   int32_t attempt) const;

  const JobRunnerOptions options_;
  const ReportFn report_;

  mutable absl::Mutex mu_;
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  std::map<Key, Entry> jobs_ ABSL_GUARDED_BY(mu_);
  int cpu_in_use_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time lease_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // What the running jobs hold of each GPU in use.
  struct GpuUse {
    bool whole = false;
    int jobs = 0;
    int64_t memory_bytes = 0;
    int32_t compute_milli = 0;
  };
  std::map<int32_t, GpuUse> gpu_use_ ABSL_GUARDED_BY(mu_);
  // Threads of finished jobs, joined by whoever comes next.
  std::vector<std::thread> done_ ABSL_GUARDED_BY(mu_);
};

// A job id usable as a directory name: 1-128 of [A-Za-z0-9._-], not a dot
// path. Also used for worker ids.
bool IsSafeId(absl::string_view id);

}  // namespace trainyard::worker

#endif  // TRAINYARD_WORKER_JOB_RUNNER_H_
