// GPU jobs end to end on a machine without a GPU: workers find "H100s"
// through the test double of NVML (worker/fake_nvml), and their jobs run
// on yard-train-emulated, the real yard-train and CUDA backend over the
// CUDA host emulation (engine/cuda/emulation: kernels, cuBLASLt and NCCL on
// the CPU). So the path a GPU job takes is exercised for real: the
// worker's grant (CUDA_VISIBLE_DEVICES, YARD_GPU_MEMORY_BYTES), the
// engine's arena taken whole at start, bf16 training on the CUDA backend,
// its checkpoints, a crash beside a neighbour on the same GPU, preemption
// and resume on another worker, and a `gpus: 2` gang summing over NCCL and
// dying together. What the emulation
// cannot show (speed, the GPU's rounding, MPS, NCCL's transports) is left
// to the `gpu` tests.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/exact_resume.h"
#include "tests/harness.h"

namespace trainyard::itest {
namespace {
namespace v1 = trainyard::v1;

using ::testing::HasSubstr;
using ::testing::Not;

class EmulatedGpuJobsTest : public ClusterTest {
 protected:
  absl::Status StartServer(std::vector<std::string> extra_args = {}) {
    return ClusterTest::StartServer({.extra_args = std::move(extra_args)});
  }

  // A worker offering `gpus` fake GPUs under MPS (shareable), its jobs on
  // the emulated engine.
  absl::StatusOr<WorkerProcess*> StartGpuWorker(const std::string& name,
                                                int gpus = 1) {
    const std::string driver = dir().Subdir("driver-" + name);
    std::filesystem::create_symlink(FAKE_NVML_PATH,
                                    driver + "/libnvidia-ml.so.1");
    return StartReadyWorker(
        {.name = name,
         .train_bin = EMULATED_TRAIN_BIN,
         .extra_args = {"--gpus", "auto"},
         .env = {{"LD_LIBRARY_PATH", driver},
                 {"FAKE_NVML_DEVICE_COUNT", absl::StrCat(gpus)}},
         .mps = true});
  }
};

// The backend a job's engine reported in its TrainStarted event.
absl::StatusOr<std::string> StartedBackend(v1::JobService::Stub& jobs,
                                           const std::string& id) {
  absl::StatusOr<v1::JobEvent> e = WaitForEvent(
      jobs, id, "TrainStarted", JobTimeout(), [](const v1::JobEvent& e) {
        return e.has_trainer() && e.trainer().has_started();
      });
  if (!e.ok()) return e.status();
  return e->trainer().started().backend();
}

MnistSpec HalfGpuSpec(const std::string& name) {
  return MnistSpec{.name = name,
                   .steps = 150,
                   .checkpoint_every = 50,
                   .gpus = 1,
                   .gpu_compute_milli = 500,
                   .bf16 = true};
}

// Two half-GPU jobs run side by side on one GPU, each on the CUDA backend
// with its arena sized by its grant (YARD_GPU_MEMORY_BYTES) and its peak
// inside it, and each ends with the weights of the same spec trained alone
// (the GPU arithmetic is deterministic, and a neighbour cannot change it).
TEST_F(EmulatedGpuJobsTest, TwoJobsShareOneGpuOnTheCudaBackend) {
  YARD_ASSERT_OK(StartServer({"--policy", "best-fit"}));
  YARD_ASSERT_OK(StartGpuWorker("gpu-node").status());
  const MnistSpec specs[] = {HalfGpuSpec("half-a"), HalfGpuSpec("half-b")};
  std::vector<std::string> ids;
  for (const MnistSpec& spec : specs) {
    YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse r, Submit(spec.ToProto()));
    ids.push_back(r.job().id());
  }
  // Both running at once, and their grants as they ran (a job's grant is
  // gone once it ends).
  std::vector<v1::Job> running(ids.size());
  YARD_ASSERT_OK(PollUntil("both jobs running on GPU 0", JobTimeout(), [&] {
    for (size_t i = 0; i < ids.size(); ++i) {
      absl::StatusOr<v1::Job> j = GetJob(jobs(), ids[i]);
      if (!j.ok() || j->state() != v1::RUNNING) return false;
      running[i] = *std::move(j);
    }
    return true;
  }));
  std::vector<int64_t> granted_bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    YARD_ASSIGN_OR_FAIL(std::string backend, StartedBackend(jobs(), ids[i]));
    EXPECT_EQ(backend, "cuda");
    ASSERT_EQ(running[i].gpu_grants_size(), 1) << running[i].DebugString();
    const v1::GpuGrant& grant = running[i].gpu_grants(0);
    EXPECT_EQ(grant.index(), 0);
    EXPECT_TRUE(grant.shared());
    EXPECT_EQ(grant.compute_milli(), 500);
    granted_bytes.push_back(grant.memory_bytes());
  }

