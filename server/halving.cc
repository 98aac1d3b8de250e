#include "server/halving.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/proto_time.h"
#include "spec/limits.h"

namespace trainyard::server {
namespace {

double NanAsInfinity(double loss) {
  return std::isnan(loss) ? std::numeric_limits<double>::infinity() : loss;
}

int32_t FactorOf(const v1::Halving& h) {
  return h.factor() > 0 ? h.factor() : spec::kDefaultHalvingFactor;
}

}  // namespace

std::optional<int64_t> RungFor(const v1::JobSpec& spec, int64_t step) {
  if (!spec.has_halving()) return std::nullopt;
  const int64_t first = spec.halving().min_steps();
  const int64_t factor = std::max<int64_t>(FactorOf(spec.halving()), 2);
  if (first < 1 || step < first || step >= spec.steps()) return std::nullopt;
  int64_t rung = first;
  // rung * factor <= step, without overflowing.
  while (rung <= step / factor) rung *= factor;
  return rung;
}

double HalvingCutoff(std::vector<double> others, int32_t factor) {
  for (double& loss : others) loss = NanAsInfinity(loss);
  std::sort(others.begin(), others.end());
  const double at = static_cast<double>(others.size() - 1) / factor;
  const size_t lo = static_cast<size_t>(std::floor(at));
  const size_t hi = std::min(lo + 1, others.size() - 1);
  const double frac = at - static_cast<double>(lo);
  // Equal ends (two infinities among them) and a whole index need no
  // interpolation, which would make inf - inf or inf * 0 a NaN.
  if (frac == 0 || others[lo] == others[hi]) return others[lo];
  return others[lo] + (others[hi] - others[lo]) * frac;
}

std::optional<v1::HalvingStop> RankAtRung(const v1::JobSpec& spec, int64_t rung,
                                          const v1::EvalResult& eval,
                                          const std::vector<double>& others) {
  if (others.empty()) return std::nullopt;
  const int32_t factor = FactorOf(spec.halving());
  const double cutoff = HalvingCutoff(others, factor);
  if (!(NanAsInfinity(eval.loss()) > cutoff)) return std::nullopt;
  v1::HalvingStop stop;
  stop.set_rung(rung);
  stop.set_eval_step(eval.step());
  stop.set_eval_loss(eval.loss());
  stop.set_cutoff(cutoff);
  stop.set_others(static_cast<int32_t>(others.size()));
  stop.set_factor(factor);
  return stop;
}

std::string DescribeHalvingStop(const v1::HalvingStop& stop,
                                const std::string& group) {
  return absl::StrFormat(
      "eval loss %.6g at step %d (rung %d) is not among the best 1/%d of the "
      "%d jobs of halving group '%s' there (cutoff %.6g)",
      stop.eval_loss(), stop.eval_step(), stop.rung(), stop.factor(),
      stop.others() + 1, group, stop.cutoff());
}

void FillHalvingResult(v1::Job& job) {
  if (!job.has_halving_stop() || job.has_result()) return;
  v1::TrainFinished* result = job.mutable_result();
  const bool checkpointed = job.last_checkpoint().step() > 0;
  result->set_step(checkpointed ? job.last_checkpoint().step()
                                : job.progress().step());
  result->set_checkpoint_path(job.last_checkpoint().path());
  result->set_train_loss(job.progress().loss());
  result->set_eval_loss(job.last_eval().loss());
  result->set_eval_accuracy(job.last_eval().accuracy());
  double seconds = 0;
  for (const v1::Attempt& a : job.attempts()) {
    if (a.has_start_time() && a.has_end_time()) {
      seconds += absl::ToDoubleSeconds(FromProtoTime(a.end_time()) -
                                       FromProtoTime(a.start_time()));
    }
  }
  result->set_wall_seconds(seconds);
  result->set_stopped_early(
      DescribeHalvingStop(job.halving_stop(), job.spec().halving().group()));
}

}  // namespace trainyard::server
