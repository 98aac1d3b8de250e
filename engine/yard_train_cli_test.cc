// yard-train as a process: the CLI contract other components rely on —
// exit codes, JSON events on stdout, SIGTERM -> checkpoint + exit 3, and
// resume from that checkpoint.
#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/test_dir.h"
#include "engine/core/checkpoint.h"
#include "gtest/gtest.h"
#include "trainyard/v1/trainer.pb.h"

namespace {

namespace fs = std::filesystem;
using ::trainyard::TestDir;

struct Result {
  int exit_code = -1;
  std::vector<std::string> stdout_lines;
  std::string stderr_text;
  std::string last_stderr_line() const {
    std::vector<std::string> lines =
        absl::StrSplit(stderr_text, '\n', absl::SkipEmpty());
    return lines.empty() ? "" : lines.back();
  }
};

// Runs yard-train with `args` in `cwd`. `on_line` sees each stdout line as
// it arrives and may signal the child. Lines must keep coming: 60 s without
// one kills the child and fails the test (no hang).
Result RunYardTrain(
    const std::vector<std::string>& args, const std::string& cwd,
    const std::function<void(const std::string&, pid_t)>& on_line = {}) {
  int out[2];
  EXPECT_EQ(pipe(out), 0);
  const std::string err_path = cwd + "/stderr.txt";
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(err, 2);
    close(out[0]);
    if (chdir(cwd.c_str()) != 0) _exit(127);
    std::vector<char*> argv = {const_cast<char*>(YARD_TRAIN_BIN)};
    for (const std::string& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(YARD_TRAIN_BIN, argv.data());
    _exit(127);
  }
  close(out[1]);
  Result r;
  std::string pending;
  char buf[4096];
  while (true) {
    pollfd p = {out[0], POLLIN, 0};
    if (poll(&p, 1, 60'000) <= 0) {
      kill(pid, SIGKILL);
      ADD_FAILURE() << "yard-train went quiet for 60 s";
      break;
    }
    const ssize_t n = read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    pending.append(buf, n);
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      r.stdout_lines.push_back(pending.substr(0, nl));
      pending.erase(0, nl + 1);
      if (on_line) on_line(r.stdout_lines.back(), pid);
    }
  }
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(err_path);
  std::stringstream ss;
  ss << in.rdbuf();
  r.stderr_text = ss.str();
  return r;
}

trainyard::v1::TrainerEvent Parse(const std::string& line) {
  trainyard::v1::TrainerEvent e;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(line, &e).ok())
      << line;
  return e;
}

class YardTrainCliTest : public ::testing::Test {
 protected:
  // A small MNIST job; `steps` and `extra` YAML vary per test.
  std::string WriteSpec(int64_t steps, const std::string& extra = "") {
    const std::string path = dir_ + "/spec.yaml";
    std::ofstream(path)
        << "name: cli-test\n"
        << "model: {mlp: {hidden: [8]}}\n"
        << "data: {mnist: {images: "
           "examples/data/mnist/t10k-images-idx3-ubyte.gz,"
        << " labels: examples/data/mnist/t10k-labels-idx1-ubyte.gz,"
        << " holdout: 500}}\n"
        << "batch: {micro_batch: 16}\n"
        << "steps: " << steps << "\n"
        << "eval: {max_batches: 4}\n"
        << "log_every_steps: 5\n"
        << extra;
    return path;
  }

  std::vector<std::string> Args(const std::string& spec) {
    return {
        "run",  spec,        "--data-root", YARD_SOURCE_DIR,    "--progress",
        "json", "--threads", "2",           "--checkpoint-dir", dir_ + "/ck"};
  }

  TestDir tmp_;
  const std::string dir_ = tmp_.path();
};

TEST_F(YardTrainCliTest, FinishesWithJsonEventsOnly) {
  Result r = RunYardTrain(Args(WriteSpec(20)), dir_);
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  ASSERT_GE(r.stdout_lines.size(), 4u);
  for (const std::string& line : r.stdout_lines) Parse(line);  // all JSON
  EXPECT_TRUE(Parse(r.stdout_lines.front()).has_started());
  const auto finished = Parse(r.stdout_lines.back());
  ASSERT_TRUE(finished.has_finished());
  EXPECT_EQ(finished.finished().step(), 20);
  EXPECT_EQ(finished.finished().checkpoint_path(), dir_ + "/ck/step-00000020");
  EXPECT_GT(finished.finished().eval_accuracy(), 0.2);
  EXPECT_TRUE(fs::exists(dir_ + "/ck/step-00000020/model.safetensors"));
}

