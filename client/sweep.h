// A grid of spec overrides, as `yard submit SPEC --sweep FIELD=V1,V2,...`
// makes: one job per combination of the values, like Slurm's job arrays or
// Hydra's multirun, so a hyper-parameter search needs neither edited copies
// of the spec nor a shell loop. Pure functions; thread-safe.
//
// Values are split at the commas that are not inside brackets; a value in
// brackets is a list, for a repeated field: "model.mlp.hidden=[256],[512,256]"
// sweeps two values, "256" and "512,256" (as `--set` would read them).
#ifndef TRAINYARD_CLIENT_SWEEP_H_
#define TRAINYARD_CLIENT_SWEEP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard::client {

// At most this many jobs in one sweep (the product of the value counts).
inline constexpr int64_t kMaxSweepJobs = 100;

struct SweepAxis {
  std::string field;                // dotted path, as --set names it
  std::vector<std::string> values;  // as --set reads them, brackets removed
  std::vector<std::string> shown;   // as written (lists keep their brackets)
};

// Parses one --sweep argument. INVALID_ARGUMENT naming what is wrong: no
// '=', an empty field, no value, an empty value, an unbalanced bracket, a
// value given twice.
absl::StatusOr<SweepAxis> ParseSweepAxis(absl::string_view text);

// One job of a sweep: the assignments to apply to the spec (after its
// --set overrides), one per axis, and the label its name gets.
struct SweepPoint {
  std::vector<std::string> assignments;  // "FIELD=VALUE", axis order
  std::vector<std::string> values;       // each axis's value as written
  std::string label;  // e.g. "optimizer.lr=0.001 model.mlp.hidden=[512,256]"
};

// Every combination, the first axis varying slowest. INVALID_ARGUMENT when
// two axes name the same field or there are more than kMaxSweepJobs
// combinations. No axes: one point without assignments.
absl::StatusOr<std::vector<SweepPoint>> ExpandSweep(
    const std::vector<SweepAxis>& axes);

// The spec of each point: `base` with the point's assignments applied and
// the name "<base name> <label>" (the label alone when the base has no
// name). INVALID_ARGUMENT (the message starting "--sweep ") when a value
// does not fit its field or a name would be longer than names may be.
absl::StatusOr<std::vector<trainyard::v1::JobSpec>> SweepSpecs(
    const trainyard::v1::JobSpec& base, const std::vector<SweepPoint>& points);

// The request id of job `index` (0-based) of a sweep submitted with request
// id `base`: "<base>-<index + 1>", so that the same command run again
// (same --request-id) finds the jobs already made and makes the rest.
std::string SweepRequestId(const std::string& base, size_t index);

}  // namespace trainyard::client

#endif  // TRAINYARD_CLIENT_SWEEP_H_