  YARD_ASSIGN_OR_FAIL(std::string straight,
                      StraightRunWeights(dir(), specs[0], EMULATED_TRAIN_BIN));
  for (size_t i = 0; i < ids.size(); ++i) {
    YARD_ASSIGN_OR_FAIL(v1::Job done,
                        WaitForTerminal(jobs(), ids[i], JobTimeout()));
    ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.DebugString();
    // The engine's peak stays inside its grant.
    EXPECT_GT(done.progress().memory_bytes(), 0) << done.DebugString();
    EXPECT_LE(done.progress().memory_bytes(), granted_bytes[i])
        << done.DebugString();
    YARD_ASSIGN_OR_FAIL(std::string weights,
                        FinalWeights(done.checkpoint_dir()));
    EXPECT_TRUE(weights == straight)
        << ids[i] << ": final weights differ from the spec trained alone";
  }
}

// A job that crashes on a shared GPU fails alone: its neighbour on the
// same GPU trains on to the end, with the weights of its spec trained
// alone, and the worker stays up.
TEST_F(EmulatedGpuJobsTest, AJobCrashingOnASharedGpuHurtsNoNeighbour) {
  YARD_ASSERT_OK(StartServer({"--policy", "best-fit"}));
  YARD_ASSIGN_OR_FAIL(WorkerProcess * worker, StartGpuWorker("gpu-node"));
  MnistSpec doomed = HalfGpuSpec("doomed");
  doomed.steps = 1'000'000;
  const MnistSpec healthy = HalfGpuSpec("healthy");
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse d, Submit(doomed.ToProto()));
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse h, Submit(healthy.ToProto()));
  YARD_ASSERT_OK(WaitForEvent(jobs(), d.job().id(), "CheckpointSaved",
                              JobTimeout(), IsCheckpointSaved)
                     .status());
  YARD_ASSIGN_OR_FAIL(v1::Job neighbour, GetJob(jobs(), h.job().id()));
  ASSERT_EQ(neighbour.state(), v1::RUNNING) << neighbour.DebugString();
  // The doomed job's process: the worker's trainer that is not the
  // healthy one's (whose pid the start reason names).
  std::vector<pid_t> others;
  for (pid_t pid : worker->TrainerPids()) {
    if (neighbour.state_reason().find(absl::StrCat("(pid ", pid, ")")) ==
        std::string::npos) {
      others.push_back(pid);
    }
  }
  ASSERT_EQ(others.size(), 1u) << neighbour.DebugString();
  ASSERT_EQ(kill(others[0], SIGSEGV), 0);

  YARD_ASSIGN_OR_FAIL(v1::Job crashed,
                      WaitForTerminal(jobs(), d.job().id(), JobTimeout()));
  EXPECT_EQ(crashed.state(), v1::FAILED) << crashed.DebugString();
  EXPECT_THAT(crashed.state_reason(), HasSubstr("signal 11"));
  YARD_ASSIGN_OR_FAIL(v1::Job done,
                      WaitForTerminal(jobs(), h.job().id(), JobTimeout()));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.DebugString();
  EXPECT_TRUE(worker->process().Running());
  YARD_ASSIGN_OR_FAIL(std::string weights, FinalWeights(done.checkpoint_dir()));
  YARD_ASSIGN_OR_FAIL(std::string alone,
                      StraightRunWeights(dir(), healthy, EMULATED_TRAIN_BIN));
  EXPECT_TRUE(weights == alone) << "the neighbour's weights changed";
}

