#include "engine/core/safetensors.h"

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/core/file_io.h"
#include "gtest/gtest.h"

namespace trainyard::engine {
namespace {

std::string TempPath(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "safetensors_test";
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

std::vector<HostTensor> Sample() {
  return {{"w", {2, 3}, {1, 2, 3, 4, 5, 6}},
          {"b", {3}, {-1, 0.5f, 1e-30f}},
          {"empty", {0, 4}, {}}};
}

std::string WriteSample() {
  const std::string path = TempPath("sample.safetensors");
  EXPECT_TRUE(WriteSafetensors(path, Sample()).ok());
  return *ReadWholeFile(path, 1 << 20);
}

std::string Header(const std::string& json) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((json.size() >> (8 * i)) & 0xFF);
  return out + json;
}

TEST(SafetensorsTest, RoundTrips) {
  const std::string bytes = WriteSample();
  // The header is padded so tensor data starts 8-byte aligned.
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  absl::StatusOr<std::vector<HostTensor>> back = ParseSafetensors(bytes, "f");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 3u);
  for (const HostTensor& want : Sample()) {
    bool found = false;
    for (const HostTensor& got : *back) {
      if (got.name != want.name) continue;
      found = true;
      EXPECT_EQ(got.shape, want.shape);
      EXPECT_EQ(got.data, want.data);
    }
    EXPECT_TRUE(found) << want.name;
  }
}

TEST(SafetensorsTest, RejectsTruncation) {
  const std::string bytes = WriteSample();
  for (size_t keep : {size_t{0}, size_t{7}, size_t{20}, bytes.size() - 1}) {
    absl::StatusOr<std::vector<HostTensor>> r =
        ParseSafetensors(bytes.substr(0, keep), "model.safetensors");
    ASSERT_FALSE(r.ok()) << keep;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_TRUE(absl::StartsWith(r.status().message(), "model.safetensors: "))
        << r.status();
  }
  EXPECT_TRUE(
      absl::StrContains(ParseSafetensors(bytes.substr(0, bytes.size() - 1), "f")
                            .status()
                            .message(),
                        "truncated"));
}

TEST(SafetensorsTest, RejectsMalformedHeaders) {
  const std::string data(24, '\0');
  const char* bad[] = {
      "not json",
      "[1]",
      R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})",
      R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})",
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}})",
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      R"({"a":{"dtype":"F32","shape":[2]}})",
      R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},
          "b":{"dtype":"F32","shape":[3],"data_offsets":[8,20]}})",
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",  // 24 bytes
  };
  for (const char* h : bad) {
    absl::StatusOr<std::vector<HostTensor>> r =
        ParseSafetensors(Header(h) + data, "f");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << h;
  }
  // A header length pointing past the end of the file.
  std::string huge = Header("{}");
  huge[0] = '\xff';
  EXPECT_FALSE(ParseSafetensors(huge, "f").ok());
}

TEST(SafetensorsTest, RejectsHostileNumbers) {
  const std::string data(8, '\0');
  const char* bad[] = {
      // end - begin would overflow int64.
      R"({"a":{"dtype":"F32","shape":[2],
              "data_offsets":[8,-9223372036854775808]}})",
      R"({"a":{"dtype":"F32","shape":[2],
              "data_offsets":[-9223372036854775808,8]}})",
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,99999999999999999999]}})",
      // Dimensions whose product overflows.
      R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],
              "data_offsets":[0,8]}})",
      R"({"a":{"dtype":"F32","shape":[9223372036854775807],
              "data_offsets":[0,8]}})",
      R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,2],"data_offsets":[0,8]}})",
      R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})",
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
          "a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}})",
      R"({"a":[]})",
  };
  for (const char* h : bad) {
    absl::StatusOr<std::vector<HostTensor>> r =
        ParseSafetensors(Header(h) + data, "f");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << h;
  }
  // Header lengths near 2^64 and past the format's cap.
  for (uint64_t len : {~uint64_t{0}, uint64_t{1} << 63, uint64_t{17} << 20}) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(len >> (8 * i));
    EXPECT_EQ(ParseSafetensors(bytes + "{}", "f").status().code(),
              absl::StatusCode::kDataLoss);
  }
}

TEST(SafetensorsTest, WriterRejectsBadTensors) {
  EXPECT_FALSE(WriteSafetensors(TempPath("x"), {{"a", {2}, {1}}}).ok());
  EXPECT_FALSE(
      WriteSafetensors(TempPath("x"), {{"a", {1}, {1}}, {"a", {1}, {2}}}).ok());
  EXPECT_FALSE(WriteSafetensors(TempPath("x"), {{"", {1}, {1}}}).ok());
}

}  // namespace
}  // namespace trainyard::engine
