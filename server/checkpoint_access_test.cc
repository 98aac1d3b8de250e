// Listing, picking and streaming a job's checkpoints from real directories,
// including ones a hostile job could plant (symlinks) and one pruned while
// it streams.
#include "server/checkpoint_access.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/test_dir.h"
#include "engine/core/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::server {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

class CheckpointAccessTest : public ::testing::Test {
 protected:
  CheckpointAccessTest() {
    job_.set_id("j-000007");
    job_.set_checkpoint_dir(dir_.File("ckpt/j-000007"));
  }

  // A step-N directory with a meta.json and a model.safetensors of `bytes`.
  std::string AddCheckpoint(int64_t step, const std::string& tensors,
                            const std::string& meta = "{\"step\": 1}") {
    const std::string d = absl::StrCat(job_.checkpoint_dir(), "/step-",
                                       absl::StrFormat("%08d", step));
    fs::create_directories(d);
    WriteFile(d + "/meta.json", meta);
    WriteFile(d + "/model.safetensors", tensors);
    return d;
  }

  std::vector<int64_t> Steps() {
    absl::StatusOr<std::vector<v1::CheckpointInfo>> all =
        ListJobCheckpoints(job_);
    EXPECT_TRUE(all.ok()) << all.status();
    std::vector<int64_t> steps;
    if (all.ok()) {
      for (const auto& c : *all) steps.push_back(c.step());
    }
    return steps;
  }

  absl::StatusOr<int64_t> Pick(int64_t step, bool best = false) {
    v1::DownloadCheckpointRequest r;
    r.set_step(step);
    r.set_best(best);
    return PickCheckpoint(job_, r);
  }

  // Every chunk of the checkpoint of `step` from `from` on, as a stream
  // reads them; `after_first` runs after the first chunk is read.
  absl::Status Stream(int64_t step, std::vector<v1::CheckpointChunk>& out,
                      const std::function<void()>& after_first = nullptr,
                      const StreamFrom& from = {}) {
    absl::StatusOr<std::unique_ptr<CheckpointReader>> reader =
        CheckpointReader::Open(job_, step, from);
    if (!reader.ok()) return reader.status();
    v1::CheckpointChunk chunk;  // one message, refilled, as a stream does
    while (true) {
      absl::StatusOr<CheckpointReader::Got> got = (*reader)->Next(chunk);
      if (!got.ok()) return got.status();
      if (*got == CheckpointReader::Got::kDone) return absl::OkStatus();
      out.push_back(chunk);
      if (out.size() == 1 && after_first) after_first();
    }
  }

  TestDir dir_;
  v1::Job job_;
};

TEST_F(CheckpointAccessTest, ListsNewestFirstWithSizesAndTheBest) {
  AddCheckpoint(100, std::string(1000, 'a'), "{}");
  AddCheckpoint(300, std::string(3000, 'c'), "{}");
  AddCheckpoint(200, std::string(2000, 'b'), "{}");
  job_.mutable_result()->set_best_step(200);
  job_.mutable_result()->set_best_checkpoint_path("x");
  absl::StatusOr<std::vector<v1::CheckpointInfo>> all =
      ListJobCheckpoints(job_);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].step(), 300);
  EXPECT_EQ((*all)[0].bytes(), 3002);
  EXPECT_GT((*all)[0].save_time().seconds(), 0);
  EXPECT_FALSE((*all)[0].best());
  EXPECT_EQ((*all)[1].step(), 200);
  EXPECT_TRUE((*all)[1].best());
  EXPECT_EQ((*all)[2].step(), 100);
}

TEST_F(CheckpointAccessTest, OnlyWholeCheckpointDirectoriesCount) {
  AddCheckpoint(10, "t");
  // Not checkpoints: a half-written one, a leftover temp dir, other names,
  // a symlink to another job's checkpoint.
  fs::create_directories(job_.checkpoint_dir() + "/step-00000020");
  WriteFile(job_.checkpoint_dir() + "/step-00000020/meta.json", "{}");
  fs::create_directories(job_.checkpoint_dir() + "/.tmp-step-00000030");
  fs::create_directories(job_.checkpoint_dir() + "/step-x");
  const std::string elsewhere = dir_.File("other");
  fs::create_directories(elsewhere);
  WriteFile(elsewhere + "/meta.json", "{}");
  WriteFile(elsewhere + "/model.safetensors", "secret");
  fs::create_directory_symlink(elsewhere,
                               job_.checkpoint_dir() + "/step-00000040");
  EXPECT_THAT(Steps(), ElementsAre(10));
}

