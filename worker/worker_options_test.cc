#include "worker/worker_options.h"

#include <filesystem>
#include <fstream>

#include "common/test_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/test_scripts.h"

namespace trainyard::worker {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<WorkerFlags> Parse(std::vector<std::string> args,
                                  absl::string_view env = "") {
  return ParseWorkerFlags(args, env);
}

TEST(ParseWorkerFlagsTest, ParsesEveryFlagInBothForms) {
  auto flags =
      Parse({"--server", "127.0.0.1:7070", "--work-dir=/tmp/w", "--cpu-slots",
             "4", "--data-root", "/data", "--name=node-1", "--train-bin",
             "/bin/yt", "--shutdown-grace-ms", "500", "--keep-attempt-dirs=7"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->server, "127.0.0.1:7070");
  EXPECT_EQ(flags->work_dir, "/tmp/w");
  EXPECT_EQ(flags->cpu_slots, 4);
  EXPECT_EQ(flags->data_root, "/data");
  EXPECT_EQ(flags->name, "node-1");
  EXPECT_EQ(flags->train_bin, "/bin/yt");
  EXPECT_EQ(flags->shutdown_grace, absl::Milliseconds(500));
  EXPECT_EQ(flags->keep_attempt_dirs, 7);
  EXPECT_FALSE(flags->help);
}

TEST(ParseWorkerFlagsTest, Defaults) {
  auto flags = Parse({"--server=localhost:1", "--work-dir=w"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->cpu_slots, 1);
  EXPECT_EQ(flags->data_root, "");
  EXPECT_EQ(flags->name, "");
  EXPECT_EQ(flags->train_bin, "");
  EXPECT_EQ(flags->gpus.mode, GpuSelection::Mode::kAuto);
  EXPECT_EQ(flags->keep_attempt_dirs, 100);
}

TEST(ParseWorkerFlagsTest, Gpus) {
  auto none = Parse({"--server=h:1", "--work-dir=w", "--gpus", "none"});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->gpus.mode, GpuSelection::Mode::kNone);
  auto list = Parse({"--server=h:1", "--work-dir=w", "--gpus=1,0,GPU-ab12"});
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->gpus.mode, GpuSelection::Mode::kList);
  EXPECT_THAT(list->gpus.devices, ::testing::ElementsAre("1", "0", "GPU-ab12"));
  auto automatic = Parse({"--server=h:1", "--work-dir=w", "--gpus=auto"});
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ(automatic->gpus.mode, GpuSelection::Mode::kAuto);
  EXPECT_THAT(WorkerUsage(), HasSubstr("--gpus auto|none|LIST"));
}

TEST(ParseWorkerFlagsTest, ServerFromEnvironment) {
  auto flags = Parse({"--work-dir=w"}, "[::1]:9000");
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->server, "[::1]:9000");
  auto explicit_flag = Parse({"--work-dir=w", "--server=h:1"}, "other:2");
  EXPECT_EQ(explicit_flag->server, "h:1");
}

// IPv6 as well as IPv4, bare or in brackets; kept bare, as yard-train's
// --rendezvous-host takes it.
TEST(ParseWorkerFlagsTest, RankAddressTakesIpv4AndIpv6) {
  for (const auto& [given, kept] :
       std::vector<std::pair<std::string, std::string>>{
           {"10.0.0.5", "10.0.0.5"},
           {"::1", "::1"},
           {"fd00::5", "fd00::5"},
           {"[fd00::5]", "fd00::5"},
           {"::ffff:10.0.0.5", "::ffff:10.0.0.5"}}) {
    auto flags =
        Parse({"--server=h:1", "--work-dir=w", "--rank-address", given});
    ASSERT_TRUE(flags.ok()) << given << ": " << flags.status();
    EXPECT_EQ(flags->rank_address, kept);
  }
}

TEST(ParseWorkerFlagsTest, Help) {
  auto flags = Parse({"--help"});
  ASSERT_TRUE(flags.ok());
  EXPECT_TRUE(flags->help);
  EXPECT_THAT(WorkerUsage(), HasSubstr("--cpu-slots"));
}

