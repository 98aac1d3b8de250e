#include "engine/core/checkpoint.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <thread>
#include <tuple>

#include "absl/strings/match.h"
#include "common/test_dir.h"
#include "engine/core/file_io.h"
#include "engine/core/rng.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  static Checkpoint Sample(int64_t step) {
    Checkpoint c;
    c.meta.step = step;
    c.meta.rng_state = Rng(step + 1).SerializeState();
    c.meta.cursor = {3, 17};
    c.meta.fingerprint = "00112233aabbccdd";
    c.tensors = {{"fc0.weight", {2, 2}, {1, 2, 3, static_cast<float>(step)}},
                 {"adamw.m.fc0.weight", {2, 2}, {0.1f, 0.2f, 0.3f, 0.4f}}};
    return c;
  }

  static void Overwrite(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }

  TestDir tmp_;
  // Made by the first checkpoint written.
  const std::string root_ = tmp_.File("checkpoints");
};

TEST_F(CheckpointTest, TheTensorsRecordOfMetaJsonChecksACopy) {
  absl::StatusOr<std::string> path = WriteCheckpoint(root_, Sample(77));
  ASSERT_TRUE(path.ok()) << path.status();
  std::ifstream meta_in(*path + "/meta.json", std::ios::binary);
  const std::string meta((std::istreambuf_iterator<char>(meta_in)),
                         std::istreambuf_iterator<char>());
  std::ifstream tensors_in(*path + "/model.safetensors", std::ios::binary);
  const std::string tensors((std::istreambuf_iterator<char>(tensors_in)),
                            std::istreambuf_iterator<char>());
  absl::StatusOr<TensorsFileRecord> record = ReadTensorsFileRecord(meta);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->step, 77);
  EXPECT_EQ(record->bytes, static_cast<int64_t>(tensors.size()));
  EXPECT_EQ(record->crc32, Crc32(0, tensors));
  absl::StatusOr<TensorsFileRecord> bad = ReadTensorsFileRecord("{\"x\": 1}");
  EXPECT_TRUE(absl::IsDataLoss(bad.status())) << bad.status();
  EXPECT_THAT(std::string(bad.status().message()),
              ::testing::StartsWith("meta.json: "));
  EXPECT_EQ(StepFromDirName("step-00000077"), 77);
  EXPECT_EQ(StepFromDirName("step-"), -1);
  EXPECT_EQ(StepFromDirName(".tmp-step-00000077"), -1);
}

TEST_F(CheckpointTest, RoundTripsEverything) {
  absl::StatusOr<std::string> path = WriteCheckpoint(root_, Sample(1234));
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(fs::path(*path).filename(), "step-00001234");
  EXPECT_TRUE(fs::exists(*path + "/model.safetensors"));
  absl::StatusOr<Checkpoint> back = ReadCheckpoint(*path);
  ASSERT_TRUE(back.ok()) << back.status();
  const Checkpoint want = Sample(1234);
  EXPECT_EQ(back->meta.step, 1234);
  EXPECT_EQ(back->meta.rng_state, want.meta.rng_state);
  EXPECT_EQ(back->meta.cursor, want.meta.cursor);
  EXPECT_EQ(back->meta.fingerprint, want.meta.fingerprint);
  ASSERT_EQ(back->tensors.size(), 2u);
  EXPECT_EQ(back->tensors[0].name, "fc0.weight");
  EXPECT_EQ(back->tensors[0].data, want.tensors[0].data);
  EXPECT_EQ(back->tensors[1].data, want.tensors[1].data);
  // No temp dirs left behind.
  for (const auto& e : fs::directory_iterator(root_)) {
    EXPECT_FALSE(absl::StartsWith(e.path().filename().string(), "."));
  }
  const std::string meta = *ReadWholeFile(*path + "/meta.json", 1 << 20);
  EXPECT_TRUE(absl::StrContains(meta, R"("magic":"trainyard-checkpoint")"));
  EXPECT_TRUE(absl::StrContains(meta, R"("version":1)"));
}

