// Waiting without sleeping: on a job's WatchJob stream where the server
// pushes what we wait for, and otherwise by polling with a short backoff
// under an overall deadline. Every failure says what was awaited and what
// was seen instead. Functions are safe to call from any thread; they share
// nothing.
#ifndef TRAINYARD_TESTS_WAITS_H_
#define TRAINYARD_TESTS_WAITS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "trainyard/v1/cluster.grpc.pb.h"
#include "trainyard/v1/jobs.grpc.pb.h"

namespace trainyard::itest {

// Calls `probe` (backoff 5 ms doubling to 250 ms) until it returns true.
// DEADLINE_EXCEEDED "timed out after T waiting for <what>" otherwise.
absl::Status PollUntil(absl::string_view what, absl::Duration timeout,
                       const std::function<bool()>& probe);

// The TrainStarted events among `events`, in order: one per attempt that
// started training (start_step > 0 when it resumed from a checkpoint).
std::vector<trainyard::v1::TrainStarted> TrainStartedEvents(
    const std::vector<trainyard::v1::JobEvent>& events);

// How many trainer events of `kind` are among `events`.
int CountTrainerEvents(const std::vector<trainyard::v1::JobEvent>& events,
                       trainyard::v1::TrainerEvent::EventCase kind);

bool IsTerminal(trainyard::v1::JobState state);
std::string StateName(trainyard::v1::JobState state);
// One line per event, for failure messages.
std::string DescribeEvents(const std::vector<trainyard::v1::JobEvent>& events);

struct WatchResult {
  std::vector<trainyard::v1::JobEvent> events;
  grpc::Status status;   // how the stream ended
  bool stopped = false;  // `until` matched (the stream was then cancelled)
};

// Reads WatchJob(job_id, after_sequence) until the stream ends (after the
// terminal event), `until` matches an event, or `timeout` passes (then
// status is DEADLINE_EXCEEDED).
WatchResult Watch(
    trainyard::v1::JobService::Stub& jobs, const std::string& job_id,
    int64_t after_sequence, absl::Duration timeout,
    const std::function<bool(const trainyard::v1::JobEvent&)>& until = nullptr);

// Waits for the first event matching `pred` (from the job's beginning);
// fails naming `what` and listing the events seen.
absl::StatusOr<trainyard::v1::JobEvent> WaitForEvent(
    trainyard::v1::JobService::Stub& jobs, const std::string& job_id,
    absl::string_view what, absl::Duration timeout,
    const std::function<bool(const trainyard::v1::JobEvent&)>& pred);

// Waits until the job reaches `state` (a StateChange to it).
absl::StatusOr<trainyard::v1::JobEvent> WaitForState(
    trainyard::v1::JobService::Stub& jobs, const std::string& job_id,
    trainyard::v1::JobState state, absl::Duration timeout);

// Waits for the job's state change from `from` to `to`.
absl::StatusOr<trainyard::v1::JobEvent> WaitForStateChange(
    trainyard::v1::JobService::Stub& jobs, const std::string& job_id,
    trainyard::v1::JobState from, trainyard::v1::JobState to,
    absl::Duration timeout);

// Follows the job to its terminal event and returns GetJob afterwards.
absl::StatusOr<trainyard::v1::Job> WaitForTerminal(
    trainyard::v1::JobService::Stub& jobs, const std::string& job_id,
    absl::Duration timeout);

// Predicates over events.
bool IsStateChangeTo(const trainyard::v1::JobEvent& e,
                     trainyard::v1::JobState state);
bool IsCheckpointSaved(const trainyard::v1::JobEvent& e);
bool IsTrainProgress(const trainyard::v1::JobEvent& e);

// Success when `events` are numbered first, first + 1, ... without a gap and
// the last one is the state change to `terminal`.
::testing::AssertionResult ConsecutiveToTerminal(
    const std::vector<trainyard::v1::JobEvent>& events, int64_t first,
    trainyard::v1::JobState terminal);

// Parses one JobEvent in protobuf JSON per line (`yard -o json watch`).
absl::StatusOr<std::vector<trainyard::v1::JobEvent>> ParseJsonEventLines(
    const std::string& text);

absl::StatusOr<trainyard::v1::Job> GetJob(trainyard::v1::JobService::Stub& jobs,
                                          const std::string& job_id);

// Every job, following page tokens with `page_size`.
absl::StatusOr<std::vector<trainyard::v1::Job>> ListAllJobs(
    trainyard::v1::JobService::Stub& jobs, int page_size = 100);

// ListWorkers, and its workers as "id=STATE, ..." for failure messages.
absl::StatusOr<trainyard::v1::ListWorkersResponse> ListWorkers(
    trainyard::v1::ClusterService::Stub& cluster);
std::string DescribeWorkers(const trainyard::v1::ListWorkersResponse& resp);

// Waits until the server lists every worker in `names` as READY.
absl::Status WaitForReadyWorkers(trainyard::v1::ClusterService::Stub& cluster,
                                 const std::vector<std::string>& names,
                                 absl::Duration timeout);

// Waits until the server lists worker `name` and `done` (described by
// `what`) holds for it; returns it as listed then.
absl::StatusOr<trainyard::v1::Worker> WaitForWorker(
    trainyard::v1::ClusterService::Stub& cluster, const std::string& name,
    const std::string& what,
    const std::function<bool(const trainyard::v1::Worker&)>& done,
    absl::Duration timeout);

// Waits until the server lists worker `name` as LOST (or no longer lists it).
absl::Status WaitForWorkerLost(trainyard::v1::ClusterService::Stub& cluster,
                               const std::string& name, absl::Duration timeout);

}  // namespace trainyard::itest

#endif  // TRAINYARD_TESTS_WAITS_H_