// A GPU job preempted by a higher-priority one writes a checkpoint, goes
// back to the queue, resumes on another worker's GPU and ends with the
// weights of an uninterrupted run, byte for byte.
TEST_F(EmulatedGpuJobsTest, APreemptedGpuJobResumesOnAnotherWorkerExactly) {
  YARD_ASSERT_OK(
      StartServer({"--policy", "first-fit+preempt"}));
  YARD_ASSERT_OK(StartGpuWorker("first").status());
  const MnistSpec low_spec{.name = "mover",
                           .steps = 300,
                           .checkpoint_every = 50,
                           .gpus = 1,
                           .bf16 = true};
  YARD_ASSIGN_OR_FAIL(const std::string low_id,
                      SubmitAndWaitForACheckpoint(low_spec.ToProto()));
  // The preemptor runs until cancelled, so the low job cannot go back to
  // the first worker.
  v1::JobSpec high_spec =
      MnistSpec{.name = "hog", .steps = 1'000'000, .gpus = 1}.ToProto();
  high_spec.set_priority(10);
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse high, Submit(high_spec));
  YARD_ASSERT_OK(WaitForStateChange(jobs(), low_id, v1::PREEMPTING, v1::QUEUED,
                                    JobTimeout())
                     .status());
  YARD_ASSERT_OK(StartGpuWorker("second").status());
  // Once the low job runs again, the hog (which only had to keep it off
  // the first worker) goes, so it stops taking CPU from the emulation.
  YARD_ASSERT_OK(PollUntil("the low job running again", JobTimeout(), [&] {
    absl::StatusOr<v1::Job> j = GetJob(jobs(), low_id);
    return j.ok() && j->attempt() == 2 && j->state() == v1::RUNNING;
  }));
  v1::CancelJobRequest cancel;
  cancel.set_job_id(high.job().id());
  v1::Job cancelled;
  YARD_ASSERT_OK(
      ToAbsl(jobs().CancelJob(ContextWithTimeout().get(), cancel, &cancelled)));

  YARD_ASSIGN_OR_FAIL(v1::Job done,
                      WaitForTerminal(jobs(), low_id, JobTimeout()));
  ExpectResumedExactly(dir(), done, low_spec, "first", "second",
                                EMULATED_TRAIN_BIN);
}

// What the emulated `yard-train run SPEC` reports last (TrainFinished).
absl::StatusOr<v1::TrainFinished> StraightRunResult(TestDir& dir,
                                                    const MnistSpec& spec) {
  absl::StatusOr<StraightRun> run = RunStraight(dir, spec, EMULATED_TRAIN_BIN);
  if (!run.ok()) return run.status();
  const size_t at = run->out.rfind("{\"finished\"");
  if (at == std::string::npos) {
    return absl::InternalError(absl::StrCat("no finished event: ", run->out));
  }
  v1::TrainerEvent e;
  if (!google::protobuf::util::JsonStringToMessage(
           run->out.substr(at, run->out.find('\n', at) - at), &e)
           .ok()) {
    return absl::InternalError(
        absl::StrCat("unparsable: ", run->out.substr(at)));
  }
  return e.finished();
}

MnistSpec TwoGpuSpec(const std::string& name, int64_t steps) {
  return MnistSpec{.name = name,
                   .steps = steps,
                   .micro_batch = 16,
                   .checkpoint_every = 50,
                   .eval_every = 0,
                   .gpus = 2};
}

