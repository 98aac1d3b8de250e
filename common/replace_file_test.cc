// replace_file.h: ReplaceFileDurably.
#include "common/replace_file.h"

#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "common/read_file.h"
#include "common/test_dir.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;

class ReplaceFileTest : public ::testing::Test {
 protected:
  TestDir tmp_;
  const std::string dir_ = tmp_.path();
};

// A new file, then the same path replaced whole: the new contents, no
// temporary file left beside it.
TEST_F(ReplaceFileTest, ReplaceFileDurablyWritesThenReplacesWhole) {
  const std::string path = dir_ + "/choices";
  ASSERT_TRUE(ReplaceFileDurably(path, "first, and longer\n").ok());
  EXPECT_EQ(ReadWholeFile(path, 1024).value_or(""), "first, and longer\n");
  ASSERT_TRUE(ReplaceFileDurably(path, "second\n").ok());
  EXPECT_EQ(ReadWholeFile(path, 1024).value_or(""), "second\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

// Where it cannot write, the error names the path and the file is left as
// it was.
TEST_F(ReplaceFileTest, ReplaceFileDurablyFailsNamingThePath) {
  const std::string missing = dir_ + "/no-such-dir/choices";
  const absl::Status s = ReplaceFileDurably(missing, "x");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), missing)) << s;
  // A directory where the file should go: the rename over it fails.
  const std::string taken = dir_ + "/taken";
  fs::create_directories(taken + "/inside");
  const absl::Status over = ReplaceFileDurably(taken, "x");
  EXPECT_FALSE(over.ok());
  EXPECT_TRUE(absl::StrContains(over.message(), "cannot rename")) << over;
  EXPECT_TRUE(fs::is_directory(taken + "/inside"));
  EXPECT_FALSE(fs::exists(taken + ".tmp"));
}

// The file takes the mode asked for (tokens: 0600), even where a leftover
// temporary file had another.
TEST_F(ReplaceFileTest, ReplaceFileDurablyCreatesWithTheMode) {
  const std::string path = dir_ + "/token";
  ASSERT_TRUE(ReplaceFileDurably(path + ".tmp", "left over\n", 0666).ok());
  ASSERT_TRUE(ReplaceFileDurably(path, "secret\n", 0600).ok());
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  EXPECT_EQ(ReadWholeFile(path, 1024).value_or(""), "secret\n");
}

}  // namespace
}  // namespace trainyard
