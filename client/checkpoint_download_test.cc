// CheckpointDownload against the chunks of a real checkpoint (written by the
// engine), sent whole, out of order, cut short, corrupted or with names
// that would escape the directory.
#include "client/checkpoint_download.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/test_dir.h"
#include "engine/core/checkpoint.h"
#include "engine/core/rng.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::client {
namespace {

namespace fs = std::filesystem;
namespace v1 = ::trainyard::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class CheckpointDownloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine::Checkpoint c;
    c.meta.step = 40;
    c.meta.rng_state = engine::Rng(1).SerializeState();
    c.meta.fingerprint = "00112233aabbccdd";
    std::vector<float> big(300'000);
    for (size_t i = 0; i < big.size(); ++i) big[i] = 0.001f * i;
    c.tensors = {{"fc0.weight", {300, 1000}, big}};
    absl::StatusOr<std::string> written =
        engine::WriteCheckpoint(root_ + "/server", c);
    ASSERT_TRUE(written.ok()) << written.status();
    meta_ = ReadAll(*written + "/meta.json");
    tensors_ = ReadAll(*written + "/model.safetensors");
  }

  // The stream the server sends: meta.json, then the tensors in chunks of
  // `chunk` bytes.
  std::vector<v1::CheckpointChunk> Chunks(size_t chunk = 100'000) const {
    std::vector<v1::CheckpointChunk> out;
    auto add = [&](const std::string& file, const std::string& bytes) {
      size_t off = 0;
      do {
        v1::CheckpointChunk c;
        c.set_step(40);
        c.set_file(file);
        c.set_file_size(bytes.size());
        c.set_offset(off);
        c.set_data(bytes.substr(off, chunk));
        off += c.data().size();
        out.push_back(std::move(c));
      } while (off < bytes.size());
    };
    add("meta.json", meta_);
    add("model.safetensors", tensors_);
    return out;
  }

  // Feeds every chunk; the first failure of Add, else Finish's.
  absl::StatusOr<DownloadedCheckpoint> Run(
      CheckpointDownload& d, const std::vector<v1::CheckpointChunk>& chunks) {
    for (const v1::CheckpointChunk& c : chunks) {
      absl::Status s = d.Add(c);
      if (!s.ok()) return s;
    }
    return d.Finish();
  }

  TestDir tmp_;
  const std::string root_ = tmp_.path();
  std::string meta_;
  std::string tensors_;
};

TEST_F(CheckpointDownloadTest, WritesACheckpointTheEngineReads) {
  const std::string dir = root_ + "/copy";
  CheckpointDownload d("j-1", dir);
  absl::StatusOr<DownloadedCheckpoint> done = Run(d, Chunks());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->dir, dir);
  EXPECT_EQ(done->step, 40);
  EXPECT_THAT(done->files, ElementsAre("meta.json", "model.safetensors"));
  EXPECT_EQ(done->bytes, static_cast<int64_t>(meta_.size() + tensors_.size()));
  EXPECT_TRUE(ReadAll(dir + "/model.safetensors") == tensors_);
  absl::StatusOr<engine::Checkpoint> back = engine::ReadCheckpoint(dir);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->meta.step, 40);
}

TEST_F(CheckpointDownloadTest, TheDefaultDirectoryIsNamedAfterTheJobAndStep) {
  const fs::path before = fs::current_path();
  fs::current_path(root_);
  {
    CheckpointDownload d("j-000009", "");
    absl::StatusOr<DownloadedCheckpoint> done = Run(d, Chunks());
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(done->dir, "j-000009-step-40");
  }
  EXPECT_TRUE(fs::exists(root_ + "/j-000009-step-40/meta.json"));
  fs::current_path(before);
}

