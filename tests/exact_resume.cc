#include "tests/exact_resume.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "tests/harness.h"

namespace trainyard::itest {

namespace fs = std::filesystem;
namespace v1 = trainyard::v1;

absl::StatusOr<std::string> FinalWeights(const std::string& checkpoint_dir) {
  std::vector<std::string> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(checkpoint_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, "step-")) steps.push_back(name);
  }
  if (steps.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no step-* checkpoint under ", checkpoint_dir));
  }
  // step-%08d names sort by step.
  const std::string newest = *std::max_element(steps.begin(), steps.end());
  const std::string path =
      absl::StrCat(checkpoint_dir, "/", newest, "/model.safetensors");
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

absl::StatusOr<StraightRun> RunStraight(TestDir& dir, const MnistSpec& spec,
                                        const std::string& train_bin) {
  const std::string spec_path = dir.WriteFile(
      absl::StrCat("straight-", spec.name, ".yaml"), spec.ToYaml());
  StraightRun run{absl::StrCat(dir.path(), "/straight-", spec.name), ""};
  CommandResult r = RunCommand(
      {train_bin.empty() ? BinPath("yard-train") : train_bin, "run", spec_path,
       "--data-root", SourceDir(), "--checkpoint-dir", run.checkpoint_dir,
       "--progress", "json"},
      dir.LogPrefix(absl::StrCat("straight-", spec.name)), JobTimeout());
  if (r.exit_code() != 0) {
    return absl::InternalError(
        absl::StrCat("straight run failed: ", r.DebugString()));
  }
  run.out = std::move(r.out);
  return run;
}

absl::StatusOr<std::string> StraightRunWeights(TestDir& dir,
                                               const MnistSpec& spec,
                                               const std::string& train_bin) {
  ASSIGN_OR_RETURN(StraightRun run, RunStraight(dir, spec, train_bin));
  return FinalWeights(run.checkpoint_dir);
}

void ExpectResumedExactly(TestDir& dir, const v1::Job& done,
                                   const MnistSpec& spec,
                                   const std::string& first,
                                   const std::string& second,
                                   const std::string& train_bin) {
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.DebugString();
  ASSERT_EQ(done.attempts_size(), 2) << done.DebugString();
  EXPECT_EQ(done.attempts(0).worker_id(), first);
  // Handed back (preempted, drained, worker lost), parked (suspended), or
  // failed and restarted.
  const v1::JobState stopped = done.attempts(0).outcome();
  if (done.restarts() > 0) {
    EXPECT_EQ(stopped, v1::FAILED);
  } else {
    EXPECT_TRUE(stopped == v1::QUEUED || stopped == v1::SUSPENDED)
        << done.DebugString();
  }
  EXPECT_EQ(done.attempts(1).worker_id(), second);
  EXPECT_GT(done.attempts(1).resumed_from_step(), 0) << done.DebugString();
  YARD_ASSIGN_OR_FAIL(std::string weights, FinalWeights(done.checkpoint_dir()));
  YARD_ASSIGN_OR_FAIL(std::string straight,
                      StraightRunWeights(dir, spec, train_bin));
  EXPECT_TRUE(weights == straight)
      << "final weights differ from an uninterrupted run of the same spec";
}

namespace {

// "p<step> <loss>" for a progress report, "e<step> <loss>" for an
// evaluation, the loss printed exactly.
std::string CurvePoint(const v1::TrainerEvent& t) {
  return t.has_progress()
             ? absl::StrCat("p", t.progress().step(), " ",
                            absl::StrFormat("%a", t.progress().loss()))
             : absl::StrCat("e", t.eval().step(), " ",
                            absl::StrFormat("%a", t.eval().loss()));
}

}  // namespace

void ExpectTheCurveOfAStraightRun(v1::JobService::Stub& jobs, TestDir& dir,
                                  const v1::Job& done, const MnistSpec& spec) {
  auto ctx = ContextWithTimeout();
  v1::GetJobMetricsRequest request;
  request.set_job_id(done.id());
  v1::JobMetrics curve;
  grpc::Status s = jobs.GetJobMetrics(ctx.get(), request, &curve);
  ASSERT_TRUE(s.ok()) << s.error_message();
  std::vector<std::string> got;
  for (const v1::MetricPoint& p : curve.points()) {
    v1::TrainerEvent t;
    if (p.has_progress()) *t.mutable_progress() = p.progress();
    if (p.has_eval()) *t.mutable_eval() = p.eval();
    got.push_back(CurvePoint(t));
  }
  MnistSpec straight_spec = spec;
  straight_spec.name += "-curve";
  YARD_ASSIGN_OR_FAIL(StraightRun straight, RunStraight(dir, straight_spec));
  std::vector<std::string> want;
  for (absl::string_view line :
       absl::StrSplit(straight.out, '\n', absl::SkipWhitespace())) {
    v1::TrainerEvent t;
    ASSERT_TRUE(
        google::protobuf::util::JsonStringToMessage(std::string(line), &t).ok())
        << "not a TrainerEvent: " << line;
    if (t.has_progress() || t.has_eval()) want.push_back(CurvePoint(t));
  }
  ASSERT_FALSE(want.empty()) << straight.out;
  // The straight run reports a step's progress before its evaluation, as
  // the curve orders them.
  EXPECT_EQ(got, want);
}

}  // namespace trainyard::itest