// --set overrides the spec file's fields in order, as `yard submit --set`
// does; the default checkpoint dir follows an overridden name.
TEST_F(YardTrainCliTest, SetOverridesTheSpecInOrder) {
  Result r = RunYardTrain({"run", WriteSpec(50), "--data-root", YARD_SOURCE_DIR,
                           "--set", "steps=2", "--set=model.mlp.hidden=[4,4]",
                           "--set", "steps=3", "--set", "name=renamed"},
                          dir_);
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_TRUE(absl::StartsWith(r.stdout_lines.back(), "finished: step 3"))
      << r.stdout_lines.back();
  EXPECT_TRUE(fs::exists(dir_ + "/checkpoints/renamed/step-00000003"));
  // Two hidden layers of 4: 784*4+4 + 4*4+4 + 4*10+10 parameters.
  EXPECT_TRUE(absl::StrContains(r.stdout_lines.front(), "3210 parameters"))
      << r.stdout_lines.front();

  // A bad override, and a spec the overrides make invalid, exit 2 naming
  // what is wrong, before anything is trained or written.
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--set", "steps=ten"}, "yard-train: --set steps=ten: not an integer"},
      {{"--set", "stepz=1"}, "yard-train: --set stepz=1: no field \"stepz\""},
      {{"--set", "steps"}, "yard-train: --set steps: expected FIELD=VALUE"},
      {{"--set"}, "yard-train: --set needs a value"},
      {{"--set", "batch.micro_batch=0"},
       "yard-train: batch.micro_batch: must be in [1, 65536], got 0"},
  };
  for (const auto& [extra, message] : bad) {
    std::vector<std::string> args = Args(WriteSpec(3));
    args.insert(args.end(), extra.begin(), extra.end());
    Result bad_run = RunYardTrain(args, dir_);
    EXPECT_EQ(bad_run.exit_code, 2) << absl::StrJoin(extra, " ");
    EXPECT_TRUE(absl::StartsWith(bad_run.stderr_text, message))
        << bad_run.stderr_text;
    EXPECT_TRUE(bad_run.stdout_lines.empty());
    EXPECT_FALSE(fs::exists(dir_ + "/ck"));
  }
}

TEST_F(YardTrainCliTest, DefaultCheckpointDirIsUnderTheWorkingDirectory) {
  Result r =
      RunYardTrain({"run", WriteSpec(3), "--data-root", YARD_SOURCE_DIR}, dir_);
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_TRUE(fs::exists(dir_ + "/checkpoints/cli-test/step-00000003"));
  EXPECT_TRUE(absl::StartsWith(r.stdout_lines.back(), "finished: step 3"))
      << r.stdout_lines.back();
}

// A step can take minutes (here hours: 4,096 micro-batches of 4,096): the
// first SIGTERM waits for its end to checkpoint, a second one ends the
// process at once instead of being swallowed.
TEST_F(YardTrainCliTest, SecondSigtermStopsAtOnce) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer defers a signal's handler until the "
                  "thread it landed on calls into the runtime, which the "
                  "training thread may not do for minutes";