TEST_F(CheckpointDownloadTest, AnExistingDirectoryIsNeitherUsedNorTouched) {
  const std::string dir = root_ + "/mine";
  fs::create_directories(dir);
  std::ofstream(dir + "/notes.txt") << "keep me";
  CheckpointDownload d("j-1", dir);
  absl::StatusOr<DownloadedCheckpoint> done = Run(d, Chunks());
  EXPECT_TRUE(absl::IsFailedPrecondition(done.status())) << done.status();
  EXPECT_THAT(done.status().message(), HasSubstr("already exists"));
  EXPECT_EQ(ReadAll(dir + "/notes.txt"), "keep me");
}

TEST_F(CheckpointDownloadTest, CorruptTensorsFailTheCheckAndLeaveNothing) {
  const std::string dir = root_ + "/bad";
  std::vector<v1::CheckpointChunk> chunks = Chunks();
  std::string* data = chunks[3].mutable_data();
  (*data)[10] = static_cast<char>((*data)[10] ^ 1);
  {
    CheckpointDownload d("j-1", dir);
    absl::StatusOr<DownloadedCheckpoint> done = Run(d, chunks);
    EXPECT_TRUE(absl::IsDataLoss(done.status())) << done.status();
    EXPECT_THAT(done.status().message(), HasSubstr("CRC-32"));
  }
  EXPECT_FALSE(fs::exists(dir)) << "a failed download leaves nothing";
}

TEST_F(CheckpointDownloadTest, ChunksMustComeInOrderAndWhole) {
  {
    std::vector<v1::CheckpointChunk> skipped = Chunks();
    skipped.erase(skipped.begin() + 2);
    CheckpointDownload d1("j-1", root_ + "/a");
    EXPECT_THAT(Run(d1, skipped).status().message(),
                HasSubstr("does not follow"));

    std::vector<v1::CheckpointChunk> cut = Chunks();
    cut.pop_back();
    CheckpointDownload d2("j-1", root_ + "/b");
    absl::Status s = Run(d2, cut).status();
    EXPECT_TRUE(absl::IsDataLoss(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("model.safetensors: the server sent"));

    std::vector<v1::CheckpointChunk> meta_only = Chunks();
    meta_only.resize(1);
    CheckpointDownload d3("j-1", root_ + "/c");
    EXPECT_THAT(Run(d3, meta_only).status().message(),
                HasSubstr("did not send both"));

    std::vector<v1::CheckpointChunk> other_step = Chunks();
    other_step[2].set_step(41);
    CheckpointDownload d4("j-1", root_ + "/d");
    EXPECT_THAT(Run(d4, other_step).status().message(),
                HasSubstr("switched from step 40 to 41"));

    CheckpointDownload d5("j-1", root_ + "/e");
    EXPECT_THAT(d5.Finish().status().message(),
                HasSubstr("no checkpoint file"));
  }  // the failed downloads remove what they wrote
  for (const char* dir : {"a", "b", "c", "d", "e"}) {
    EXPECT_FALSE(fs::exists(root_ + "/" + dir)) << dir;
  }
}

TEST_F(CheckpointDownloadTest, FileNamesCannotLeaveTheDirectory) {
  for (const char* name : {"../escape", "/etc/passwd", "..", "", "a/b"}) {
    std::vector<v1::CheckpointChunk> chunks = Chunks();
    chunks[0].set_file(name);
    CheckpointDownload d("j-1", root_ + "/n");
    absl::Status s = Run(d, chunks).status();
    EXPECT_TRUE(absl::IsDataLoss(s)) << name << ": " << s;
  }
  EXPECT_FALSE(fs::exists(root_ + "/escape"));
}

TEST_F(CheckpointDownloadTest, SizesBeyondTheLimitsAreRefused) {
  std::vector<v1::CheckpointChunk> chunks = Chunks();
  chunks[0].set_file_size(int64_t{1} << 40);  // a 1 TiB meta.json
  CheckpointDownload d("j-1", root_ + "/big");
  EXPECT_THAT(Run(d, chunks).status().message(), HasSubstr("a size of"));
}

}  // namespace
}  // namespace trainyard::client