// A job of `gpus: 2` runs one rank per GPU, sums gradients over NCCL (the
// emulation's stand-in) and ends where one GPU with the double micro-batch
// does, up to fp32 rounding (the sums are taken in another order).
TEST_F(EmulatedGpuJobsTest, ATwoGpuJobEndsLikeOneGpuWithTheDoubleBatch) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSIGN_OR_FAIL(WorkerProcess * worker, StartGpuWorker("dual", 2));
  const MnistSpec two = TwoGpuSpec("dp-gpu", 100);
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse r, Submit(two.ToProto()));
  const std::string id = r.job().id();
  YARD_ASSERT_OK(PollUntil("both ranks running", JobTimeout(), [&] {
    return worker->TrainerPidsByRank().size() == 2;
  }));
  YARD_ASSIGN_OR_FAIL(std::string backend, StartedBackend(jobs(), id));
  EXPECT_EQ(backend, "cuda");
  YARD_ASSIGN_OR_FAIL(v1::Job done, WaitForTerminal(jobs(), id, JobTimeout()));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.DebugString();
  CommandResult logs = Yard({"logs", id});
  EXPECT_THAT(logs.out, HasSubstr("as rank 1 of 2")) << logs.out;

  MnistSpec one = two;
  one.name = "dp-gpu-one";
  one.gpus = 1;
  one.micro_batch = 2 * two.micro_batch;
  YARD_ASSIGN_OR_FAIL(v1::TrainFinished alone, StraightRunResult(dir(), one));
  EXPECT_NEAR(done.result().train_loss(), alone.train_loss(),
              1e-3 * alone.train_loss())
      << done.DebugString();
  EXPECT_NEAR(done.result().eval_loss(), alone.eval_loss(),
              1e-3 * alone.eval_loss())
      << done.DebugString();
}

// A `gpus: 2` job no single worker holds spreads over two one-GPU workers
// (rank 0 listens for its peer, the NCCL id crosses over the ranks' own
// sockets) and ends with the very bytes of the same job on one two-GPU
// worker: the ranks sum in rank order wherever they run.
TEST_F(EmulatedGpuJobsTest, AGpuGangSpreadOverWorkersEndsLikeOnOne) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSERT_OK(StartGpuWorker("g1").status());
  YARD_ASSERT_OK(StartGpuWorker("g2").status());
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse r,
                      Submit(TwoGpuSpec("spread-gpu", 60).ToProto()));
  YARD_ASSIGN_OR_FAIL(v1::Job spread,
                      WaitForTerminal(jobs(), r.job().id(), JobTimeout()));
  ASSERT_EQ(spread.state(), v1::SUCCEEDED) << spread.DebugString();
  ASSERT_EQ(spread.attempts(0).more_workers_size(), 1) << spread.DebugString();

  YARD_ASSERT_OK(StartGpuWorker("dual", 2).status());
  v1::JobSpec together = TwoGpuSpec("spread-gpu", 60).ToProto();
  together.mutable_resources()->set_max_nodes(1);
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse r2, Submit(together));
  YARD_ASSIGN_OR_FAIL(v1::Job one,
                      WaitForTerminal(jobs(), r2.job().id(), JobTimeout()));
  ASSERT_EQ(one.state(), v1::SUCCEEDED) << one.DebugString();
  EXPECT_EQ(one.attempts(0).worker_id(), "dual");
  EXPECT_EQ(one.attempts(0).more_workers_size(), 0);
  YARD_ASSIGN_OR_FAIL(std::string a, FinalWeights(spread.checkpoint_dir()));
  YARD_ASSIGN_OR_FAIL(std::string b, FinalWeights(one.checkpoint_dir()));
  EXPECT_TRUE(a == b) << "the spread gang ended with other weights";
}

// A GPU rank that dies takes its gang down: the other rank, waiting in the
// all-reduce, fails at once instead of hanging, and the worker lives on.
TEST_F(EmulatedGpuJobsTest, AGpuRankDyingStopsItsGang) {
  YARD_ASSERT_OK(StartServer());
  YARD_ASSIGN_OR_FAIL(WorkerProcess * worker, StartGpuWorker("dual", 2));
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse r,
                      Submit(TwoGpuSpec("dp-gpu-lost", 1'000'000).ToProto()));
  KillRankOneAndExpectTheGangDown(*worker, r.job().id());
}