#endif
  const std::string spec = dir_ + "/slow.yaml";
  std::ofstream(spec)
      << "model: {mlp: {hidden: [2048, 2048]}}\n"
      << "data: {mnist: {images: "
         "examples/data/mnist/t10k-images-idx3-ubyte.gz,"
      << " labels: examples/data/mnist/t10k-labels-idx1-ubyte.gz}}\n"
      << "batch: {micro_batch: 4096, grad_accum: 4096}\n"
      << "steps: 10\n";
  auto term_twice = [](const std::string& line, pid_t pid) {
    if (!absl::StrContains(line, "\"started\"")) return;
    // Into the first step: a signal before its stop check would stop the
    // run there, cleanly, with a checkpoint at step 0.
    usleep(300'000);
    kill(pid, SIGTERM);
    usleep(300'000);
    kill(pid, SIGTERM);
  };
  Result r =
      RunYardTrain({"run", spec, "--data-root", YARD_SOURCE_DIR, "--progress",
                    "json", "--threads", "1", "--checkpoint-dir", dir_ + "/ck"},
                   dir_, term_twice);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.stderr_text;
  ASSERT_EQ(r.stdout_lines.size(), 1u);
  EXPECT_TRUE(Parse(r.stdout_lines.front()).has_started());
  EXPECT_FALSE(fs::exists(dir_ + "/ck/step-00000000"));
}

TEST_F(YardTrainCliTest, SigtermCheckpointsExitsThreeAndResumes) {
  // Far more steps than can run before the signal lands.
  const std::string spec = WriteSpec(1'000'000);
  // Once: progress lines already in the pipe must not send a second
  // SIGTERM, which stops the run at once (SecondSigtermStopsAtOnce).
  auto term_after_progress = [] {
    return [sent = false](const std::string& line, pid_t pid) mutable {
      if (sent || !absl::StrContains(line, "\"progress\"")) return;
      sent = true;
      kill(pid, SIGTERM);
    };
  };
  Result first = RunYardTrain(Args(spec), dir_, term_after_progress());
  ASSERT_EQ(first.exit_code, 3) << first.stderr_text;
  const auto interrupted = Parse(first.stdout_lines.back());
  ASSERT_TRUE(interrupted.has_interrupted()) << first.stdout_lines.back();
  const int64_t step = interrupted.interrupted().step();
  EXPECT_GE(step, 5);
  EXPECT_TRUE(
      fs::exists(interrupted.interrupted().checkpoint_path() + "/meta.json"));

  Result second = RunYardTrain(Args(spec), dir_, term_after_progress());
  ASSERT_EQ(second.exit_code, 3) << second.stderr_text;
  const auto started = Parse(second.stdout_lines.front());
  ASSERT_TRUE(started.has_started());
  EXPECT_EQ(started.started().start_step(), step);
  EXPECT_EQ(started.started().resumed_from(),
            interrupted.interrupted().checkpoint_path());
  EXPECT_GT(Parse(second.stdout_lines.back()).interrupted().step(), step);
}

TEST_F(YardTrainCliTest, WarmStartTakesTheWeightsAndStartsAtStepZero) {
  Result base = RunYardTrain(Args(WriteSpec(60)), dir_);
  ASSERT_EQ(base.exit_code, 0) << base.stderr_text;
  std::vector<double> base_losses;
  for (const std::string& line : base.stdout_lines) {
    if (Parse(line).has_progress()) {
      base_losses.push_back(Parse(line).progress().loss());
    }
  }
  ASSERT_EQ(base_losses.size(), 12u);
  const double base_first_loss = base_losses.front();
  const double base_last_loss = base_losses.back();
  // Another run from the newest checkpoint of the first (its root given):
  // step 0 with a fresh optimizer, but the trained weights, so its first
  // losses are the first run's last ones, not its first.
  std::vector<std::string> args = Args(WriteSpec(10));
  args.back() = dir_ + "/next";
  args.insert(args.end(), {"--warm-start", dir_ + "/ck"});
  Result next = RunYardTrain(args, dir_);
  ASSERT_EQ(next.exit_code, 0) << next.stderr_text;
  const auto started = Parse(next.stdout_lines.front()).started();
  EXPECT_EQ(started.start_step(), 0);
  EXPECT_EQ(started.resumed_from(), "");
  const double next_first_loss = Parse(next.stdout_lines[1]).progress().loss();
  EXPECT_LT(next_first_loss, (base_first_loss + base_last_loss) / 2)
      << "first run " << base_first_loss << " -> " << base_last_loss;
  // Run again, it resumes from its own checkpoint: that wins.
  args.back() = dir_ + "/next";
  Result again = RunYardTrain(args, dir_);
  ASSERT_EQ(again.exit_code, 0) << again.stderr_text;
  EXPECT_EQ(Parse(again.stdout_lines.front()).started().resumed_from(),
            dir_ + "/next/step-00000010");

  // Weights that do not fit, or none: exit 2 naming warm_start.
  args = Args(WriteSpec(10, ""));
  std::ofstream(dir_ + "/wide.yaml")
      << "model: {mlp: {hidden: [16]}}\n"
      << "data: {mnist: {images: examples/data/mnist/t10k-images-idx3-ubyte.gz,"
      << " labels: examples/data/mnist/t10k-labels-idx1-ubyte.gz}}\n"
      << "batch: {micro_batch: 16}\nsteps: 2\n";
  args[1] = dir_ + "/wide.yaml";
  args.back() = dir_ + "/wide";
  args.insert(args.end(), {"--warm-start", dir_ + "/ck"});
  Result wide = RunYardTrain(args, dir_);
  EXPECT_EQ(wide.exit_code, 2) << wide.stderr_text;
  EXPECT_EQ(wide.last_stderr_line(),
            "yard-train: warm_start: its fc0.weight has shape [8, 784], this "
            "mlp's is [16, 784]");
  args.back() = dir_ + "/empty-root";
  Result none = RunYardTrain(args, dir_);
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_EQ(none.last_stderr_line(),
            "yard-train: warm_start: no checkpoint in " + dir_ + "/empty-root");
}

TEST_F(YardTrainCliTest, UsageErrorsExitTwo) {
  const std::string spec = WriteSpec(3);
  const std::vector<std::vector<std::string>> bad = {
      {},
      {"train", spec},
      {"run"},
      {"run", spec, "--threads", "0"},
      {"run", spec, "--threads"},
      {"run", spec, "--progress", "xml"},
      {"run", spec, "--bogus", "1"},
      {"run", spec, "extra"},
      {"run", dir_ + "/missing.yaml"},
      {"run", spec, "--device", "-1"},
      {"run", spec, "--device", "gpu0"},
      {"run", spec, "--allreduce-bucket-mb", "-5"},
      {"run", spec, "--allreduce-bucket-mb", "big"},
      {"run", spec, "--warm-start", ""},
  };
  for (const auto& args : bad) {
    Result r = RunYardTrain(args, dir_);
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(args, " ") << "\n"
                              << r.stderr_text;
    EXPECT_TRUE(absl::StartsWith(r.last_stderr_line(), "yard-train: "))
        << r.stderr_text;
  }
  // Help wherever it is asked for, the command's included.
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--help"},
                                             {"help"},
                                             {"run", "--help"},
                                             {"sample", dir_, "-h"},
                                             {"export", "--help"}}) {
    Result r = RunYardTrain(args, dir_);
    EXPECT_EQ(r.exit_code, 0) << absl::StrJoin(args, " ") << "\n"
                              << r.stderr_text;
  }
  // The message, alone on stderr (no usage block), names what is wrong, a
  // flag given last included, and a bad value with its flag.
  const std::vector<std::pair<std::vector<std::string>, std::string>> said = {
      {{"run", spec, "--threads"}, "yard-train: --threads needs a value"},
      {{"run", spec, "--bogus"}, "yard-train: unknown flag --bogus"},
      {{"sample", dir_, "--bogus"}, "yard-train: unknown flag --bogus"},
      {{"sample", dir_, "--seed"}, "yard-train: --seed needs a value"},
      {{"sample", dir_, "--tokens=-1"},
       "yard-train: --tokens must be an integer in [0, 1000000], got '-1'"},
      {{"sample", dir_, "--top-k", "x"},
       "yard-train: --top-k must be an integer of at least 0, got 'x'"},
      {{"sample", dir_, "--temperature", "nan"},
       "yard-train: --temperature must be a number in [0, 100], got 'nan'"},
      {{"sample", dir_, "--temperature", "-1"},
       "yard-train: --temperature must be a number in [0, 100], got '-1'"},
      {{"train", spec},
       "yard-train: unknown command 'train' (run, sample or export; see "
       "yard-train --help)"},
      {{"sample", dir_, "other"}, "yard-train: unexpected argument 'other'"},
      {{"run", spec, "--bogus=1"}, "yard-train: unknown flag --bogus"},
      {{"run", spec, "--threads=0"},
       "yard-train: --threads must be an integer in [1, 256], got '0'"},
      {{"run", spec, "--world-size", "0"},
       "yard-train: --world-size must be an integer in [1, 4096], got '0'"},
      {{"export", dir_, dir_ + "/out", "--foo"},
       "yard-train: unknown flag --foo (export takes CHECKPOINT_DIR OUT_DIR "
       "only)"},
      {{"export", dir_, dir_ + "/out", "more"},
       "yard-train: unexpected argument 'more'"},
  };
  for (const auto& [args, message] : said) {
    Result r = RunYardTrain(args, dir_);
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(args, " ");
    EXPECT_EQ(r.stderr_text, message + "\n");
  }
}