// The early stopping's state round-trips bit for bit (a resumed run must
// make the same decisions), is absent when the run had none, and a state
// no run could write is refused.
TEST_F(CheckpointTest, KeepsTheEarlyStoppingState) {
  Checkpoint with = Sample(40);
  with.meta.early_stopping = EarlyStoppingState{0.1 + 0.2, 30, 1};
  const std::string path = *WriteCheckpoint(root_, with);
  absl::StatusOr<Checkpoint> back = ReadCheckpoint(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->meta.early_stopping.has_value());
  EXPECT_EQ(back->meta.early_stopping->best_loss, 0.1 + 0.2);  // exactly
  EXPECT_EQ(back->meta.early_stopping->best_step, 30);
  EXPECT_EQ(back->meta.early_stopping->evals_since_best, 1);

  const std::string without = *WriteCheckpoint(root_, Sample(41));
  EXPECT_FALSE(ReadCheckpoint(without)->meta.early_stopping.has_value());
  EXPECT_FALSE(absl::StrContains(
      *ReadWholeFile(without + "/meta.json", 1 << 20), "early_stopping"));

  const std::string meta_path = path + "/meta.json";
  const std::string good = *ReadWholeFile(meta_path, 1 << 20);
  for (const auto& [from, to, expect] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {R"("best_step":30)", R"("best_step":41)", "outside the run"},
           {R"("evals_since_best":1)", R"("evals_since_best":-1)",
            "negative count"},
           {R"("best_loss":)", R"("best_lost":)", "best_loss"},
           {R"("best_step":30)", R"("best_step":"30")",
            "early_stopping.best_step"},
       }) {
    std::string text = good;
    ASSERT_NE(text.find(from), std::string::npos) << from;
    text.replace(text.find(from), from.size(), to);
    Overwrite(meta_path, text);
    absl::StatusOr<Checkpoint> r = ReadCheckpoint(path);
    EXPECT_FALSE(r.ok()) << to;
    EXPECT_TRUE(absl::StrContains(r.status().message(), expect)) << r.status();
  }
}

// The figures a run ending at the step reports and its report's loss so
// far: kept exactly, and left out when one is not finite (JSON has no
// infinity: the checkpoint must stay readable).
TEST_F(CheckpointTest, KeepsTheStepsFiguresWhenFinite) {
  Checkpoint with = Sample(40);
  with.meta.figures = StepFigures{0.1 + 0.2, 1.5, 0.25, 64, 7.0 / 3, 96};
  absl::StatusOr<Checkpoint> back =
      ReadCheckpoint(*WriteCheckpoint(root_, with));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->meta.figures.has_value());
  EXPECT_EQ(back->meta.figures->train_loss, 0.1 + 0.2);
  EXPECT_EQ(back->meta.figures->eval_loss, 1.5);
  EXPECT_EQ(back->meta.figures->eval_accuracy, 0.25);
  EXPECT_EQ(back->meta.figures->eval_examples, 64);
  EXPECT_EQ(back->meta.figures->window_loss_sum, 7.0 / 3);  // exactly
  EXPECT_EQ(back->meta.figures->window_loss_terms, 96);
  with = Sample(41);
  with.meta.figures =
      StepFigures{2.0, std::numeric_limits<double>::infinity(), 0, 64};
  back = ReadCheckpoint(*WriteCheckpoint(root_, with));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->meta.figures.has_value());
  EXPECT_FALSE(ReadCheckpoint(*WriteCheckpoint(root_, Sample(42)))
                   ->meta.figures.has_value());
}

// A checkpoint written before the report's loss so far was kept reads
// with an empty window; one with half of it is corrupt.
TEST_F(CheckpointTest, FiguresWithoutTheLossWindowReadAsAnEmptyWindow) {
  Checkpoint with = Sample(40);
  with.meta.figures = StepFigures{0.5, 1.5, 0.25, 64, 3.5, 96};
  const std::string path = *WriteCheckpoint(root_, with);
  const std::string meta_path = path + "/meta.json";
  const std::string good = *ReadWholeFile(meta_path, 1 << 20);
  // `text` less one member: `field` is its ,"name": (the value runs to the
  // next , or }).
  auto without = [](std::string text, const std::string& field) {
    const size_t at = text.find(field);
    EXPECT_NE(at, std::string::npos) << field;
    if (at != std::string::npos)
      text.erase(at, text.find_first_of(",}", at + 1) - at);
    return text;
  };
  Overwrite(meta_path, without(without(good, R"(,"window_loss_sum":)"),
                               R"(,"window_loss_terms":)"));
  absl::StatusOr<Checkpoint> old = ReadCheckpoint(path);
  ASSERT_TRUE(old.ok()) << old.status();
  ASSERT_TRUE(old->meta.figures.has_value());
  EXPECT_EQ(old->meta.figures->train_loss, 0.5);
  EXPECT_EQ(old->meta.figures->window_loss_sum, 0);
  EXPECT_EQ(old->meta.figures->window_loss_terms, 0);

  Overwrite(meta_path, without(good, R"(,"window_loss_terms":)"));
  absl::StatusOr<Checkpoint> half = ReadCheckpoint(path);
  EXPECT_FALSE(half.ok());
  EXPECT_TRUE(absl::StrContains(half.status().message(), "come together"))
      << half.status();
}

TEST_F(CheckpointTest, RewritingAStepReplacesIt) {
  ASSERT_TRUE(WriteCheckpoint(root_, Sample(5)).ok());
  Checkpoint again = Sample(5);
  again.tensors[0].data[0] = 42;
  ASSERT_TRUE(WriteCheckpoint(root_, again).ok());
  EXPECT_EQ(ReadCheckpoint(root_ + "/step-00000005")->tensors[0].data[0], 42);
}

