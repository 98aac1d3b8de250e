// Test support for the worker's tests: a fake
// yard-train (a shell script whose behaviour is picked by the spec's name),
// and a thread-safe collector of job reports that tests wait on with a
// deadline instead of sleeping. Test-only code.
#ifndef TRAINYARD_WORKER_TEST_SCRIPTS_H_
#define TRAINYARD_WORKER_TEST_SCRIPTS_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "trainyard/v1/worker.pb.h"

namespace trainyard::worker::testing {

// Writes an executable file `dir`/`name` with `body`; returns its path.
std::string WriteExecutable(const std::string& dir, const std::string& name,
                            const std::string& body);

// Writes the fake yard-train into `dir`. Every mode first writes
// "args: ..." and "cwd: ..." and "job: $YARD_JOB_ID" to stderr. Modes, by
// the spec's name:
//   succeed      TrainerEvents (started, progress, finished) with a plain
//                stdout line and a stderr line between them; exit 0
//   fail         50 numbered stderr lines, then "fatal: boom"; exit 1
//   segv         "about to crash" on stderr, then SIGSEGV to itself
//   wait_term    emits started, waits; on SIGTERM emits interrupted, exit 3
//   ignore_term  ignores SIGTERM, emits started, execs sleep (one process)
std::string WriteFakeTrainer(const std::string& dir);

trainyard::v1::Assignment MakeAssignment(const std::string& job_id, int attempt,
                                         const std::string& mode,
                                         const std::string& checkpoint_dir);

// Collects JobUpdates from any thread.
class ReportCollector {
 public:
  using Predicate =
      std::function<bool(const std::vector<trainyard::v1::JobUpdate>&)>;

  void Add(trainyard::v1::JobUpdate update);
  std::function<void(trainyard::v1::JobUpdate)> Fn() {
    return [this](trainyard::v1::JobUpdate u) { Add(std::move(u)); };
  }
  // Waits until `pred` holds; false at the deadline.
  bool WaitFor(const Predicate& pred,
               absl::Duration timeout = absl::Seconds(20));
  // Waits for the attempt's JobExited.
  std::optional<trainyard::v1::JobExited> WaitExit(
      const std::string& job_id, int attempt,
      absl::Duration timeout = absl::Seconds(20));
  std::vector<trainyard::v1::JobUpdate> Updates(const std::string& job_id,
                                                int attempt);
  std::string Log(const std::string& job_id, int attempt);

 private:
  absl::Mutex mu_;
  std::vector<trainyard::v1::JobUpdate> updates_ ABSL_GUARDED_BY(mu_);
};

// True when `updates` has a JobExited for the attempt.
bool HasExit(const std::vector<trainyard::v1::JobUpdate>& updates,
             const std::string& job_id, int attempt);
// True when `updates` has a TrainerEvent of `kind` for the attempt.
bool HasEvent(const std::vector<trainyard::v1::JobUpdate>& updates,
              const std::string& job_id, int attempt,
              trainyard::v1::TrainerEvent::EventCase kind);

}  // namespace trainyard::worker::testing

#endif  // TRAINYARD_WORKER_TEST_SCRIPTS_H_