TEST_F(YardTrainCliTest, InvalidSpecsExitTwoNamingTheField) {
  struct Case {
    std::string yaml, field;
  };
  const Case cases[] = {
      {"batch: {micro_batch: 0}\n", "batch.micro_batch"},
      {"model: {gpt: {n_layer: 2, n_head: 2, d_model: 8, seq_len: 8, "
       "vocab_size: 8}}\n",
       "model.gpt"},
      {"data: {mnist: {images: ../../etc/passwd, labels: x, holdout: 1}}\n",
       "data.mnist.images"},
      {"model: {mlp: {hidden: [8], input_dim: 100}}\n", "model.mlp.input_dim"},
  };
  for (const Case& c : cases) {
    // Later YAML keys would be duplicates; write the case's spec whole.
    std::string base;
    {
      std::ifstream in(WriteSpec(3));
      std::stringstream ss;
      ss << in.rdbuf();
      base = ss.str();
    }
    std::string yaml;
    const std::string key = c.yaml.substr(0, c.yaml.find(':'));
    for (absl::string_view line :
         absl::StrSplit(base, '\n', absl::SkipEmpty())) {
      if (!absl::StartsWith(line, key + ":"))
        absl::StrAppend(&yaml, line, "\n");
    }
    const std::string path = dir_ + "/bad.yaml";
    std::ofstream(path) << yaml << c.yaml;
    Result r = RunYardTrain(Args(path), dir_);
    EXPECT_EQ(r.exit_code, 2) << c.yaml << r.stderr_text;
    EXPECT_TRUE(absl::StrContains(r.last_stderr_line(), c.field))
        << c.field << " vs " << r.stderr_text;
    EXPECT_TRUE(r.stdout_lines.empty());
  }
}

// A data file that will not parse would fail again: exit 2, as a bad spec,
// so that a worker's job fails at once instead of being restarted.
TEST_F(YardTrainCliTest, CorruptDataExitsTwoNamingTheField) {
  fs::create_directories(dir_ + "/root");
  std::ofstream(dir_ + "/root/images.gz") << "garbage";
  std::ofstream(dir_ + "/root/labels.gz") << "garbage";
  const std::string path = dir_ + "/spec.json";
  std::ofstream(path) << R"({"model": {"mlp": {"hidden": [8]}},
    "data": {"mnist": {"images": "images.gz", "labels": "labels.gz", "holdout": 1}},
    "batch": {"microBatch": 4}, "steps": 2})";
  Result r = RunYardTrain({"run", path, "--data-root", dir_ + "/root",
                           "--checkpoint-dir", dir_ + "/ck"},
                          dir_);
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_TRUE(
      absl::StartsWith(r.last_stderr_line(), "yard-train: data.mnist.images: "))
      << r.stderr_text;
  EXPECT_TRUE(absl::StrContains(r.last_stderr_line(), "images.gz"))
      << r.stderr_text;
}