TEST_F(CheckpointAccessTest, AJobWithoutCheckpointsListsNone) {
  EXPECT_TRUE(Steps().empty()) << "the directory does not exist yet";
  job_.clear_checkpoint_dir();
  EXPECT_TRUE(Steps().empty()) << "the job never ran";
  absl::StatusOr<int64_t> none = Pick(0);
  EXPECT_TRUE(absl::IsNotFound(none.status())) << none.status();
  EXPECT_EQ(none.status().message(), "job j-000007 has no checkpoint yet");
}

TEST_F(CheckpointAccessTest, APlantedSymlinkForTheJobDirectoryIsNotFollowed) {
  const std::string elsewhere = dir_.File("elsewhere");
  fs::create_directories(elsewhere + "/step-00000005");
  WriteFile(elsewhere + "/step-00000005/meta.json", "{}");
  WriteFile(elsewhere + "/step-00000005/model.safetensors", "x");
  fs::create_directories(dir_.File("ckpt"));
  fs::create_directory_symlink(elsewhere, job_.checkpoint_dir());
  EXPECT_FALSE(ListJobCheckpoints(job_).ok());
  std::vector<v1::CheckpointChunk> chunks;
  EXPECT_FALSE(Stream(5, chunks).ok());
  EXPECT_TRUE(chunks.empty());
}

TEST_F(CheckpointAccessTest, PicksTheNewestAStepOrTheBest) {
  AddCheckpoint(100, "a");
  AddCheckpoint(200, "b");
  EXPECT_EQ(*Pick(0), 200);
  EXPECT_EQ(*Pick(100), 100);
  absl::StatusOr<int64_t> missing = Pick(150);
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_EQ(missing.status().message(),
            "job j-000007 has no checkpoint of step 150 (it has steps 200, "
            "100)");
  absl::StatusOr<int64_t> best = Pick(0, true);
  EXPECT_TRUE(absl::IsFailedPrecondition(best.status())) << best.status();
  EXPECT_THAT(best.status().message(), HasSubstr("checkpoint.keep_best"));
  job_.mutable_result()->set_best_step(100);
  job_.mutable_result()->set_best_checkpoint_path("x");
  EXPECT_EQ(*Pick(0, true), 100);
  EXPECT_TRUE(absl::IsInvalidArgument(Pick(100, true).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Pick(-1).status()));
}

// A keep_best job cancelled (or stopped by its time limit, or failed) names
// no best in a result, but its newest checkpoint records the best
// evaluation's step: that one is the best, once the job has ended.
TEST_F(CheckpointAccessTest, AnEndedKeepBestJobsBestIsWhatItsNewestRecords) {
  job_.mutable_spec()->mutable_checkpoint()->set_keep_best(true);
  AddCheckpoint(300, "a");
  AddCheckpoint(900, "b");
  // The newest as the engine writes it, its early stopping's state inside.
  engine::Checkpoint newest;
  newest.meta.step = 1000;
  newest.meta.early_stopping = engine::EarlyStoppingState{
      .best_loss = 0.12, .best_step = 300, .evals_since_best = 7};
  ASSERT_TRUE(engine::WriteCheckpoint(job_.checkpoint_dir(), newest).ok());
  job_.set_state(v1::RUNNING);  // not ended: no best yet
  EXPECT_TRUE(absl::IsFailedPrecondition(Pick(0, true).status()));
  job_.set_state(v1::CANCELLED);
  EXPECT_EQ(*Pick(0, true), 300);
  absl::StatusOr<std::vector<v1::CheckpointInfo>> all =
      ListJobCheckpoints(job_);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_FALSE((*all)[0].best());
  EXPECT_TRUE((*all)[2].best());
  // Without keep_best nothing is the best, whatever meta.json says.
  job_.mutable_spec()->mutable_checkpoint()->set_keep_best(false);
  EXPECT_TRUE(absl::IsFailedPrecondition(Pick(0, true).status()));
  // A recorded best whose checkpoint is gone marks nothing.
  job_.mutable_spec()->mutable_checkpoint()->set_keep_best(true);
  std::filesystem::remove_all(job_.checkpoint_dir() + "/step-00000300");
  EXPECT_TRUE(absl::IsFailedPrecondition(Pick(0, true).status()));
}

