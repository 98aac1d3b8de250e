#include "engine/data/token_data.h"

#include <filesystem>
#include <fstream>
#include <numeric>

#include "absl/strings/match.h"
#include "common/test_dir.h"
#include "engine/core/file_io.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

class TokenShardTest : public ::testing::Test {
 protected:
  std::string Path(const char* name) { return tmp_.File(name); }
  // A valid shard of `tokens`, then `edit` applied to its bytes.
  std::string Shard(const char* name, std::vector<int32_t> tokens,
                    const std::function<void(std::string&)>& edit = {}) {
    const std::string p = Path(name);
    EXPECT_TRUE(WriteTokenShard(p, tokens).ok());
    if (edit) {
      std::string bytes = *ReadWholeFile(p, 1 << 20);
      edit(bytes);
      std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
    }
    return p;
  }
  std::string ErrorOf(const std::string& path) {
    std::vector<int32_t> out;
    absl::Status s = ReadTokenShard(path, &out);
    EXPECT_FALSE(s.ok());
    return std::string(s.message());
  }
  TestDir tmp_;
};

TEST_F(TokenShardTest, ReadsWhatWasWrittenAndAppends) {
  const std::string p = Shard("good.bin", {0, 1, 65535, 50256, 7});
  std::vector<int32_t> out = {42};
  ASSERT_TRUE(ReadTokenShard(p, &out).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{42, 0, 1, 65535, 50256, 7}));
  EXPECT_EQ(std::filesystem::file_size(p), 1024u + 10u);
  const std::string empty = Shard("empty.bin", {});
  out.clear();
  EXPECT_TRUE(ReadTokenShard(empty, &out).ok());
  EXPECT_TRUE(out.empty());
}

TEST_F(TokenShardTest, RejectsBadHeadersAndTruncation) {
  const std::vector<int32_t> t = {1, 2, 3, 4};
  std::string p = Shard("magic.bin", t, [](std::string& b) { b[0] = 1; });
  EXPECT_TRUE(absl::StrContains(ErrorOf(p), "bad magic")) << ErrorOf(p);
  EXPECT_TRUE(absl::StartsWith(ErrorOf(p), p));
  p = Shard("version.bin", t, [](std::string& b) { b[4] = 2; });
  EXPECT_EQ(ErrorOf(p), p + ": version 2 is not supported (only 1: uint16 "
                            "tokens)");
  p = Shard("short.bin", t, [](std::string& b) { b.resize(1030); });
  EXPECT_EQ(ErrorOf(p), p + ": truncated: the header promises 4 tokens (8 "
                            "bytes), the file holds 6 bytes after the header");
  p = Shard("header.bin", t, [](std::string& b) { b.resize(100); });
  EXPECT_TRUE(absl::StrContains(ErrorOf(p), "truncated header")) << ErrorOf(p);
  p = Shard("long.bin", t, [](std::string& b) { b += "xx"; });
  EXPECT_TRUE(absl::StrContains(ErrorOf(p), "2 bytes after the 4 tokens"));
  p = Shard("negative.bin", t, [](std::string& b) { b[11] = '\x80'; });
  EXPECT_TRUE(absl::StrContains(ErrorOf(p), "negative token count"));
  std::vector<int32_t> out;
  EXPECT_EQ(ReadTokenShard(Path("missing.bin"), &out).code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(
      WriteTokenShard(Path("big.bin"), std::vector<int32_t>{70000}).ok());
}

TEST_F(TokenShardTest, ParsesFromMemoryAndChecksTheCountBeforeAllocating) {
  const std::string bytes = *ReadWholeFile(Shard("m.bin", {1, 2, 3}), 1 << 20);
  std::vector<int32_t> out = {7};
  ASSERT_TRUE(ParseTokenShard(bytes, "m", &out).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{7, 1, 2, 3}));
  // A header promising 2^31 - 1 tokens over 6 bytes: refused, and nothing
  // appended or reserved for them.
  std::string lying = bytes;
  lying[8] = lying[9] = lying[10] = '\xff';
  lying[11] = 0x7f;
  out = {7};
  absl::Status s = ParseTokenShard(lying, "m", &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(s.message(), "promises 2147483647 tokens"))
      << s;
  EXPECT_EQ(out, (std::vector<int32_t>{7}));
  EXPECT_LT(out.capacity(), 1000u);
  EXPECT_FALSE(ParseTokenShard("", "m", &out).ok());
}

TEST(TokenWindowsTest, WindowsAreInputsAndShiftedTargets) {
  auto tokens = std::make_shared<std::vector<int32_t>>(10);
  std::iota(tokens->begin(), tokens->end(), 0);
  const TokenWindows train(tokens, 4, 1, 10);
  EXPECT_EQ(train.size(), 6);  // offsets 0..5 (the last window ends at 9)
  Batch b;
  const std::vector<int64_t> idx = {5, 0};
  train.Gather(idx, &b);
  EXPECT_EQ(b.size, 2);
  EXPECT_EQ(b.seq_len, 4);
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{5, 6, 7, 8, 0, 1, 2, 3}));
  EXPECT_EQ(b.targets, (std::vector<int32_t>{6, 7, 8, 9, 1, 2, 3, 4}));
  const TokenWindows eval(tokens, 4, 4, 10);
  EXPECT_EQ(eval.size(), 2);  // [0..4], [4..8]; 8, 9 are left over
  const std::vector<int64_t> last = {1};
  eval.Gather(last, &b);
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(TokenWindows(tokens, 10, 1, 10).size(), 0);  // too short
  EXPECT_EQ(FirstTokenOutside(*tokens, 10), -1);
  EXPECT_EQ(FirstTokenOutside(*tokens, 8), 8);
}

}  // namespace
}  // namespace trainyard::engine