// A grant smaller than the engine's estimate fails the job at start, with
// both figures, before any step (never mid-run); one larger than the GPU
// has free exits 5; a malformed grant is a usage error (exit 2) naming the
// variable.
TEST_F(EmulatedGpuJobsTest, AGrantTooSmallFailsAtStartWithBothFigures) {
  const MnistSpec spec{.name = "squeezed", .steps = 20, .gpus = 1};
  const std::string spec_path = WriteSpec("squeezed.yaml", spec.ToYaml());
  const auto run = [&](const std::string& grant) {
    return RunCommand(
        {"/usr/bin/env", absl::StrCat("YARD_GPU_MEMORY_BYTES=", grant),
         EMULATED_TRAIN_BIN, "run", spec_path, "--data-root", SourceDir(),
         "--checkpoint-dir", dir().Subdir("squeezed-" + grant)},
        dir().LogPrefix("squeezed-" + grant), JobTimeout());
  };
  CommandResult small = run("4096");
  EXPECT_EQ(small.exit_code(), 1) << small.DebugString();
  EXPECT_THAT(small.err, HasSubstr("bytes of GPU memory but its grant on the "
                                   "shared GPU is 4096 bytes"))
      << small.err;
  EXPECT_THAT(small.out, Not(HasSubstr("step "))) << small.out;

  // A grant the GPU's free memory cannot give: memory this machine lacks,
  // exit 5 (the server restarts such a job elsewhere under max_restarts).
  CommandResult huge = run("1125899906842624");
  EXPECT_EQ(huge.exit_code(), 5) << huge.DebugString();
  EXPECT_THAT(huge.err, HasSubstr("grant of 1125899906842624 bytes does not "
                                  "fit in the "))
      << huge.err;

  CommandResult bad = run("lots");
  EXPECT_EQ(bad.exit_code(), 2) << bad.DebugString();
  EXPECT_THAT(bad.err, HasSubstr("YARD_GPU_MEMORY_BYTES must be a positive "
                                 "byte count, got 'lots'"))
      << bad.err;
}

// The CUDA backend's speed settings come from the environment
// (YARD_ATTENTION_TILING, YARD_ATTENTION_BACKWARD, YARD_BIAS_GRADIENT);
// a value the engine does not have is a usage error (exit 2) naming the
// variable and the choices, before any step.
TEST_F(EmulatedGpuJobsTest, AnUnknownSpeedSettingIsAUsageError) {
  const struct {
    const char* setting;
    const char* message;
  } cases[] = {
      {"YARD_ATTENTION_TILING=64x1",
       "YARD_ATTENTION_TILING: attention tiling '64x1' is not one of 16x4, "
       "32x2, 32x4"},
      {"YARD_ATTENTION_TILING=16x4,64x1",
       "YARD_ATTENTION_TILING: the backward's attention tiling '64x1' is not "
       "one of 16x4, 32x2, 32x4"},
      {"YARD_ATTENTION_BACKWARD=three-kernel",
       "YARD_ATTENTION_BACKWARD: attention backward 'three-kernel' is not one "
       "of two-kernel, ordered-dq"},
      {"YARD_BIAS_GRADIENT=atomics",
       "YARD_BIAS_GRADIENT: bias gradient 'atomics' is not one of "
       "column-sums, epilogue"},
  };
  const MnistSpec spec{.name = "set", .steps = 20, .gpus = 1};
  const std::string spec_path = WriteSpec("set.yaml", spec.ToYaml());
  for (const auto& c : cases) {
    SCOPED_TRACE(c.setting);
    CommandResult bad = RunCommand(
        {"/usr/bin/env", c.setting, EMULATED_TRAIN_BIN, "run", spec_path,
         "--data-root", SourceDir(), "--checkpoint-dir", dir().Subdir("set")},
        dir().LogPrefix("set"), JobTimeout());
    EXPECT_EQ(bad.exit_code(), 2) << bad.DebugString();
    EXPECT_THAT(bad.err, HasSubstr(c.message)) << bad.err;
    EXPECT_THAT(bad.out, Not(HasSubstr("step "))) << bad.out;
  }
}

