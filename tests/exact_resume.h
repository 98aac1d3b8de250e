// Exact resume, checked from the outside: the final weights of a job that
// was interrupted and resumed (on any worker, any number of times) must
// equal, byte for byte, those of the same spec run straight through with
// yard-train. Not thread-safe per TestDir (like TestDir itself).
#ifndef TRAINYARD_TESTS_EXACT_RESUME_H_
#define TRAINYARD_TESTS_EXACT_RESUME_H_

#include <string>

#include "absl/status/statusor.h"
#include "tests/cluster.h"
#include "trainyard/v1/jobs.grpc.pb.h"
#include "trainyard/v1/jobs.pb.h"

namespace trainyard::itest {

struct MnistSpec;

// The bytes of model.safetensors in the newest step-* checkpoint under
// `checkpoint_dir`. NOT_FOUND when there is none.
absl::StatusOr<std::string> FinalWeights(const std::string& checkpoint_dir);

// A straight run of a spec: where it checkpointed, and its stdout (one
// TrainerEvent in protobuf JSON per line).
struct StraightRun {
  std::string checkpoint_dir;
  std::string out;
};

// Runs `spec` with `yard-train run --progress json` (no faults) into
// dir/straight-<name>. `train_bin`: the engine binary; empty means
// build/bin/yard-train. INTERNAL with its output when it fails.
absl::StatusOr<StraightRun> RunStraight(TestDir& dir, const MnistSpec& spec,
                                        const std::string& train_bin = "");

// RunStraight, then FinalWeights of it.
absl::StatusOr<std::string> StraightRunWeights(
    TestDir& dir, const MnistSpec& spec, const std::string& train_bin = "");

// `done`, a job of `spec` stopped on worker `first` (preempted, drained,
// suspended, crashed and restarted) and resumed from a checkpoint on worker
// `second` (elsewhere, or `first` again), ended SUCCEEDED after those two
// attempts with the weights of a straight run of `spec` (`train_bin` as
// RunStraight). Failures are the test's (gtest assertions).
void ExpectResumedExactly(TestDir& dir, const trainyard::v1::Job& done,
                                   const MnistSpec& spec,
                                   const std::string& first,
                                   const std::string& second,
                                   const std::string& train_bin = "");

// The training curve of `done`, a job of `spec` that was interrupted and
// resumed, as GetJobMetrics returns it, is that of a straight run of
// `spec` (run here, into dir/straight-<name>-curve): the same progress
// reports and evaluations, each step once, with the very same losses.
void ExpectTheCurveOfAStraightRun(trainyard::v1::JobService::Stub& jobs,
                                  TestDir& dir, const trainyard::v1::Job& done,
                                  const MnistSpec& spec);

}  // namespace trainyard::itest

#endif  // TRAINYARD_TESTS_EXACT_RESUME_H_