// A tiny CHAR GPT's spec of `steps` steps over a line of text repeated, in
// dir/root; returns the spec's path.
std::string WriteTinyGptSpec(const std::string& dir, int steps) {
  fs::create_directories(dir + "/root");
  std::string text;
  for (int i = 0; i < 40; ++i)
    text += "so shaken as we are, so wan with care\n";
  std::ofstream(dir + "/root/t.txt") << text;
  const std::string spec = dir + "/gpt.yaml";
  std::ofstream(spec) << "model: {gpt: {n_layer: 1, n_head: 2, d_model: 16, "
                         "seq_len: 16, vocab_size: 20}}\n"
                      << "data: {text: {train: t.txt, tokenizer: CHAR}}\n"
                      << "batch: {micro_batch: 4}\nsteps: " << steps << "\n";
  return spec;
}

TEST_F(YardTrainCliTest, TrainsAGptThenSamplesAndExports) {
  const std::string spec = WriteTinyGptSpec(dir_, 6);
  Result r = RunYardTrain({"run", spec, "--data-root", dir_ + "/root",
                           "--checkpoint-dir", dir_ + "/ck"},
                          dir_);
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  const std::vector<std::string> sample = {
      "sample", dir_ + "/ck", "--tokens", "30",       "--seed",
      "3",      "--top-k",    "5",        "--prompt", "so "};
  Result a = RunYardTrain(sample, dir_);
  ASSERT_EQ(a.exit_code, 0) << a.stderr_text;
  ASSERT_FALSE(a.stdout_lines.empty());
  EXPECT_TRUE(absl::StartsWith(a.stdout_lines[0], "so "));
  EXPECT_EQ(RunYardTrain(sample, dir_).stdout_lines, a.stdout_lines);
  // vocab_size 20 is above the text's 15 characters: even drawn almost
  // uniformly, every token is one of them, never U+FFFD.
  Result hot = RunYardTrain({"sample", dir_ + "/ck", "--tokens", "200",
                             "--temperature", "100", "--seed", "1"},
                            dir_);
  ASSERT_EQ(hot.exit_code, 0) << hot.stderr_text;
  EXPECT_FALSE(
      absl::StrContains(absl::StrJoin(hot.stdout_lines, "\n"), "\xEF\xBF\xBD"));
  Result bad = RunYardTrain({"sample", dir_ + "/ck", "--prompt", "xyz"}, dir_);
  EXPECT_EQ(bad.exit_code, 2);  // 'x' is not in the vocabulary
  EXPECT_TRUE(absl::StrContains(bad.last_stderr_line(), "U+0078"));

  const std::string hf = dir_ + "/root/hf";
  Result e = RunYardTrain({"export", dir_ + "/ck", hf}, dir_);
  ASSERT_EQ(e.exit_code, 0) << e.stderr_text;
  EXPECT_TRUE(fs::exists(hf + "/config.json"));
  EXPECT_TRUE(fs::exists(hf + "/model.safetensors"));
  EXPECT_EQ(RunYardTrain({"export", dir_ + "/ck"}, dir_).exit_code, 2);
  // A folder is written new, never over another.
  Result again = RunYardTrain({"export", dir_ + "/ck", hf}, dir_);
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_EQ(again.stderr_text, "yard-train: " + hf +
                                   " already exists: name a new or empty "
                                   "folder\n");
  fs::create_directories(dir_ + "/empty");
  EXPECT_EQ(
      RunYardTrain({"export", dir_ + "/ck", dir_ + "/empty"}, dir_).exit_code,
      0);

  // Fine-tuning a CHAR model needs its characters' ids: refused at start,
  // as a bad spec (not restarted), when the folder lost them.
  fs::remove(hf + "/trainyard_tokenizer.json");
  const std::string finetune = dir_ + "/finetune.yaml";
  std::ofstream(finetune) << "model: {gpt: {n_layer: 1, n_head: 2, "
                             "d_model: 16, seq_len: 16, vocab_size: 20, "
                             "init_from: hf}}\n"
                          << "data: {text: {train: t.txt, tokenizer: CHAR}}\n"
                          << "batch: {micro_batch: 4}\nsteps: 2\n";
  Result refused = RunYardTrain({"run", finetune, "--data-root", dir_ + "/root",
                                 "--checkpoint-dir", dir_ + "/ck-finetune"},
                                dir_);
  EXPECT_EQ(refused.exit_code, 2) << refused.stderr_text;
  EXPECT_TRUE(absl::StartsWith(refused.last_stderr_line(),
                               "yard-train: model.gpt.init_from: "))
      << refused.stderr_text;
  EXPECT_TRUE(absl::StrContains(refused.last_stderr_line(),
                                "has no trainyard_tokenizer.json"))
      << refused.stderr_text;
  EXPECT_TRUE(refused.stdout_lines.empty());
}