// YARD_GEMM_CHOICES names a file of cuBLASLt algorithm choices; a file
// that cannot be read, or a line that is not a choice, is a usage error
// (exit 2) naming the variable, the file and the line, before any step.
TEST_F(EmulatedGpuJobsTest, BadGemmChoicesAreAUsageError) {
  const MnistSpec spec{.name = "chosen", .steps = 20, .gpus = 1};
  const std::string spec_path = WriteSpec("chosen.yaml", spec.ToYaml());
  const std::string bad_file = dir().WriteFile(
      "choices-bad.txt", "# made by hand\nm=16 n=4 k=8 speed=9\n");
  const auto run = [&](const std::string& path, const std::string& tag) {
    return RunCommand(
        {"/usr/bin/env", "YARD_GEMM_CHOICES=" + path, EMULATED_TRAIN_BIN, "run",
         spec_path, "--data-root", SourceDir(), "--checkpoint-dir",
         dir().Subdir("chosen-" + tag)},
        dir().LogPrefix("chosen-" + tag), JobTimeout());
  };
  CommandResult missing = run(dir().path() + "/none.txt", "none");
  EXPECT_EQ(missing.exit_code(), 2) << missing.DebugString();
  EXPECT_THAT(missing.err, HasSubstr("YARD_GEMM_CHOICES: "));
  EXPECT_THAT(missing.err, HasSubstr("none.txt")) << missing.err;
  EXPECT_THAT(missing.out, Not(HasSubstr("step "))) << missing.out;

  CommandResult bad = run(bad_file, "bad");
  EXPECT_EQ(bad.exit_code(), 2) << bad.DebugString();
  EXPECT_THAT(bad.err, HasSubstr("YARD_GEMM_CHOICES: " + bad_file +
                                 ": gemm choices, line 2: no ta="))
      << bad.err;
  EXPECT_THAT(bad.out, Not(HasSubstr("step "))) << bad.out;
}

// YARD_GEMM_CHOICES=auto: the job times its products once, in a rehearsal
// before its first step, and keeps the choices in its checkpoint dir under
// the GPU model's name; a resumed run takes them from there instead of
// timing again and ends with the weights of the run never stopped. A kept
// file of another GPU model, or one that does not parse, is timed again.
// (The emulation's candidates all give the same bits: the weights show the
// rehearsal left nothing behind, not which candidate won.)
TEST_F(EmulatedGpuJobsTest, AutoGemmChoicesAreTimedOnceAndKeptForAResume) {
  const MnistSpec spec{
      .name = "tuned", .steps = 20, .checkpoint_every = 10, .gpus = 1};
  const std::string spec_path = WriteSpec("tuned.yaml", spec.ToYaml());
  const std::string ck = dir().Subdir("tuned");
  const std::string file = ck + "/gemm-choices";
  const auto run = [&](const std::string& tag) {
    return RunCommand(
        {"/usr/bin/env", "YARD_GEMM_CHOICES=auto", EMULATED_TRAIN_BIN, "run",
         spec_path, "--data-root", SourceDir(), "--checkpoint-dir", ck},
        dir().LogPrefix("tuned-" + tag), JobTimeout());
  };
  const auto choice_lines = [&] {
    std::ifstream in(file);
    int lines = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("m=", 0) == 0) {
        ++lines;
        EXPECT_THAT(line, HasSubstr(" of=16")) << line;
      }
    }
    return lines;
  };
  // Back to the checkpoint of step 10, as a run stopped there would be.
  const auto stop_at_ten = [&] {
    std::filesystem::remove_all(ck + "/step-00000020");
  };
  // Without auto: the weights the rehearsal must not change.
  const absl::StatusOr<std::string> plain =
      StraightRunWeights(dir(), spec, EMULATED_TRAIN_BIN);
  ASSERT_TRUE(plain.ok()) << plain.status();

  CommandResult straight = run("straight");
  ASSERT_EQ(straight.exit_code(), 0) << straight.DebugString();
  EXPECT_THAT(straight.err, HasSubstr(" products on CUDA host emulation in "));
  EXPECT_THAT(straight.err, HasSubstr("; kept in " + file)) << straight.err;
  const int lines = choice_lines();
  EXPECT_GT(lines, 0);
  EXPECT_EQ(ReadFileOrEmpty(file).rfind("# device: CUDA host emulation\n", 0),
            0u);
  const absl::StatusOr<std::string> weights = FinalWeights(ck);
  ASSERT_TRUE(weights.ok()) << weights.status();
  EXPECT_TRUE(*weights == *plain);

  stop_at_ten();
  CommandResult resumed = run("resumed");
  ASSERT_EQ(resumed.exit_code(), 0) << resumed.DebugString();
  EXPECT_THAT(
      resumed.err,
      HasSubstr("gemm choices: the ones this job timed before, from " + file));
  EXPECT_THAT(resumed.err, Not(HasSubstr("gemm choices: timed")));
  EXPECT_THAT(resumed.err,
              HasSubstr(absl::StrCat(" products run a chosen algorithm (of ",
                                     lines, " gemm choices)")))
      << resumed.err;
  const absl::StatusOr<std::string> again = FinalWeights(ck);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(*again == *weights);

  const std::string kept = ReadFileOrEmpty(file);
  const std::string other_model =
      "# device: NVIDIA H100 80GB HBM3" + kept.substr(kept.find('\n'));
  for (const std::string& text :
       {other_model, std::string("# device: CUDA host emulation\nm=1 n=2\n")}) {
    dir().WriteFile("tuned/gemm-choices", text);
    stop_at_ten();
    CommandResult retimed = run("retimed");
    ASSERT_EQ(retimed.exit_code(), 0) << retimed.DebugString();
    EXPECT_THAT(retimed.err, HasSubstr("; timing them again")) << retimed.err;
    EXPECT_THAT(retimed.err, HasSubstr("gemm choices: timed ")) << retimed.err;
    EXPECT_EQ(choice_lines(), lines);
    EXPECT_EQ(ReadFileOrEmpty(file).rfind("# device: CUDA host emulation\n", 0),
              0u);
  }
  if (const absl::StatusOr<std::string> last = FinalWeights(ck); last.ok()) {
    EXPECT_TRUE(*last == *weights);
  }
}

