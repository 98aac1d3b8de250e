// Path escapes through symlinks: a link at the end of the path, in its
// middle, dangling, chained or looping, for files that must exist and for
// outputs that may not exist yet, and inside Hugging Face model folders.
// Every case builds its links in a fresh temporary directory:
//   base/secret.gz          outside the root
//   base/root/              the data root
//   base/root/mnist/images.gz
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/test_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/spec.h"

namespace trainyard::spec {
namespace {

using ::testing::HasSubstr;

class DataPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeDir(root_);
    MakeDir(root_ + "/mnist");
    Touch(root_ + "/mnist/images.gz");
    Touch(base_ + "/secret.gz");
    MakeDir(base_ + "/outside");
    Touch(base_ + "/outside/x.gz");
  }
  static void MakeDir(const std::string& path) {
    ASSERT_EQ(::mkdir(path.c_str(), 0755), 0) << path;
  }
  static void Touch(const std::string& path) { std::ofstream(path) << "x"; }
  static void Link(const std::string& target, const std::string& link) {
    ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0) << link;
  }

  // The error message for `relative`, which must be refused.
  std::string Refused(const std::string& relative, bool must_exist) {
    absl::StatusOr<std::string> r =
        ResolveDataPath("f", root_, relative, must_exist);
    EXPECT_FALSE(r.ok()) << relative << " resolved to " << *r;
    if (r.ok()) return "";
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  }
  std::string Resolved(const std::string& relative, bool must_exist) {
    absl::StatusOr<std::string> r =
        ResolveDataPath("f", root_, relative, must_exist);
    EXPECT_TRUE(r.ok()) << relative << ": " << r.status();
    return r.ok() ? *r : "";
  }

  TestDir tmp_;
  const std::string base_ = tmp_.path();
  const std::string root_ = base_ + "/root";
};

TEST_F(DataPathTest, LinkAtTheEndLeadingOut) {
  Link(base_ + "/secret.gz", root_ + "/mnist/link.gz");
  for (bool must_exist : {true, false}) {
    EXPECT_EQ(Refused("mnist/link.gz", must_exist),
              "f: path escapes the data root");
  }
}

TEST_F(DataPathTest, LinkInTheMiddleLeadingOut) {
  Link(base_ + "/outside", root_ + "/mid");
  for (bool must_exist : {true, false}) {
    EXPECT_EQ(Refused("mid/x.gz", must_exist), "f: path escapes the data root");
  }
  // A file yet to be created below the link would land outside too.
  EXPECT_EQ(Refused("mid/new/out.bin", false), "f: path escapes the data root");
  // Relative link targets are followed the same way.
  Link("../../outside", root_ + "/mnist/up");
  EXPECT_EQ(Refused("mnist/up/x.gz", true), "f: path escapes the data root");
}

TEST_F(DataPathTest, DotDotAfterALinkIsResolvedByTheKernelNotLexically) {
  // Lexically "deep/../secret.gz" is "secret.gz", inside the root; but
  // deep -> base/outside/inner, so the kernel reads deep/.. as base/outside.
  MakeDir(base_ + "/outside/inner");
  Touch(base_ + "/outside/secret.gz");
  Link(base_ + "/outside/inner", root_ + "/deep");
  for (bool must_exist : {true, false}) {
    EXPECT_EQ(Refused("deep/../secret.gz", must_exist),
              "f: path escapes the data root");
  }
}

TEST_F(DataPathTest, DanglingLinkLeadingOut) {
  Link(base_ + "/not-yet", root_ + "/dangling.gz");
  EXPECT_EQ(Refused("dangling.gz", true), "f: file not found: dangling.gz");
  // Creating the output would create base/not-yet.
  EXPECT_THAT(Refused("dangling.gz", false), HasSubstr("dangling or loops"));
  // A dangling directory link in the middle.
  Link(base_ + "/no-dir", root_ + "/dd");
  EXPECT_THAT(Refused("dd/new/out.bin", false), HasSubstr("dangling or loops"));
  EXPECT_EQ(Refused("dd/out.bin", true), "f: file not found: dd/out.bin");
  // Dangling even when it points back inside: the check cannot see where a
  // not-yet-existing target will resolve, so it refuses them all.
  Link(root_ + "/later.gz", root_ + "/inward.gz");
  EXPECT_THAT(Refused("inward.gz", false), HasSubstr("dangling or loops"));
}

