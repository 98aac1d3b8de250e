// TestDir: a fresh temporary directory for one test, removed afterwards.
// Test-only; not thread-safe (one per test).
#ifndef TRAINYARD_SERVER_TEST_DIR_H_
#define TRAINYARD_SERVER_TEST_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace trainyard::server {

class TestDir {
 public:
  TestDir() {
    std::string templ = ::testing::TempDir() + "/yard-server-test-XXXXXX";
    char* made = ::mkdtemp(templ.data());
    EXPECT_NE(made, nullptr) << "mkdtemp " << templ;
    path_ = templ;
  }
  ~TestDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const {
    return absl::StrCat(path_, "/", name);
  }

 private:
  std::string path_;
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_TEST_DIR_H_