// A checkpoint that reads back intact but whose weights hold a NaN (its
// training diverged) gives no text: sample exits 1 saying why, in one
// line, instead of printing one token over and over.
TEST_F(YardTrainCliTest, SampleOfBrokenWeightsExitsOne) {
  const std::string spec = WriteTinyGptSpec(dir_, 2);
  ASSERT_EQ(RunYardTrain({"run", spec, "--data-root", dir_ + "/root",
                          "--checkpoint-dir", dir_ + "/ck"},
                         dir_)
                .exit_code,
            0);
  const std::string path = dir_ + "/ck/step-00000002";
  absl::StatusOr<trainyard::engine::Checkpoint> ckpt =
      trainyard::engine::ReadCheckpoint(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  for (trainyard::engine::HostTensor& t : ckpt->tensors) {
    if (t.name == "ln_f.weight") {
      t.data[0] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  ASSERT_TRUE(trainyard::engine::WriteCheckpoint(dir_ + "/ck", *ckpt).ok());
  Result r = RunYardTrain({"sample", dir_ + "/ck", "--tokens", "5"}, dir_);
  EXPECT_EQ(r.exit_code, 1) << r.stderr_text;
  EXPECT_TRUE(r.stdout_lines.empty());
  EXPECT_EQ(std::count(r.stderr_text.begin(), r.stderr_text.end(), '\n'), 1)
      << r.stderr_text;
  EXPECT_TRUE(absl::StartsWith(r.stderr_text, "yard-train: " + path + ": "))
      << r.stderr_text;
  EXPECT_TRUE(absl::StrContains(r.stderr_text, "is nan")) << r.stderr_text;
}

// What sample and export are pointed at must hold a GPT checkpoint: an
// MLP's, an empty folder or none at all is a usage error (exit 2), said in
// one line.
TEST_F(YardTrainCliTest, SampleAndExportOfNoGptExitTwo) {
  ASSERT_EQ(RunYardTrain(Args(WriteSpec(2)), dir_).exit_code, 0);
  fs::create_directories(dir_ + "/empty");
  for (const std::string& from :
       {dir_ + "/ck", dir_ + "/empty", dir_ + "/none"}) {
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"sample", from},
          std::vector<std::string>{"export", from, dir_ + "/out"}}) {
      Result r = RunYardTrain(args, dir_);
      EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(args, " ");
      EXPECT_EQ(std::count(r.stderr_text.begin(), r.stderr_text.end(), '\n'), 1)
          << r.stderr_text;
      EXPECT_TRUE(absl::StartsWith(r.stderr_text, "yard-train: "))
          << r.stderr_text;
    }
  }
  EXPECT_FALSE(fs::exists(dir_ + "/out"));
}

