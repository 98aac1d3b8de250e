#include "worker/test_scripts.h"

#include <sys/stat.h>

#include <fstream>

namespace trainyard::worker::testing {

std::string WriteExecutable(const std::string& dir, const std::string& name,
                            const std::string& body) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::trunc) << body;
  chmod(path.c_str(), 0755);
  return path;
}

std::string WriteFakeTrainer(const std::string& dir) {
  return WriteExecutable(dir, "fake-yard-train", R"SH(#!/bin/sh
echo "args: $*" >&2
echo "cwd: $(pwd)" >&2
echo "job: $YARD_JOB_ID/$YARD_ATTEMPT gpus=[$CUDA_VISIBLE_DEVICES]" >&2
echo "grant: memory=[$YARD_GPU_MEMORY_BYTES] mps=[$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE]" >&2
mode=$(sed -n 's/.*"name": *"\([^"]*\)".*/\1/p' "$2")
case "$mode" in
succeed)
  echo '{"started":{"totalSteps":"10","backend":"cpu"}}'
  echo 'plain stdout line'
  echo '{"progress":{"step":"5","totalSteps":"10","loss":0.5}}'
  echo 'warning on stderr' >&2
  echo '{"finished":{"step":"10","evalAccuracy":0.95}}'
  exit 0 ;;
fail)
  i=0
  while [ $i -lt 50 ]; do echo "line $i" >&2; i=$((i+1)); done
  echo 'fatal: boom' >&2
  exit 1 ;;
segv)
  echo 'about to crash' >&2
  kill -SEGV $$ ;;
wait_term)
  trap 'echo "{\"interrupted\":{\"step\":\"7\"}}"; exit 3' TERM
  echo '{"started":{"totalSteps":"10"}}'
  sleep 1000 &
  wait $! ;;
ranks)
  echo "rank $YARD_RANK says hi"
  if [ "$YARD_RANK" = 0 ]; then echo '{"finished":{"step":"10"}}'; fi
  exit 0 ;;
rank_fails)
  if [ "$YARD_RANK" = 1 ]; then echo 'rank one gives up' >&2; exit 1; fi
  echo '{"started":{"totalSteps":"10"}}'
  exec sleep 1000 ;;
rank_fails_lingering)
  # Rank 1 fails, leaving behind (in a session of its own, which the
  # worker's kill of the rank's group misses) a process that keeps the
  # rank's stderr open and ticks on it until a file "go" appears in the
  # working directory: the worker then waits, draining the pipes, before
  # it reports the exit. The rank fails once that process has its session.
  if [ "$YARD_RANK" = 1 ]; then
    setsid sh -c 'touch lingering; i=0; while [ ! -e go ] && [ $i -lt 100 ]
      do echo tick >&2; sleep 0.05; i=$((i+1)); done' &
    while [ ! -e lingering ]; do sleep 0.01; done
    echo 'rank one gives up' >&2; exit 1
  fi
  echo '{"started":{"totalSteps":"10"}}'
  exec sleep 1000 ;;
lease)
  read first
  echo "lease: $first" >&2
  echo '{"started":{"totalSteps":"10"}}'
  read second
  echo "lease: $second" >&2
  echo '{"finished":{"step":"10"}}'
  exit 0 ;;
die_on_term)
  # SIGTERM's default action, as yard-train before its handler is set.
  echo '{"started":{"totalSteps":"10"}}'
  exec sleep 1000 ;;
ignore_term)
  trap '' TERM
  echo '{"started":{"totalSteps":"10"}}'
  exec sleep 1000 ;;
*)
  echo "unknown mode '$mode'" >&2
  exit 2 ;;
esac
)SH");
}

trainyard::v1::Assignment MakeAssignment(const std::string& job_id, int attempt,
                                         const std::string& mode,
                                         const std::string& checkpoint_dir) {
  trainyard::v1::Assignment a;
  a.set_job_id(job_id);
  a.set_attempt(attempt);
  a.mutable_spec()->set_name(mode);
  a.mutable_spec()->set_steps(10);
  a.set_checkpoint_dir(checkpoint_dir);
  return a;
}

void ReportCollector::Add(trainyard::v1::JobUpdate update) {
  absl::MutexLock lock(&mu_);
  updates_.push_back(std::move(update));
}

bool ReportCollector::WaitFor(const Predicate& pred, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto holds = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return pred(updates_);
  };
  return mu_.AwaitWithTimeout(absl::Condition(&holds), timeout);
}

std::optional<trainyard::v1::JobExited> ReportCollector::WaitExit(
    const std::string& job_id, int attempt, absl::Duration timeout) {
  WaitFor([&](const auto& u) { return HasExit(u, job_id, attempt); }, timeout);
  for (const auto& u : Updates(job_id, attempt)) {
    if (u.has_exited()) return u.exited();
  }
  return std::nullopt;
}

std::vector<trainyard::v1::JobUpdate> ReportCollector::Updates(
    const std::string& job_id, int attempt) {
  absl::MutexLock lock(&mu_);
  std::vector<trainyard::v1::JobUpdate> out;
  for (const auto& u : updates_) {
    if (u.job_id() == job_id && u.attempt() == attempt) out.push_back(u);
  }
  return out;
}

std::string ReportCollector::Log(const std::string& job_id, int attempt) {
  std::string log;
  for (const auto& u : Updates(job_id, attempt)) {
    if (u.has_log()) log += u.log();
  }
  return log;
}

bool HasExit(const std::vector<trainyard::v1::JobUpdate>& updates,
             const std::string& job_id, int attempt) {
  for (const auto& u : updates) {
    if (u.job_id() == job_id && u.attempt() == attempt && u.has_exited())
      return true;
  }
  return false;
}

bool HasEvent(const std::vector<trainyard::v1::JobUpdate>& updates,
              const std::string& job_id, int attempt,
              trainyard::v1::TrainerEvent::EventCase kind) {
  for (const auto& u : updates) {
    if (u.job_id() == job_id && u.attempt() == attempt && u.has_trainer() &&
        u.trainer().event_case() == kind) {
      return true;
    }
  }
  return false;
}

}  // namespace trainyard::worker::testing