// A bf16 GPT small enough for the emulation: heads of 32 channels, so its
// attention runs on the tensor-core kernels, whose tilings
// YARD_ATTENTION_TILING picks.
std::string TinyGptYaml(const std::string& name) {
  return absl::StrCat("name: ", name, R"(
model:
  gpt: {n_layer: 1, n_head: 2, d_model: 64, seq_len: 64, vocab_size: 65}
data:
  text:
    train: examples/data/tinyshakespeare/input.txt
    tokenizer: CHAR
batch: {micro_batch: 2}
steps: 4
seed: 3
precision: BF16
resources: {gpus: 1}
checkpoint: {every_steps: 2}
eval: {max_batches: 1}
log_every_steps: 1
)");
}

// YARD_ATTENTION_TILING=auto: the job times every tiling of its attention
// forward and backward once, in the rehearsal before its first step (the
// same rehearsal YARD_GEMM_CHOICES=auto times its products in), runs the
// fastest of each, and keeps them in its checkpoint dir under the GPU
// model's name; a resumed run takes them from there, and the run ends with
// the weights of a run without it (every tiling gives the same bits on the
// emulation, so the weights show the rehearsal left nothing behind). A
// kept file of another GPU model, or naming no tiling, is timed again; a
// job without tensor-core attention (the MLP) has nothing to time.
TEST_F(EmulatedGpuJobsTest, AutoAttentionTilingsAreTimedOnceAndKept) {
  const std::string spec_path =
      WriteSpec("attention.yaml", TinyGptYaml("attention"));
  const std::string ck = dir().Subdir("attention");
  const std::string file = ck + "/attention-tilings";
  const auto run = [&](const std::string& setting, const std::string& into,
                       const std::string& tag) {
    return RunCommand(
        {"/usr/bin/env", setting, EMULATED_TRAIN_BIN, "run", spec_path,
         "--data-root", SourceDir(), "--checkpoint-dir", into},
        dir().LogPrefix("attention-" + tag), JobTimeout());
  };
  const auto auto_run = [&](const std::string& tag) {
    return run("YARD_ATTENTION_TILING=auto", ck, tag);
  };
  // The kept file's one line that is not a comment.
  const auto kept_tilings = [&] {
    std::ifstream in(file);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line[0] != '#') lines.push_back(line);
    }
    return lines;
  };
  const auto stop_at_two = [&] {
    std::filesystem::remove_all(ck + "/step-00000004");
  };

  const std::string plain_ck = dir().Subdir("attention-plain");
  CommandResult plain = run("YARD_ATTENTION_TILING=16x4", plain_ck, "plain");
  ASSERT_EQ(plain.exit_code(), 0) << plain.DebugString();
  const absl::StatusOr<std::string> plain_weights = FinalWeights(plain_ck);
  ASSERT_TRUE(plain_weights.ok()) << plain_weights.status();

  CommandResult straight = auto_run("straight");
  ASSERT_EQ(straight.exit_code(), 0) << straight.DebugString();
  // Ten tilings at 32 channels, forward and backward.
  EXPECT_THAT(straight.err, HasSubstr("attention tilings: timed 20 candidates "
                                      "on CUDA host emulation in "))
      << straight.err;
  EXPECT_THAT(straight.err, HasSubstr("; kept in " + file)) << straight.err;
  EXPECT_THAT(straight.err, HasSubstr("attention tilings: forward 16x4: "));
  EXPECT_THAT(straight.err,
              HasSubstr("attention tilings: backward wgmma2-swizzled: "));
  const std::string kept = ReadFileOrEmpty(file);
  EXPECT_EQ(kept.rfind("# device: CUDA host emulation\n", 0), 0u) << kept;
  EXPECT_THAT(kept, HasSubstr("\n# forward 32x4: ")) << kept;
  const std::vector<std::string> tilings = kept_tilings();
  ASSERT_EQ(tilings.size(), 1u) << kept;
  EXPECT_THAT(straight.err,
              HasSubstr(", taking " + tilings[0] + "; kept in " + file));
  const absl::StatusOr<std::string> weights = FinalWeights(ck);
  ASSERT_TRUE(weights.ok()) << weights.status();
  EXPECT_TRUE(*weights == *plain_weights);

  stop_at_two();
  CommandResult resumed = auto_run("resumed");
  ASSERT_EQ(resumed.exit_code(), 0) << resumed.DebugString();
  EXPECT_THAT(resumed.err,
              HasSubstr("attention tilings: the ones this job timed before, "
                        "from " +
                        file))
      << resumed.err;
  EXPECT_THAT(resumed.err, Not(HasSubstr("attention tilings: timed")));
  const absl::StatusOr<std::string> again = FinalWeights(ck);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(*again == *weights);

  const std::string other_model =
      "# device: NVIDIA H100 80GB HBM3" + kept.substr(kept.find('\n'));
  for (const std::string& text :
       {other_model, std::string("# device: CUDA host emulation\n64x1\n")}) {
    SCOPED_TRACE(text);
    dir().WriteFile("attention/attention-tilings", text);
    stop_at_two();
    CommandResult retimed = auto_run("retimed");
    ASSERT_EQ(retimed.exit_code(), 0) << retimed.DebugString();
    EXPECT_THAT(retimed.err, HasSubstr("; timing them again")) << retimed.err;
    EXPECT_THAT(retimed.err, HasSubstr("attention tilings: timed 20 "))
        << retimed.err;
    EXPECT_EQ(kept_tilings().size(), 1u);
  }

  const MnistSpec mlp{.name = "mlp", .steps = 5, .gpus = 1, .bf16 = true};
  CommandResult untimed = RunCommand(
      {"/usr/bin/env", "YARD_ATTENTION_TILING=auto", EMULATED_TRAIN_BIN, "run",
       WriteSpec("mlp.yaml", mlp.ToYaml()), "--data-root", SourceDir(),
       "--checkpoint-dir", dir().Subdir("mlp")},
      dir().LogPrefix("attention-mlp"), JobTimeout());
  ASSERT_EQ(untimed.exit_code(), 0) << untimed.DebugString();
  EXPECT_THAT(untimed.err,
              HasSubstr("YARD_ATTENTION_TILING=auto: this job runs no "
                        "tensor-core attention"))
      << untimed.err;
  EXPECT_FALSE(
      std::filesystem::exists(dir().path() + "/mlp/" + "attention-tilings"));
}

}  // namespace
}  // namespace trainyard::itest
