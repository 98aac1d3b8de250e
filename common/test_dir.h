// TestDir: a fresh, empty directory for one test, removed with all in it
// when the TestDir goes, unless the test has failed by then: a failed
// test's files are kept for a look and their place printed. Made under
// gtest's temporary directory (TEST_TMPDIR, else TMPDIR, else /tmp), named
// after the running test and unique (mkdtemp), and its path has its links
// resolved, so tests that compare paths (data roots, symlink checks) see
// the real one. Test-only, header-only; one per test, not thread-safe.
#ifndef TRAINYARD_COMMON_TEST_DIR_H_
#define TRAINYARD_COMMON_TEST_DIR_H_

#include <limits.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace trainyard {

class TestDir {
 public:
  TestDir() {
    const ::testing::TestInfo* test =
        ::testing::UnitTest::GetInstance()->current_test_info();
    // Parameterized tests' names hold '/'.
    const std::string name =
        test == nullptr
            ? "yard-test"
            : absl::StrReplaceAll(absl::StrCat("yard-", test->test_suite_name(),
                                               ".", test->name()),
                                  {{"/", "_"}});
    std::string templ =
        absl::StrCat(::testing::TempDir(), "/", name, "-XXXXXX");
    if (::mkdtemp(templ.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp " << templ << " failed";
      path_ = templ;
      return;
    }
    char real[PATH_MAX];
    path_ = ::realpath(templ.c_str(), real) != nullptr ? real : templ;
  }
  ~TestDir() {
    if (::testing::Test::HasFailure()) {
      std::cerr << "TestDir: the failed test's files are kept in " << path_
                << "\n";
      return;
    }
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TestDir(const TestDir&) = delete;
  TestDir& operator=(const TestDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/name; made by no one.
  std::string File(absl::string_view name) const {
    return absl::StrCat(path_, "/", name);
  }
  // Writes text to path()/name, making the folders on the way, and returns
  // that path.
  std::string Write(absl::string_view name, absl::string_view text) const {
    const std::string file = File(name);
    std::error_code ec;
    std::filesystem::create_directories(
        std::filesystem::path(file).parent_path(), ec);
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    EXPECT_TRUE(out.good()) << "writing " << file;
    return file;
  }

 private:
  std::string path_;
};

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_TEST_DIR_H_