TEST(ParseWorkerFlagsTest, BadInputsNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--work-dir=w"}, "--server HOST:PORT is required"},
      {{"--server=h:1"}, "--work-dir DIR is required"},
      {{"--server=h", "--work-dir=w"}, "not HOST:PORT (no port)"},
      {{"--server=:80", "--work-dir=w"}, "no host"},
      {{"--server=h:0", "--work-dir=w"}, "port must be 1-65535"},
      {{"--server=h:99999", "--work-dir=w"}, "port must be 1-65535"},
      {{"--server=h:x", "--work-dir=w"}, "port must be 1-65535"},
      {{"--server=h:1", "--work-dir=w", "--cpu-slots=-1"},
       "--cpu-slots must be"},
      {{"--server=h:1", "--work-dir=w", "--cpu-slots=lots"},
       "--cpu-slots must be"},
      {{"--server=h:1", "--work-dir=w", "--keep-attempt-dirs=-1"},
       "--keep-attempt-dirs must be"},
      {{"--server=h:1", "--work-dir=w", "--name=a/b"}, "--name \"a/b\""},
      {{"--server=h:1", "--work-dir=w", "--gpus="},
       "--gpus must be auto, none"},
      {{"--server=h:1", "--work-dir=w", "--gpus=all"},
       "--gpus must be auto, none"},
      {{"--server=h:1", "--work-dir=w", "--gpus=0,-1"}, "got \"0,-1\""},
      {{"--server=h:1", "--work-dir=w", "--bogus=1"}, "unknown flag --bogus"},
      {{"--server=h:1", "--work-dir"}, "--work-dir needs a value"},
      {{"--server=h:1", "--work-dir=w", "--bogus"}, "unknown flag --bogus"},
      {{"--server=h:1", "--work-dir=w", "extra"},
       "unexpected argument \"extra\""},
      {{"--server=h:1", "--work-dir=w", "--"}, "unexpected argument \"--\""},
      {{"--server=h:1", "--work-dir=w", "--rank-address=node-a"},
       "--rank-address must be an IPv4 or IPv6 address of this node (not a "
       "hostname), got \"node-a\""},
      {{"--server=h:1", "--work-dir=w", "--rank-address=[::1]:7000"},
       "got \"[::1]:7000\""},
      {{"--server=h:1", "--work-dir=w", "--rank-address=::g"}, "got \"::g\""},
  };
  for (const Case& c : cases) {
    auto flags = Parse(c.args);
    ASSERT_FALSE(flags.ok()) << c.message;
    EXPECT_EQ(flags.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(flags.status().message(), HasSubstr(c.message));
  }
}

class WorkDirTest : public ::testing::Test {
 protected:
  WorkerFlags Flags() {
    WorkerFlags f;
    f.server = "h:1";
    f.work_dir = tmp_.File("work/nested");
    f.data_root = tmp_.path();
    f.train_bin =
        testing::WriteExecutable(tmp_.path(), "yard-train", "#!/bin/sh\n");
    return f;
  }
  TestDir tmp_;
};

TEST_F(WorkDirTest, ResolveCreatesWorkDirAndFindsTrainBinBesideUs) {
  WorkerFlags f = Flags();
  f.train_bin.clear();
  ASSERT_TRUE(ResolveWorkerPaths(f, tmp_.File("yard-worker")).ok());
  EXPECT_TRUE(std::filesystem::is_directory(tmp_.File("work/nested")));
  EXPECT_EQ(f.train_bin, tmp_.File("yard-train"));
  EXPECT_TRUE(std::filesystem::path(f.work_dir).is_absolute());
}

TEST_F(WorkDirTest, ResolveRejectsBadPaths) {
  WorkerFlags f = Flags();
  f.data_root = tmp_.File("missing");
  EXPECT_THAT(ResolveWorkerPaths(f, "").message(), HasSubstr("--data-root"));

  f = Flags();
  f.train_bin = tmp_.File("missing-train");
  EXPECT_THAT(ResolveWorkerPaths(f, "").message(),
              HasSubstr("not an executable"));

  f = Flags();
  std::ofstream(tmp_.File("file")) << "x";
  f.work_dir = tmp_.File("file");
  EXPECT_THAT(ResolveWorkerPaths(f, "").message(), HasSubstr("--work-dir"));
}

TEST_F(WorkDirTest, WorkerIdIsGeneratedOnceAndKept) {
  auto first = LoadOrCreateWorkerId(tmp_.path(), "", "host.example.com");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(*first, ::testing::StartsWith("host-example-com-"));
  auto second = LoadOrCreateWorkerId(tmp_.path(), "", "other");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*first, *second);
  EXPECT_EQ(*LoadOrCreateWorkerId(tmp_.path(), "given", "h"), "given");
}

TEST_F(WorkDirTest, CorruptWorkerIdFileIsAnError) {
  std::ofstream(tmp_.File("worker_id")) << "bad id/with slash\n";
  auto id = LoadOrCreateWorkerId(tmp_.path(), "", "h");
  ASSERT_FALSE(id.ok());
  EXPECT_THAT(id.status().message(), HasSubstr("not a worker id"));
}

TEST_F(WorkDirTest, OneWorkerPerWorkDir) {
  auto first = LockWorkDir(tmp_.path());
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = LockWorkDir(tmp_.path());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("another yard-worker"));
  first->Reset();
  EXPECT_TRUE(LockWorkDir(tmp_.path()).ok());
}

}  // namespace
}  // namespace trainyard::worker
