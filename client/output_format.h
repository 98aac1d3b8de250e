// How `yard` shows things to people: aligned tables, one-line event
// descriptions, job details; and protobuf JSON for `-o json`. Pure functions
// of their arguments (the current time is passed in); thread-safe.
#ifndef TRAINYARD_CLIENT_OUTPUT_FORMAT_H_
#define TRAINYARD_CLIENT_OUTPUT_FORMAT_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/byte_text.h"
#include "google/protobuf/message.h"
#include "trainyard/v1/cluster.pb.h"
#include "trainyard/v1/jobs.pb.h"

namespace trainyard::client {

// Columns padded to their widest cell, two spaces apart, no trailing
// blanks; one line per row, each ending in '\n'.
std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows);

// "2026-11-22 11:30:54 UTC".
std::string FormatUtcTime(absl::Time t);

// "42s", "5m", "3h", "2d"; "-" for a zero/unset time.
std::string FormatAge(absl::Time then, absl::Time now);

// "QUEUED", "RUNNING", ...
std::string StateName(trainyard::v1::JobState state);

// "READY", "LOST", "DRAINING".
std::string WorkerStateName(trainyard::v1::WorkerState state);

// The cell on one line: each line break, with the blanks around it, becomes
// one space.
std::string OneLine(absl::string_view cell);

// ID NAME STATE ATTEMPT WORKER STEP AGE.
std::string FormatJobsTable(const std::vector<trainyard::v1::Job>& jobs,
                            absl::Time now);

// Several "Key:  value" lines about one job.
std::string FormatJobDetails(const trainyard::v1::Job& job, absl::Time now);

// ID HOST STATE CPU-SLOTS GPUS JOBS HEARTBEAT, then a cluster summary line.
// A worker an administrator drains shows "DRAINING (admin: <reason>)".
std::string FormatWorkersTable(
    const std::vector<trainyard::v1::Worker>& workers,
    const trainyard::v1::ClusterStatus* status, absl::Time now);

// One line (no newline) describing an event, e.g.
// "step 120/1500 loss 0.4123 1800 samples/s".
std::string FormatEvent(const trainyard::v1::JobEvent& event);

// The closing line of watch / submit --wait, e.g. "job j-1 SUCCEEDED:
// accuracy 95.10%, checkpoint /ckpt/j-1/step-1500".
std::string FormatOutcome(const trainyard::v1::Job& job);

// The results of a sweep (`yard submit --sweep --wait`): one row per job,
// ID STATE, the value of each swept field (a column named after it; row i
// of `values` is job i's), then STEP TRAIN-LOSS EVAL-LOSS ACCURACY ("-"
// where a job has none: only SUCCEEDED jobs have results). Then, when a job
// SUCCEEDED, a line naming the best one: the highest accuracy, else the
// lowest eval loss, else the lowest train loss.
std::string FormatSweepResults(
    const std::vector<trainyard::v1::Job>& jobs,
    const std::vector<std::string>& fields,
    const std::vector<std::vector<std::string>>& values);

// `yard checkpoints`: STEP, SIZE, SAVED (age), and "best" on the best one.
std::string FormatCheckpointsTable(
    const std::vector<trainyard::v1::CheckpointInfo>& checkpoints,
    absl::Time now);

// The line `yard delete` prints (no newline): "deleted job j-1 and its
// checkpoints (/ckpt/j-1, 1.2 GiB)", else "deleted job j-1 (checkpoints
// kept)" when they were asked to be kept, else "deleted job j-1 (no
// checkpoints)".
std::string FormatDeleted(const trainyard::v1::DeleteJobResponse& response,
                          bool keep_checkpoints);

// `yard usage`: a line naming the window, then TENANT JOBS ATTEMPTS GPU-H
// FAILED-GPU-H CPU-SLOT-H FAILED-CPU-SLOT-H (hours, two decimals, four
// below 0.01, "<0.0001" below that), a "total" row when there are
// several tenants; with job rows, a second table JOB TENANT STATE ATTEMPTS
// and the same hours, then NAME ("deleted" for the state of a job that is
// gone). "no usage ..." when no job held anything in the window.
std::string FormatUsageReport(const trainyard::v1::UsageReport& report);

// Protobuf JSON with the proto field names (as in spec files). INTERNAL
// naming the message type, never partial JSON, when protobuf cannot print
// it (a time past year 9999 from an older server, say).
absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message,
                                   bool pretty);
// Writes ToJson(message) and a newline to `out` (flushed); on error writes
// nothing and returns it, for the command to exit non-zero.
absl::Status PrintJson(std::ostream& out,
                       const google::protobuf::Message& message, bool pretty);

// `yard -o json logs`: the log as JSON Lines, an object a line of text,
// {"offset":N,"line":"..."}: N the line's first byte in the job's log, the
// line without its newline, any byte that is not UTF-8 as U+FFFD (a JSON
// string is Unicode). Chunks may cut lines anywhere; one that does not go
// on where the last ended first ends the line it left open.
class LogLinesToJson {
 public:
  // The lines `chunk` completes, each with its newline.
  std::string Add(const trainyard::v1::LogChunk& chunk);
  // The last line if the log did not end with a newline ("" else).
  std::string Finish();

 private:
  std::string Line(int64_t offset, absl::string_view text) const;

  int64_t open_offset_ = 0;  // where open_ starts in the log
  std::string open_;         // the line begun and not yet ended
};

}  // namespace trainyard::client

#endif  // TRAINYARD_CLIENT_OUTPUT_FORMAT_H_