TEST_F(CheckpointTest, RejectsTruncatedTensorFile) {
  const std::string path = *WriteCheckpoint(root_, Sample(1));
  const std::string file = path + "/model.safetensors";
  std::string bytes = *ReadWholeFile(file, 1 << 20);
  Overwrite(file, bytes.substr(0, bytes.size() - 3));
  absl::StatusOr<Checkpoint> r = ReadCheckpoint(path);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StartsWith(r.status().message(), file)) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "truncated"))
      << r.status();
}

TEST_F(CheckpointTest, RejectsFlippedByte) {
  const std::string path = *WriteCheckpoint(root_, Sample(1));
  const std::string file = path + "/model.safetensors";
  std::string bytes = *ReadWholeFile(file, 1 << 20);
  bytes[bytes.size() - 2] ^= 0x40;  // inside the tensor data
  Overwrite(file, bytes);
  absl::StatusOr<Checkpoint> r = ReadCheckpoint(path);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "CRC-32")) << r.status();
}

TEST_F(CheckpointTest, RejectsBadMeta) {
  const std::string path = *WriteCheckpoint(root_, Sample(1));
  const std::string meta_path = path + "/meta.json";
  const std::string good = *ReadWholeFile(meta_path, 1 << 20);
  struct Case {
    std::string from, to, expect;
  };
  const Case cases[] = {
      {"trainyard-checkpoint", "something-else", "magic"},
      {R"("version":1)", R"("version":2)", "version 2"},
      {R"("step":1)", R"("step":2)", "does not match the directory"},
      {R"("epoch":3)", R"("epoch":"x")", "data_cursor.epoch"},
      {R"("spec_fingerprint")", R"("fingerprint")", "spec_fingerprint"},
      {"{", "[", "invalid JSON"},
  };
  for (const Case& c : cases) {
    std::string text = good;
    text.replace(text.find(c.from), c.from.size(), c.to);
    Overwrite(meta_path, text);
    absl::StatusOr<Checkpoint> r = ReadCheckpoint(path);
    ASSERT_FALSE(r.ok()) << c.to;
    EXPECT_TRUE(absl::StartsWith(r.status().message(), meta_path))
        << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), c.expect))
        << r.status();
  }
  Overwrite(meta_path, good.substr(0, good.size() / 2));
  EXPECT_EQ(ReadCheckpoint(path).status().code(), absl::StatusCode::kDataLoss);
  fs::remove(meta_path);
  EXPECT_EQ(ReadCheckpoint(path).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CheckpointTest, LatestSkipsCorruptOnesAndPruneKeepsTheNewest) {
  for (int64_t step : {10, 20, 30, 40})
    ASSERT_TRUE(WriteCheckpoint(root_, Sample(step)).ok());
  // A write that died two hours ago, and one another writer is busy with.
  const std::string crashed = root_ + "/.tmp-step-00000050.00000000000000aa";
  const std::string busy = root_ + "/.tmp-step-00000060.00000000000000bb";
  fs::create_directories(crashed);
  fs::create_directories(busy);
  fs::last_write_time(crashed,
                      fs::file_time_type::clock::now() - std::chrono::hours(2));
  ASSERT_TRUE(PruneCheckpoints(root_, 3).ok());
  EXPECT_TRUE(fs::exists(busy));
  absl::StatusOr<std::vector<CheckpointEntry>> list = ListCheckpoints(root_);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].step, 40);
  EXPECT_EQ((*list)[2].step, 20);
  EXPECT_FALSE(fs::exists(crashed));

  Overwrite(root_ + "/step-00000040/model.safetensors", "garbage");
  absl::StatusOr<std::optional<LatestCheckpoint>> latest =
      ReadLatestCheckpoint(root_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->checkpoint.meta.step, 30);
  ASSERT_EQ((*latest)->skipped.size(), 1u);
  EXPECT_TRUE(absl::StrContains((*latest)->skipped[0], "step-00000040"));
}

// Two attempts of one job -- one of them stale, on a worker that lost its
// lease -- write and prune the same checkpoints under one root at once:
// every write lands whole, and neither removes the other's work in
// progress.
TEST_F(CheckpointTest, TwoWritersOfTheSameStepsDoNotCollide) {
  auto writer = [&](absl::Status* result) {
    for (int64_t step = 1; step <= 30 && result->ok(); ++step) {
      absl::StatusOr<std::string> path = WriteCheckpoint(root_, Sample(step));
      if (!path.ok()) {
        *result = path.status();
      } else {
        *result = PruneCheckpoints(root_, 2);
      }
    }
  };
  absl::Status a, b;
  std::thread first(writer, &a), second(writer, &b);
  first.join();
  second.join();
  EXPECT_TRUE(a.ok()) << a;
  EXPECT_TRUE(b.ok()) << b;
  absl::StatusOr<std::optional<LatestCheckpoint>> latest =
      ReadLatestCheckpoint(root_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->checkpoint.meta.step, 30);
  EXPECT_TRUE((*latest)->skipped.empty());
  for (const fs::directory_entry& e : fs::directory_iterator(root_)) {
    EXPECT_FALSE(absl::StartsWith(e.path().filename().string(), "."))
        << "left behind: " << e.path();
  }
}

