// Asynchronous successive halving (spec.halving; ASHA, Li et al., MLSys
// 2020): which rung a job's evaluation is ranked at, whether it goes on,
// and what a job stopped there reports. Ray Tune's AsyncHyperBandScheduler
// and Determined's adaptive search stop trials the same way.
//
// A group's rungs are the steps min_steps * factor^k (k = 0, 1, ...) below
// the job's last step. A job's periodic evaluation at step s is ranked at
// the highest rung at or below s, once: the group's other entries there
// (RungBoard, kept in the job store) give the cutoff, their
// (100/factor)-th percentile as numpy computes it (linear interpolation
// between the sorted losses), and a loss above it stops the job. The first
// job at a rung has nothing to be ranked against and goes on; with one
// other entry, only a loss at most that entry's does; with many, about
// the best 1/factor. Every ranked evaluation stays an entry, a stopped
// job's too, as in ASHA; a job on its way out enters no more.
// Pure functions; thread-safe.
#ifndef TRAINYARD_SERVER_HALVING_H_
#define TRAINYARD_SERVER_HALVING_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainyard/v1/jobs.pb.h"
#include "trainyard/v1/spec.pb.h"
#include "trainyard/v1/trainer.pb.h"

namespace trainyard::server {

// The rung an evaluation at `step` is ranked at: the highest at or below
// it, if any (none before min_steps, none at or past spec.steps, none
// without spec.halving).
std::optional<int64_t> RungFor(const v1::JobSpec& spec, int64_t step);

// The most a loss may be and go on against `others` (non-empty): their
// (100/factor)-th percentile, linearly interpolated. A NaN counts as
// +infinity.
double HalvingCutoff(std::vector<double> others, int32_t factor);

// The verdict on `eval` at `rung` of a job with `spec`, against the
// losses `others` of the group's other jobs there: the stop, or nullopt
// when the job goes on.
std::optional<v1::HalvingStop> RankAtRung(const v1::JobSpec& spec, int64_t rung,
                                          const v1::EvalResult& eval,
                                          const std::vector<double>& others);

// "eval loss 1.93 at step 300 (rung 300) is not among the best 1/3 of the
// 5 jobs of halving group 'lr-sweep' there (cutoff 1.71)".
std::string DescribeHalvingStop(const v1::HalvingStop& stop,
                                const std::string& group);

// The result of a job spec.halving stopped (job.halving_stop set) that
// ends without one of the trainer's: what it reported last (the step and
// path of its latest checkpoint, its latest train and eval losses, its
// attempts' time), stopped_early saying why. A job whose trainer did report
// a result (it finished before the stop reached it) keeps that one.
void FillHalvingResult(v1::Job& job);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_HALVING_H_
