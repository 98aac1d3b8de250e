#include "engine/data/idx.h"

#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

std::string TempPath(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "idx_test";
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

// An IDX unsigned-byte file with the given dims and data i % 251.
std::string Idx(std::vector<uint32_t> dims, int64_t extra = 0) {
  std::string s = {0, 0, 0x08, static_cast<char>(dims.size())};
  int64_t n = 1;
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8)
      s.push_back(static_cast<char>(d >> shift));
    n *= d;
  }
  for (int64_t i = 0; i < n + extra; ++i)
    s.push_back(static_cast<char>(i % 251));
  return s;
}

std::string WriteRaw(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string WriteGz(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
  return path;
}

TEST(IdxTest, ParsesRawAndGzipFiles) {
  const std::string bytes = Idx({3, 4, 5});
  for (const std::string& path :
       {WriteRaw("good.idx", bytes), WriteGz("good.idx.gz", bytes)}) {
    absl::StatusOr<IdxArray> a = ReadIdxFile(path);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->dims, (std::vector<int64_t>{3, 4, 5}));
    ASSERT_EQ(a->data.size(), 60u);
    EXPECT_EQ(a->data[59], 59);
  }
}

TEST(IdxTest, RejectsTruncatedAndOverlongData) {
  const std::string bytes = Idx({10, 2});
  absl::StatusOr<IdxArray> r =
      ParseIdx(bytes.substr(0, bytes.size() - 1), "f.idx");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "f.idx: ")) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "truncated"))
      << r.status();
  r = ParseIdx(Idx({10, 2}, /*extra=*/3), "f.idx");
  EXPECT_TRUE(absl::StrContains(r.status().message(), "trailing bytes"))
      << r.status();
  EXPECT_FALSE(ParseIdx(bytes.substr(0, 6), "f").ok());  // inside the header
  EXPECT_FALSE(ParseIdx("", "f").ok());
}

TEST(IdxTest, RejectsBadMagicTypesAndDims) {
  std::string bad_magic = Idx({2});
  bad_magic[0] = 0x1f;
  absl::StatusOr<IdxArray> r = ParseIdx(bad_magic, "f");
  EXPECT_TRUE(absl::StrContains(r.status().message(), "bad magic"))
      << r.status();
  std::string floats = Idx({2});
  floats[2] = 0x0D;
  r = ParseIdx(floats, "f");
  EXPECT_TRUE(absl::StrContains(r.status().message(), "0x0d")) << r.status();
  std::string no_dims = Idx({2});
  no_dims[3] = 0;
  EXPECT_FALSE(ParseIdx(no_dims, "f").ok());
  std::string huge = {0, 0, 8, 4};
  for (int i = 0; i < 16; ++i) huge.push_back('\xff');
  r = ParseIdx(huge, "f");
  EXPECT_TRUE(absl::StrContains(r.status().message(), "absurdly large"))
      << r.status();
}

TEST(IdxTest, RejectsTruncatedGzipAndMissingFiles) {
  const std::string gz = WriteGz("full.gz", Idx({100, 100}));
  std::string bytes;
  {
    std::ifstream in(gz, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string cut = WriteRaw("cut.gz", bytes.substr(0, bytes.size() / 2));
  absl::StatusOr<IdxArray> r = ReadIdxFile(cut);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(r.status().message(), cut)) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "truncated gzip"))
      << r.status();

  EXPECT_EQ(ReadIdxFile(TempPath("nope.gz")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(
      ReadIdxFile(gz, /*max_bytes=*/1000).status().message(), "more than"));
}

std::string Gzip(const std::string& bytes) {
  const std::string path = WriteGz("tmp.gz", bytes);
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(IdxTest, DecodesFromMemoryIncludingSeveralGzipMembers) {
  const std::string bytes = Idx({4, 5});
  const std::string gz = Gzip(bytes);
  absl::StatusOr<IdxArray> a = DecodeIdx(gz, "m");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->data.size(), 20u);
  // `cat a.gz b.gz`: one stream of both members' bytes.
  const std::string head = bytes.substr(0, 9), tail = bytes.substr(9);
  a = DecodeIdx(Gzip(head) + Gzip(tail), "m");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->data.size(), 20u);
  absl::StatusOr<IdxArray> r = DecodeIdx(gz + "junk", "m");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "4 bytes after the end"))
      << r.status();
  std::string corrupt = gz;
  corrupt[12] ^= 0x55;
  EXPECT_FALSE(DecodeIdx(corrupt, "m").ok());
  EXPECT_FALSE(DecodeIdx("\x1f\x8b", "m").ok());
  EXPECT_FALSE(DecodeIdx("\x1f", "m").ok());
}

TEST(IdxTest, ADecompressionBombStopsAtTheLimit) {
  // 64 MiB of zeros compress to about 64 KiB; the limit stops inflating at
  // 1 MiB instead of holding it all.
  const std::string bomb = Gzip(std::string(64 << 20, '\0'));
  ASSERT_LT(bomb.size(), 1u << 20);
  absl::StatusOr<IdxArray> r = DecodeIdx(bomb, "bomb.gz", 1 << 20);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(r.status().message(),
                                "bomb.gz: decompresses to more than 1048576"))
      << r.status();
  // A raw file over the limit is refused as well.
  EXPECT_FALSE(DecodeIdx(Idx({2000}), "raw", 1000).ok());
  EXPECT_FALSE(ReadIdxFile(WriteRaw("big.idx", Idx({2000})), 1000).ok());
}

}  // namespace
}  // namespace trainyard::engine