TEST_F(CheckpointTest, PruneKeepsTheBestStepToo) {
  for (int64_t step : {10, 20, 30, 40, 50})
    ASSERT_TRUE(WriteCheckpoint(root_, Sample(step)).ok());
  ASSERT_TRUE(PruneCheckpoints(root_, 2, /*also_keep_step=*/20).ok());
  absl::StatusOr<std::vector<CheckpointEntry>> list = ListCheckpoints(root_);
  ASSERT_TRUE(list.ok()) << list.status();
  std::vector<int64_t> steps;
  for (const CheckpointEntry& e : *list) steps.push_back(e.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{50, 40, 20}));
  ASSERT_TRUE(PruneCheckpoints(root_, 2, /*also_keep_step=*/50).ok());
  EXPECT_EQ(ListCheckpoints(root_)->size(), 2u);  // 50 is among the last
}

TEST_F(CheckpointTest, NoCheckpointsIsNotAnErrorButAllCorruptIs) {
  absl::StatusOr<std::optional<LatestCheckpoint>> none =
      ReadLatestCheckpoint(root_ + "/missing");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(WriteCheckpoint(root_, Sample(1)).ok());
  Overwrite(root_ + "/step-00000001/meta.json", "{}");
  EXPECT_EQ(ReadLatestCheckpoint(root_).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(CheckpointTest, RefusesSymlinksOutOfTheCheckpoint) {
  absl::StatusOr<std::string> path = WriteCheckpoint(root_, Sample(3));
  ASSERT_TRUE(path.ok()) << path.status();
  // A planted link in place of a file: refused, not followed.
  const std::string elsewhere = root_ + "-elsewhere";
  fs::create_directories(elsewhere);
  fs::rename(*path + "/model.safetensors", elsewhere + "/model.safetensors");
  fs::create_symlink(elsewhere + "/model.safetensors",
                     *path + "/model.safetensors");
  absl::StatusOr<Checkpoint> r = ReadCheckpoint(*path);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "is a symlink"))
      << r.status();
  // A step-* link to a directory outside the root is not a checkpoint.
  ASSERT_TRUE(WriteCheckpoint(elsewhere, Sample(9)).ok());
  fs::create_directory_symlink(elsewhere + "/step-00000009",
                               root_ + "/step-00000009");
  absl::StatusOr<std::vector<CheckpointEntry>> list = ListCheckpoints(root_);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].step, 3);
  ASSERT_TRUE(PruneCheckpoints(root_, 1).ok());
  EXPECT_TRUE(fs::exists(elsewhere + "/step-00000009/meta.json"));
}

TEST_F(CheckpointTest, ParsesFromMemoryWithTheSameChecks) {
  absl::StatusOr<std::string> path = WriteCheckpoint(root_, Sample(5));
  ASSERT_TRUE(path.ok()) << path.status();
  const std::string meta = *ReadWholeFile(*path + "/meta.json", 1 << 20);
  const std::string tensors =
      *ReadWholeFile(*path + "/model.safetensors", 1 << 20);
  absl::StatusOr<Checkpoint> c = ParseCheckpoint(meta, tensors, *path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->meta.step, 5);
  EXPECT_EQ(c->tensors.size(), 2u);
  // The directory's step name must agree; another name carries no step.
  EXPECT_EQ(
      ParseCheckpoint(meta, tensors, root_ + "/step-00000006").status().code(),
      absl::StatusCode::kDataLoss);
  EXPECT_TRUE(ParseCheckpoint(meta, tensors, "anywhere").ok());
  std::string flipped = tensors;
  flipped.back() ^= 1;
  EXPECT_EQ(ParseCheckpoint(meta, flipped, *path).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseCheckpoint(std::string(17 << 20, ' '), tensors, *path)
                .status()
                .code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(CheckpointTest, IgnoresUnrelatedEntries) {
  fs::create_directories(root_ + "/step-abc");
  fs::create_directories(root_ + "/notes");
  std::ofstream(root_ + "/step-00000009") << "a file, not a dir";
  absl::StatusOr<std::vector<CheckpointEntry>> list = ListCheckpoints(root_);
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
}

}  // namespace
}  // namespace trainyard::engine