// A GPT run killed with SIGKILL right after its step-4 checkpoint and
// started again ends with the same bytes (weights and AdamW moments) as an
// uninterrupted run.
TEST_F(YardTrainCliTest, GptKilledAndResumedEndsBitwiseEqual) {
  fs::create_directories(dir_ + "/root");
  std::string text;
  for (int i = 0; i < 50; ++i) text += "now is the winter of our discontent\n";
  std::ofstream(dir_ + "/root/t.txt") << text;
  const std::string spec = dir_ + "/gpt.yaml";
  std::ofstream(spec) << "model: {gpt: {n_layer: 2, n_head: 2, d_model: 16, "
                         "seq_len: 16, vocab_size: 20}}\n"
                      << "data: {text: {train: t.txt, tokenizer: CHAR}}\n"
                      << "batch: {micro_batch: 4, grad_accum: 2}\nsteps: 30\n"
                      << "checkpoint: {every_steps: 2}\nlog_every_steps: 1\n";
  auto run = [&](const std::string& ck,
                 const std::function<void(const std::string&, pid_t)>& f) {
    return RunYardTrain(
        {"run", spec, "--data-root", dir_ + "/root", "--checkpoint-dir",
         dir_ + "/" + ck, "--progress", "json", "--threads", "2"},
        dir_, f);
  };
  ASSERT_EQ(run("straight", {}).exit_code, 0);
  auto kill_at_4 = [](const std::string& line, pid_t pid) {
    const auto e = Parse(line);
    if (e.has_checkpoint() && e.checkpoint().step() == 4) kill(pid, SIGKILL);
  };
  Result killed = run("killed", kill_at_4);
  ASSERT_EQ(killed.exit_code, 128 + SIGKILL);
  Result resumed = run("killed", {});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.stderr_text;
  // From step 4, or a later checkpoint written before the kill landed.
  const int64_t start =
      Parse(resumed.stdout_lines.front()).started().start_step();
  EXPECT_GE(start, 4);
  EXPECT_LT(start, 30);
  auto bytes = [&](const std::string& ck) {
    std::ifstream in(dir_ + "/" + ck + "/step-00000030/model.safetensors",
                     std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string want = bytes("straight");
  ASSERT_GT(want.size(), 1000u);
  EXPECT_TRUE(want == bytes("killed"));
}

}  // namespace

// A checkpoint dir written by a run of another model is the request's
// mistake: refused before training (exit 2), naming what differs, and the
// checkpoint is left as it was.
TEST_F(YardTrainCliTest, CheckpointOfAnotherModelExitsTwoNamingTheDifference) {
  const std::string gpt = WriteTinyGptSpec(dir_, 2);
  const std::vector<std::string> args = {
      "run",           gpt, "--data-root", dir_ + "/root", "--checkpoint-dir",
      dir_ + "/gpt-ck"};
  Result first = RunYardTrain(args, dir_);
  ASSERT_EQ(first.exit_code, 0) << first.stderr_text;
  const std::string meta = dir_ + "/gpt-ck/step-00000002/meta.json";
  ASSERT_TRUE(fs::exists(meta));
  const auto written = fs::last_write_time(meta);
  {
    std::ifstream in(gpt);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string yaml = ss.str();
    yaml.replace(yaml.find("n_layer: 1"), 10, "n_layer: 2");
    std::ofstream(gpt) << yaml;
  }
  Result deeper = RunYardTrain(args, dir_);
  EXPECT_EQ(deeper.exit_code, 2) << deeper.stderr_text;
  EXPECT_TRUE(
      absl::StrContains(deeper.last_stderr_line(), "does not match the spec"))
      << deeper.stderr_text;
  EXPECT_TRUE(absl::StrContains(deeper.last_stderr_line(),
                                "model.gpt.n_layer is 1 there, 2 here"))
      << deeper.stderr_text;
  EXPECT_TRUE(deeper.stdout_lines.empty());
  EXPECT_EQ(fs::last_write_time(meta), written);

  // An MLP has no sizes in its checkpoint: the tensor that differs.
  Result mlp = RunYardTrain(Args(WriteSpec(2)), dir_);
  ASSERT_EQ(mlp.exit_code, 0) << mlp.stderr_text;
  std::vector<std::string> wide_args = Args(WriteSpec(2));
  wide_args[1] = dir_ + "/wide.yaml";
  std::ofstream(wide_args[1])
      << "name: cli-test\nmodel: {mlp: {hidden: [16]}}\n"
      << "data: {mnist: {images: examples/data/mnist/t10k-images-idx3-ubyte.gz,"
      << " labels: examples/data/mnist/t10k-labels-idx1-ubyte.gz}}\n"
      << "batch: {micro_batch: 16}\nsteps: 2\n";
  Result wider = RunYardTrain(wide_args, dir_);
  EXPECT_EQ(wider.exit_code, 2) << wider.stderr_text;
  EXPECT_TRUE(
      absl::StrContains(wider.last_stderr_line(),
                        "fc0.weight has shape [8, 784] there, [16, 784]"))
      << wider.stderr_text;
}

// The checkpoint of two ranks holds the whole AdamW state, so one rank
// could go on from it, but on half the global batch: refused (exit 2),
// saying how to go on.
TEST_F(YardTrainCliTest, ResumeWithAnotherWorldSizeExitsTwo) {
  std::vector<std::string> args = Args(WriteSpec(2));
  std::vector<std::string> rank0 = args, rank1 = args;
  for (auto* a : {&rank0, &rank1}) {
    a->insert(a->end(), {"--world-size", "2", "--rendezvous",
                         dir_ + "/rendezvous", "--rank"});
  }
  rank0.push_back("0");
  rank1.push_back("1");
  fs::create_directories(dir_ + "/r1");
  Result second;
  std::thread other([&] { second = RunYardTrain(rank1, dir_ + "/r1"); });
  Result first = RunYardTrain(rank0, dir_);
  other.join();
  ASSERT_EQ(first.exit_code, 0) << first.stderr_text;
  ASSERT_EQ(second.exit_code, 0) << second.stderr_text;
  ASSERT_TRUE(fs::exists(dir_ + "/ck/step-00000002/meta.json"));

  Result alone = RunYardTrain(args, dir_);
  EXPECT_EQ(alone.exit_code, 2) << alone.stderr_text;
  EXPECT_TRUE(absl::StrContains(alone.last_stderr_line(),
                                "was written by a run of 2 data-parallel ranks "
                                "(a global batch of 32 examples), this one has "
                                "1 (16)"))
      << alone.stderr_text;
  EXPECT_TRUE(alone.stdout_lines.empty());
  // The same two ranks resume (and at the last step, finish at once).
  std::thread again([&] { second = RunYardTrain(rank1, dir_ + "/r1"); });
  first = RunYardTrain(rank0, dir_);
  again.join();
  EXPECT_EQ(first.exit_code, 0) << first.stderr_text;
  EXPECT_EQ(second.exit_code, 0) << second.stderr_text;
}

// A CPU job whose memory estimate is above the host's available memory is
// refused at start with both figures, by --dry-run too, exiting 5 (another
// host may have the memory; not a usage error); the override stands in
// for a small host.
TEST_F(YardTrainCliTest, ModelTooBigForTheHostExitsFiveWithTheFigures) {
  const std::vector<std::string> args = Args(WriteSpec(2));
  std::vector<std::string> dry = args;
  dry.push_back("--dry-run");
  Result fits = RunYardTrain(dry, dir_);
  EXPECT_EQ(fits.exit_code, 0) << fits.stderr_text;
  ASSERT_EQ(fits.stdout_lines.size(), 1u);
  EXPECT_TRUE(
      absl::StartsWith(fits.stdout_lines[0],
                       "dry run: the job would start: 9500 training "
                       "examples, 500 for evaluation; memory estimate "))
      << fits.stdout_lines[0];
  EXPECT_FALSE(fs::exists(dir_ + "/ck"));

  setenv("YARD_HOST_MEMORY_BYTES", "1048576", 1);
  Result run = RunYardTrain(args, dir_);
  Result checked = RunYardTrain(dry, dir_);
  unsetenv("YARD_HOST_MEMORY_BYTES");
  for (const Result* r : {&run, &checked}) {
    EXPECT_EQ(r->exit_code, 5) << r->stderr_text;
    EXPECT_TRUE(absl::StartsWith(
        r->last_stderr_line(),
        "yard-train: memory: the job needs more host memory than is "
        "available: memory estimate 65."))
        << r->stderr_text;
    EXPECT_TRUE(absl::StrContains(r->last_stderr_line(),
                                  " MiB, 1.0 MiB available "
                                  "(YARD_HOST_MEMORY_BYTES); the estimate is "
                                  "weights "))
        << r->stderr_text;
    EXPECT_TRUE(r->stdout_lines.empty());
  }
  EXPECT_FALSE(fs::exists(dir_ + "/ck"));
}

// The ranks of a job on one host start together, each seeing the same
// memory free: each checks the estimate of them all (--ranks-on-host,
// which the worker passes), so two ranks that fit one at a time are
// refused together; a count above the world size is a usage error.
TEST_F(YardTrainCliTest, RanksOnOneHostCheckTheirMemoryTogether) {
  std::vector<std::string> args = Args(WriteSpec(2));
  args.insert(args.end(), {"--rank", "0", "--world-size", "2", "--rendezvous",
                           dir_ + "/rendezvous", "--dry-run"});
  setenv("YARD_HOST_MEMORY_BYTES", "104857600", 1);  // 100 MiB
  Result alone = RunYardTrain(args, dir_);
  std::vector<std::string> both = args;
  both.insert(both.end(), {"--ranks-on-host", "2"});
  Result together = RunYardTrain(both, dir_);
  unsetenv("YARD_HOST_MEMORY_BYTES");
  EXPECT_EQ(alone.exit_code, 0) << alone.stderr_text;
  EXPECT_EQ(together.exit_code, 5) << together.stderr_text;
  EXPECT_TRUE(absl::StartsWith(
      together.last_stderr_line(),
      "yard-train: memory: the job needs more host memory than is "
      "available: memory estimate 65."))
      << together.stderr_text;
  EXPECT_TRUE(absl::StrContains(together.last_stderr_line(),
                                " MiB a rank, 13"))  // 2 x 65.x MiB
      << together.stderr_text;
  EXPECT_TRUE(absl::StrContains(together.last_stderr_line(),
                                " MiB for the 2 ranks on this host, 100.0 MiB "
                                "available (YARD_HOST_MEMORY_BYTES)"))
      << together.stderr_text;

  std::vector<std::string> three = args;
  three.insert(three.end(), {"--ranks-on-host", "3"});
  Result over = RunYardTrain(three, dir_);
  EXPECT_EQ(over.exit_code, 2);
  EXPECT_TRUE(
      absl::StrContains(over.last_stderr_line(),
                        "--ranks-on-host 3 must not be above --world-size 2"))
      << over.stderr_text;
  std::vector<std::string> zero = args;
  zero.insert(zero.end(), {"--ranks-on-host", "0"});
  Result none = RunYardTrain(zero, dir_);
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(
      none.last_stderr_line(),
      "--ranks-on-host must be an integer in [1, 4096], got '0'"))
      << none.stderr_text;
}

// --dry-run makes the run's own data checks: what fails the run before
// training fails the dry run the same way.
TEST_F(YardTrainCliTest, DryRunRefusesWhatTheRunRefuses) {
  const std::string gpt = WriteTinyGptSpec(dir_, 2);
  std::ofstream(dir_ + "/root/t.txt") << "so shaken\n";
  std::vector<std::string> args = {
      "run",       gpt, "--data-root", dir_ + "/root", "--checkpoint-dir",
      dir_ + "/ck"};
  Result run = RunYardTrain(args, dir_);
  args.push_back("--dry-run");
  Result dry = RunYardTrain(args, dir_);
  for (const Result* r : {&run, &dry}) {
    EXPECT_EQ(r->exit_code, 2) << r->stderr_text;
    EXPECT_EQ(r->last_stderr_line(),
              "yard-train: data.text.train: 9 training tokens are fewer than "
              "model.gpt.seq_len + 1 (17)");
  }
}