TEST_F(DataPathTest, ChainedLinksAreFollowedToTheEnd) {
  Link(base_ + "/secret.gz", root_ + "/b.gz");
  Link(root_ + "/b.gz", root_ + "/a.gz");  // a -> b (inside) -> outside
  EXPECT_EQ(Refused("a.gz", true), "f: path escapes the data root");
  EXPECT_EQ(Refused("a.gz", false), "f: path escapes the data root");
}

TEST_F(DataPathTest, LoopingLinksAreRefusedWithoutHanging) {
  Link(root_ + "/loop2", root_ + "/loop1");
  Link(root_ + "/loop1", root_ + "/loop2");
  EXPECT_THAT(Refused("loop1", true), HasSubstr("cannot resolve loop1"));
  EXPECT_THAT(Refused("loop1/x", false), HasSubstr("dangling or loops"));
}

TEST_F(DataPathTest, LinksThatStayInsideAreFine) {
  Link("images.gz", root_ + "/mnist/alias.gz");
  Link(root_ + "/mnist", root_ + "/data");
  EXPECT_EQ(Resolved("mnist/alias.gz", true), root_ + "/mnist/images.gz");
  EXPECT_EQ(Resolved("data/alias.gz", true), root_ + "/mnist/images.gz");
  EXPECT_EQ(Resolved("data/new/out.bin", false), root_ + "/mnist/new/out.bin");
  EXPECT_EQ(Resolved("data/./new//out.bin", false),
            root_ + "/mnist/new/out.bin");
  // The root itself may be reached through a link.
  Link(root_, base_ + "/root-link");
  absl::StatusOr<std::string> r =
      ResolveDataPath("f", base_ + "/root-link", "mnist/images.gz", true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, root_ + "/mnist/images.gz");
}

TEST_F(DataPathTest, BadStringsAreRefusedBeforeTheFileSystem) {
  EXPECT_EQ(Refused(std::string("a\0b", 3), true), "f: contains a NUL byte");
  EXPECT_EQ(Refused("a\nb", false), "f: must not contain control characters");
  EXPECT_EQ(Refused(std::string(4097, 'a'), false), "f: at most 4096 bytes");
  EXPECT_THAT(Refused("/etc/passwd", true), HasSubstr("absolute path"));
  EXPECT_EQ(Refused("../secret.gz", false), "f: path escapes the data root");
  EXPECT_EQ(Refused("a/../../secret.gz", true),
            "f: path escapes the data root");
  // A long path within the limit that the kernel cannot resolve is an
  // error, not a crash.
  EXPECT_THAT(Refused(std::string(4096, 'a'), true), HasSubstr("f: "));
  EXPECT_THAT(Refused(std::string(300, 'a') + "/x", false), HasSubstr("f: "));
}

TEST_F(DataPathTest, ModelFolderFilesMustStayInside) {
  const std::string hf = root_ + "/hf";
  MakeDir(hf);
  Touch(hf + "/config.json");
  EXPECT_EQ(ResolveModelFolder("g", root_, "hf", true).status().message(),
            "g: file not found: hf/model.safetensors");
  Touch(base_ + "/outside/model.safetensors");
  Link(base_ + "/outside/model.safetensors", hf + "/model.safetensors");
  EXPECT_EQ(ResolveModelFolder("g", root_, "hf", true).status().message(),
            "g: path escapes the data root");
  ASSERT_EQ(::unlink((hf + "/model.safetensors").c_str()), 0);
  Touch(hf + "/model.safetensors");
  absl::StatusOr<std::string> r = ResolveModelFolder("g", root_, "hf/", true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, hf);
  // The optional tokenizer, when present, is held to the same rule.
  Link(base_ + "/secret.gz", hf + "/trainyard_tokenizer.json");
  EXPECT_EQ(ResolveModelFolder("g", root_, "hf", true).status().message(),
            "g: path escapes the data root");
  // The folder itself, through a link leading out.
  Link(base_ + "/outside", root_ + "/hf-out");
  EXPECT_EQ(ResolveModelFolder("g", root_, "hf-out", true).status().message(),
            "g: path escapes the data root");
  EXPECT_EQ(ResolveModelFolder("g", root_, "hf-out", false).status().message(),
            "g: path escapes the data root");
  EXPECT_EQ(ResolveModelFolder("g", root_, "mnist/images.gz", true)
                .status()
                .message(),
            "g: not a directory: mnist/images.gz");
}

}  // namespace
}  // namespace trainyard::spec