TEST_F(CheckpointAccessTest, StreamsMetaFirstThenTheTensorsInChunks) {
  std::string tensors(2 * kCheckpointChunkBytes + 5, '\0');
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i] = char(i * 7);
  AddCheckpoint(300, tensors, "{\"meta\": true}");
  std::vector<v1::CheckpointChunk> chunks;
  ASSERT_TRUE(Stream(300, chunks).ok());
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(chunks[0].file(), "meta.json");
  EXPECT_EQ(chunks[0].data(), "{\"meta\": true}");
  std::string got;
  for (size_t i = 1; i < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i].step(), 300);
    EXPECT_EQ(chunks[i].file(), "model.safetensors");
    EXPECT_EQ(chunks[i].file_size(), static_cast<int64_t>(tensors.size()));
    EXPECT_EQ(chunks[i].offset(), static_cast<int64_t>(got.size()));
    got += chunks[i].data();
  }
  EXPECT_TRUE(got == tensors);
}

TEST_F(CheckpointAccessTest, AnEmptyFileIsOneChunkWithoutData) {
  AddCheckpoint(1, "", "{}");
  std::vector<v1::CheckpointChunk> chunks;
  ASSERT_TRUE(Stream(1, chunks).ok());
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[1].file(), "model.safetensors");
  EXPECT_EQ(chunks[1].file_size(), 0);
  EXPECT_TRUE(chunks[1].data().empty());
}

TEST_F(CheckpointAccessTest, ACheckpointPrunedWhileStreamingIsSentWhole) {
  const std::string tensors(3 * kCheckpointChunkBytes, 'w');
  const std::string d = AddCheckpoint(50, tensors);
  std::vector<v1::CheckpointChunk> chunks;
  ASSERT_TRUE(Stream(50, chunks, [&] { fs::remove_all(d); }).ok());
  int64_t bytes = 0;
  for (const auto& c : chunks) {
    if (c.file() == "model.safetensors") bytes += c.data().size();
  }
  EXPECT_EQ(bytes, static_cast<int64_t>(tensors.size()));
  // Gone before it was opened: ABORTED, to be asked again.
  chunks.clear();
  absl::Status gone = Stream(50, chunks);
  EXPECT_TRUE(absl::IsAborted(gone)) << gone;
  EXPECT_THAT(gone.message(), HasSubstr("ask for it again"));
}

TEST_F(CheckpointAccessTest, ASymlinkedFileIsRefusedNotFollowed) {
  const std::string d = AddCheckpoint(9, "t");
  const std::string secret = dir_.File("secret");
  WriteFile(secret, "private key");
  fs::remove(d + "/model.safetensors");
  fs::create_symlink(secret, d + "/model.safetensors");
  std::vector<v1::CheckpointChunk> chunks;
  absl::Status s = Stream(9, chunks);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("symbolic link"));
  EXPECT_TRUE(chunks.empty()) << "nothing is sent before every file is open";
  EXPECT_TRUE(Steps().empty()) << "nor is it listed";
}

TEST_F(CheckpointAccessTest, AResumedStreamStartsWhereTheClientStopped) {
  const std::string tensors(kCheckpointChunkBytes + 10, 't');
  AddCheckpoint(4, tensors, "{\"step\": 4}");
  auto stream_from = [&](StreamFrom from) {
    std::vector<v1::CheckpointChunk> out;
    absl::Status s = Stream(4, out, nullptr, from);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  };
  // Within meta.json: its rest, then the tensors whole.
  std::vector<v1::CheckpointChunk> out = stream_from({"meta.json", 3});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].file(), "meta.json");
  EXPECT_EQ(out[0].offset(), 3);
  EXPECT_EQ(out[0].data(), "tep\": 4}");
  EXPECT_EQ(out[1].file(), "model.safetensors");
  EXPECT_EQ(out[1].offset(), 0);
  // meta.json had arrived whole: only the tensors.
  out = stream_from({"meta.json", 11});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].file(), "model.safetensors");
  // Within the tensors: from that byte.
  out = stream_from({"model.safetensors", kCheckpointChunkBytes + 4});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].offset(), kCheckpointChunkBytes + 4);
  EXPECT_EQ(out[0].data(), "tttttt");
  EXPECT_EQ(out[0].file_size(), kCheckpointChunkBytes + 10);
  EXPECT_TRUE(
      stream_from({"model.safetensors", kCheckpointChunkBytes + 10}).empty());

  auto refused = [&](StreamFrom from) {
    return CheckpointReader::Open(job_, 4, from).status();
  };
  absl::Status s = refused({"../etc/passwd", 0});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "resume_file: \"../etc/passwd\" is not a file of a checkpoint");
  s = refused({"meta.json", 12});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "resume_offset: 12 is past the end of step-00000004/meta.json "
            "(11 bytes)");
  EXPECT_EQ(refused({"meta.json", -1}).message(),
            "resume_offset: -1 is negative");
  EXPECT_EQ(refused({"", 5}).message(), "resume_offset: 5 without resume_file");
}

// A read that must not wait on the disk (kCachedOnly, on a gRPC thread)
// takes what the page cache holds and says kWouldWait for the rest; the
// next read, which may wait, finishes that same chunk. Dropped from the
// cache here with POSIX_FADV_DONTNEED after an fsync.
TEST_F(CheckpointAccessTest, AReadThatMustNotWaitLeavesTheRestToTheNext) {
  std::string tensors(kCheckpointChunkBytes + 3, '\0');
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i] = char(i * 11);
  const std::string d = AddCheckpoint(8, tensors, "{}");
  const int fd = open((d + "/model.safetensors").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fsync(fd), 0);
  ASSERT_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  close(fd);
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader =
      CheckpointReader::Open(job_, 8);
  ASSERT_TRUE(reader.ok()) << reader.status();
  using Got = CheckpointReader::Got;
  using Read = CheckpointReader::Read;
  v1::CheckpointChunk chunk;
  ASSERT_EQ(*(*reader)->Next(chunk, Read::kMayWait), Got::kChunk);
  EXPECT_EQ(chunk.file(), "meta.json");
  absl::StatusOr<Got> got = (*reader)->Next(chunk, Read::kCachedOnly);
  ASSERT_TRUE(got.ok()) << got.status();
  if (*got == Got::kChunk) {
    GTEST_SKIP() << "this file system kept the file in memory (or reads "
                    "with RWF_NOWAIT as with no flag)";
  }
  EXPECT_EQ(*got, Got::kWouldWait);
  ASSERT_EQ(*(*reader)->Next(chunk, Read::kMayWait), Got::kChunk);
  EXPECT_EQ(chunk.file(), "model.safetensors");
  EXPECT_EQ(chunk.offset(), 0);
  EXPECT_TRUE(chunk.data() == tensors.substr(0, kCheckpointChunkBytes));
  got = (*reader)->Next(chunk, Read::kCachedOnly);
  if (got.ok() && *got == Got::kWouldWait) {
    got = (*reader)->Next(chunk, Read::kMayWait);
  }
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(*got, Got::kChunk);
  EXPECT_EQ(chunk.offset(), kCheckpointChunkBytes);
  EXPECT_EQ(chunk.data(), tensors.substr(kCheckpointChunkBytes));
  EXPECT_EQ(*(*reader)->Next(chunk, Read::kCachedOnly), Got::kDone);
}

// A file cut short after it was opened (a hostile or broken job rewrote
// it in place): the read that finds it short is an error naming the file,
// not a short or padded chunk.
TEST_F(CheckpointAccessTest, AFileCutShortWhileReadIsAnError) {
  const std::string d = AddCheckpoint(6, std::string(100, 'z'), "{}");
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader =
      CheckpointReader::Open(job_, 6);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ(truncate((d + "/model.safetensors").c_str(), 40), 0);
  v1::CheckpointChunk chunk;
  absl::StatusOr<CheckpointReader::Got> meta = (*reader)->Next(chunk);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(*meta, CheckpointReader::Got::kChunk);
  EXPECT_EQ(chunk.file(), "meta.json");
  absl::StatusOr<CheckpointReader::Got> cut = (*reader)->Next(chunk);
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(cut.status().message(),
            "job j-000007: reading step-00000006/model.safetensors: the file "
            "got shorter");
}

}  // namespace
}  // namespace trainyard::server
