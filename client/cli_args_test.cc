// Tests for `yard` argument parsing and the exit-code mapping.
#include "client/cli_args.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
namespace v1 = ::trainyard::v1;

CliArgs Parse(const std::vector<std::string>& args, const char* env = nullptr) {
  absl::StatusOr<CliArgs> parsed = ParseArgs(args, env);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *parsed : CliArgs();
}

std::string Error(const std::vector<std::string>& args) {
  absl::StatusOr<CliArgs> parsed = ParseArgs(args, nullptr);
  EXPECT_FALSE(parsed.ok());
  if (parsed.ok()) return "";
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(parsed.status().message());
}

TEST(ParseArgsTest, ServerFromFlagThenEnvThenDefault) {
  EXPECT_EQ(Parse({"workers"}).server, "127.0.0.1:7070");
  EXPECT_EQ(Parse({"workers"}, "10.0.0.1:1").server, "10.0.0.1:1");
  EXPECT_EQ(Parse({"workers"}, "").server, "127.0.0.1:7070");
  EXPECT_EQ(Parse({"--server", "h:2", "workers"}, "10.0.0.1:1").server, "h:2");
  EXPECT_EQ(Parse({"--server=h:3", "workers"}).server, "h:3");
  EXPECT_EQ(Parse({"workers", "--server", "h:4"}).server, "h:4");
}

TEST(ParseArgsTest, OutputFormat) {
  EXPECT_EQ(Parse({"ls"}).output, OutputFormat::kTable);
  EXPECT_EQ(Parse({"-o", "json", "ls"}).output, OutputFormat::kJson);
  EXPECT_EQ(Parse({"--output=json", "ls"}).output, OutputFormat::kJson);
  EXPECT_EQ(Parse({"get", "j1", "-o", "table"}).output, OutputFormat::kTable);
  EXPECT_EQ(Error({"-o", "yaml", "ls"}),
            "-o: must be table or json, got \"yaml\"");
  EXPECT_EQ(Error({"ls", "-o"}), "-o: missing value");
}

TEST(ParseArgsTest, Submit) {
  CliArgs a = Parse({"submit", "spec.yaml", "--wait", "--request-id", "r1"});
  EXPECT_EQ(a.command, Command::kSubmit);
  EXPECT_EQ(a.spec_path, "spec.yaml");
  EXPECT_TRUE(a.wait);
  EXPECT_EQ(a.request_id, "r1");
  a = Parse({"submit", "--request-id=r2", "s.json"});
  EXPECT_FALSE(a.wait);
  EXPECT_EQ(a.request_id, "r2");
  EXPECT_EQ(a.spec_path, "s.json");
  EXPECT_EQ(Error({"submit"}), "'submit': missing SPEC file");
  EXPECT_EQ(Error({"submit", "a.yaml", "b.yaml"}),
            "unexpected argument \"b.yaml\"");
  EXPECT_EQ(Error({"submit", "a.yaml", "--request-id"}),
            "--request-id: missing value");
  EXPECT_EQ(Error({"submit", "a.yaml", "--request-id="}),
            "--request-id: must not be empty");
  EXPECT_EQ(Error({"submit", "a.yaml", "--wait=yes"}),
            "--wait: takes no value");
}

TEST(ParseArgsTest, SubmitSetIsRepeatableAndKeepsItsOrder) {
  CliArgs a = Parse({"submit", "spec.yaml", "--set", "optimizer.lr=0.003",
                     "--set=steps=2000", "--wait", "--set", "name=a=b", "--set",
                     "model.mlp.hidden=512,256"});
  EXPECT_EQ(a.spec_path, "spec.yaml");
  EXPECT_TRUE(a.wait);
  EXPECT_THAT(a.spec_overrides,
              ElementsAre("optimizer.lr=0.003", "steps=2000", "name=a=b",
                          "model.mlp.hidden=512,256"));
  // Global flags between them, and a value that starts with a dash.
  a = Parse({"submit", "--set", "steps=1", "-o", "json", "s.yaml", "--set",
             "name=-x"});
  EXPECT_EQ(a.output, OutputFormat::kJson);
  EXPECT_THAT(a.spec_overrides, ElementsAre("steps=1", "name=-x"));
  EXPECT_THAT(Parse({"submit", "s.yaml"}).spec_overrides, IsEmpty());
  // What FIELD=VALUE means is the spec's business (exit 3 later); only a
  // missing value is a usage error here.
  EXPECT_THAT(Parse({"submit", "s.yaml", "--set", "nonsense"}).spec_overrides,
              ElementsAre("nonsense"));
  EXPECT_THAT(Parse({"submit", "s.yaml", "--set="}).spec_overrides,
              ElementsAre(""));
  EXPECT_EQ(Error({"submit", "s.yaml", "--set"}), "--set: missing value");
  EXPECT_EQ(Error({"get", "j1", "--set", "steps=1"}),
            "unknown flag \"--set\" for 'get'");
  EXPECT_EQ(Error({"--set", "steps=1", "submit", "s.yaml"}),
            "unknown flag \"--set\" (command flags go after the command)");
}

TEST(ParseArgsTest, JobCommands) {
  for (auto [name, command] : std::vector<std::pair<std::string, Command>>{
           {"get", Command::kGet},
           {"logs", Command::kLogs},
           {"watch", Command::kWatch},
           {"cancel", Command::kCancel},
           {"suspend", Command::kSuspend},
           {"resume", Command::kResume}}) {
    CliArgs a = Parse({name, "job-7"});
    EXPECT_EQ(a.command, command);
    EXPECT_EQ(a.job_id, "job-7");
    EXPECT_THAT(Error({name}), HasSubstr("missing job ID"));
  }
  EXPECT_TRUE(Parse({"logs", "j", "-f"}).follow);
  EXPECT_TRUE(Parse({"logs", "--follow", "j"}).follow);
  EXPECT_FALSE(Parse({"logs", "j"}).follow);
  EXPECT_EQ(Parse({"logs", "j"}).tail_lines, 0);
  EXPECT_EQ(Parse({"logs", "j", "--tail", "20", "-f"}).tail_lines, 20);
  EXPECT_EQ(Parse({"logs", "--tail=1", "j"}).tail_lines, 1);
  EXPECT_EQ(Error({"logs", "j", "--tail", "0"}),
            "--tail: must be a number of lines from 1 to 2147483647, got "
            "\"0\"");
  EXPECT_EQ(Error({"logs", "j", "--tail=ten"}),
            "--tail: must be a number of lines from 1 to 2147483647, got "
            "\"ten\"");
  EXPECT_EQ(Error({"logs", "j", "--tail", "2147483648"}),
            "--tail: must be a number of lines from 1 to 2147483647, got "
            "\"2147483648\"");
  EXPECT_EQ(Error({"get", "j", "--tail", "3"}),
            "unknown flag \"--tail\" for 'get'");
  EXPECT_EQ(Parse({"cancel", "j", "--reason", "oops"}).reason, "oops");
  EXPECT_EQ(Parse({"suspend", "j", "--reason=later"}).reason, "later");
  EXPECT_EQ(Error({"resume", "j", "--reason", "x"}),
            "unknown flag \"--reason\" for 'resume'");
  EXPECT_EQ(Error({"get", "j", "-f"}), "unknown flag \"-f\" for 'get'");
  EXPECT_EQ(Error({"get", ""}), "'get': empty job ID");
}

TEST(ParseArgsTest, List) {
  CliArgs a = Parse({"ls"});
  EXPECT_EQ(a.command, Command::kList);
  EXPECT_EQ(a.limit, kDefaultListLimit);
  EXPECT_TRUE(a.states.empty());
  EXPECT_EQ(Parse({"ls", "--all"}).limit, 0);
  EXPECT_EQ(Parse({"list", "--limit", "5"}).limit, 5);
  EXPECT_THAT(Parse({"ls", "--state", "running,Queued"}).states,
              ElementsAre(v1::RUNNING, v1::QUEUED));
  EXPECT_THAT(Parse({"ls", "--state=failed", "--state", "cancelled"}).states,
              ElementsAre(v1::FAILED, v1::CANCELLED));
  EXPECT_THAT(Error({"ls", "--state", "running,bogus"}),
              HasSubstr("unknown state \"bogus\""));
  EXPECT_THAT(Error({"ls", "--state", "job_state_unspecified"}),
              HasSubstr("unknown state"));
  EXPECT_EQ(Error({"ls", "--limit", "0"}),
            "--limit: must be a positive integer, got \"0\"");
  EXPECT_EQ(Error({"ls", "--limit", "ten"}),
            "--limit: must be a positive integer, got \"ten\"");
  EXPECT_EQ(Error({"ls", "--all", "--limit", "3"}),
            "--all and --limit exclude each other");
  EXPECT_EQ(Error({"ls", "extra"}), "unexpected argument \"extra\"");
  EXPECT_EQ(Parse({"ls", "--name", "mnist lr"}).name_contains, "mnist lr");
  EXPECT_EQ(Parse({"ls", "--name=x", "--state", "queued"}).name_contains, "x");
  EXPECT_EQ(Parse({"ls"}).name_contains, "");
  EXPECT_EQ(Error({"ls", "--name"}), "--name: missing value");
  EXPECT_EQ(Error({"ls", "--name="}), "--name: must not be empty");
  EXPECT_TRUE(Parse({"ls", "-q"}).quiet);
  EXPECT_TRUE(Parse({"ls", "--quiet", "--name", "x"}).quiet);
  EXPECT_FALSE(Parse({"ls"}).quiet);
  EXPECT_EQ(Error({"ls", "--quiet=1"}), "--quiet: takes no value");
  EXPECT_EQ(Error({"get", "j1", "-q"}), "unknown flag \"-q\" for 'get'");
}

TEST(ParseArgsTest, SubmitSweepAndDryRun) {
  CliArgs a =
      Parse({"submit", "s.yaml", "--sweep", "optimizer.lr=0.1,0.2", "--set",
             "steps=5", "--sweep=model.mlp.hidden=[8],[16,8]", "--dry-run"});
  ASSERT_EQ(a.sweeps.size(), 2u);
  EXPECT_EQ(a.sweeps[0].field, "optimizer.lr");
  EXPECT_THAT(a.sweeps[1].values, ElementsAre("8", "16,8"));
  EXPECT_THAT(a.spec_overrides, ElementsAre("steps=5"));
  EXPECT_TRUE(a.dry_run);
  EXPECT_FALSE(Parse({"submit", "s.yaml"}).dry_run);
  EXPECT_THAT(Parse({"submit", "s.yaml"}).sweeps, IsEmpty());
  // A malformed sweep is a usage error naming it.
  EXPECT_EQ(Error({"submit", "s.yaml", "--sweep", "seed"}),
            "--sweep seed: expected FIELD=VALUE,VALUE,...");
  EXPECT_EQ(Error({"submit", "s.yaml", "--sweep"}), "--sweep: missing value");
  EXPECT_EQ(Error({"submit", "s.yaml", "--dry-run=yes"}),
            "--dry-run: takes no value");
  EXPECT_EQ(Error({"submit", "s.yaml", "--dry-run", "--wait"}),
            "--dry-run and --wait exclude each other");
  EXPECT_EQ(Error({"get", "j1", "--dry-run"}),
            "unknown flag \"--dry-run\" for 'get'");
}

TEST(ParseArgsTest, UsageErrors) {
  EXPECT_EQ(Error({}), "missing command (run 'yard --help')");
  EXPECT_EQ(Error({"frobnicate"}),
            "unknown command \"frobnicate\" (run 'yard --help')");
  EXPECT_EQ(Error({"--bogus", "ls"}),
            "unknown flag \"--bogus\" (command flags go after the command)");
  EXPECT_EQ(Error({"--wait", "submit", "x"}),
            "unknown flag \"--wait\" (command flags go after the command)");
  EXPECT_EQ(Error({"ls", "--bogus"}), "unknown flag \"--bogus\" for 'ls'");
  EXPECT_EQ(Error({"--server"}), "--server: missing value");
  EXPECT_EQ(Error({"--server=", "ls"}), "--server: must not be empty");
}

TEST(ParseArgsTest, HelpWinsOverEverythingElse) {
  EXPECT_EQ(Parse({"--help"}).command, Command::kHelp);
  EXPECT_EQ(Parse({"-h"}).command, Command::kHelp);
  EXPECT_EQ(Parse({"help"}).command, Command::kHelp);
  EXPECT_EQ(Parse({"submit", "--help"}).command, Command::kHelp);
  EXPECT_THAT(UsageText(),
              HasSubstr("submit SPEC [--set FIELD=VALUE]... [--sweep"));
  EXPECT_THAT(UsageText(), HasSubstr("Exit codes"));
}

TEST(ParseArgsTest, DoubleDashEndsFlags) {
  CliArgs a = Parse({"get", "--", "-weird-id"});
  EXPECT_EQ(a.job_id, "-weird-id");
  EXPECT_EQ(Parse({"submit", "--", "-f.yaml"}).spec_path, "-f.yaml");
}

TEST(CliArgsTest, ParsesCredentialFlagsAnywhere) {
  CliArgs a = Parse({"--token", "ytk_x", "ls", "--tls-ca=/ca.pem",
                     "--tls-server-name", "yard.internal", "--config=/c"});
  EXPECT_EQ(a.token, "ytk_x");
  EXPECT_EQ(a.tls_ca, "/ca.pem");
  EXPECT_EQ(a.tls_server_name, "yard.internal");
  EXPECT_EQ(a.config_path, "/c");
  EXPECT_FALSE(a.server_set);
  EXPECT_TRUE(Parse({"--server", "h:1", "ls"}).server_set);
}

TEST(CliArgsTest, ParsesTokenAndTenantCommands) {
  CliArgs c = Parse({"token", "create", "team-a", "--role", "worker",
                     "--description=ci runners"});
  EXPECT_EQ(c.command, Command::kToken);
  EXPECT_EQ(c.subcommand, "create");
  EXPECT_EQ(c.target, "team-a");
  EXPECT_EQ(c.role, "worker");
  EXPECT_EQ(c.description, "ci runners");
  EXPECT_TRUE(Parse({"token", "ls", "--all"}).include_revoked);
  EXPECT_EQ(Parse({"token", "revoke", "t-0123456789ab"}).target,
            "t-0123456789ab");
  CliArgs t = Parse({"tenant", "set", "team-a", "--max-gpus", "4",
                     "--max-queued-jobs=10", "--weight", "2.5"});
  EXPECT_EQ(t.command, Command::kTenant);
  EXPECT_EQ(t.max_gpus, 4);
  EXPECT_EQ(t.max_queued_jobs, 10);
  EXPECT_EQ(t.max_cpu_slots, -1);  // unset: keeps the current value
  EXPECT_DOUBLE_EQ(t.weight, 2.5);
  EXPECT_EQ(Parse({"tenant", "ls"}).subcommand, "ls");
}

TEST(CliArgsTest, BadAdminCommandsAreUsageErrors) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"token"}, "missing subcommand"},
      {{"token", "mint"}, "unknown subcommand \"mint\""},
      {{"token", "create"}, "missing TENANT"},
      {{"token", "revoke"}, "missing token ID"},
      {{"token", "ls", "extra"}, "unexpected argument \"extra\""},
      {{"tenant", "set"}, "missing tenant NAME"},
      {{"tenant", "set", "a", "--max-gpus=-1"}, "--max-gpus"},
      {{"tenant", "set", "a", "--weight=0"}, "--weight"},
      {{"tenant", "set", "a", "--role=x"}, "unknown flag"},
      {{"--token"}, "--token: missing value"},
      {{"--token=", "ls"}, "--token: must not be empty"}};
  for (const auto& [args, mentions] : cases) {
    absl::StatusOr<CliArgs> r = ParseArgs(args, nullptr);
    ASSERT_FALSE(r.ok()) << args[0];
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(mentions));
  }
}

TEST(CliArgsTest, ParsesDrainAndUndrain) {
  CliArgs d = Parse({"drain", "w1"});
  EXPECT_EQ(d.command, Command::kDrain);
  EXPECT_EQ(d.worker_id, "w1");
  EXPECT_EQ(d.reason, "");
  EXPECT_FALSE(d.keep_jobs);
  EXPECT_FALSE(d.wait);
  d = Parse({"drain", "--reason", "disk swap", "w1", "--keep-jobs", "--wait"});
  EXPECT_EQ(d.worker_id, "w1");
  EXPECT_EQ(d.reason, "disk swap");
  EXPECT_TRUE(d.keep_jobs);
  EXPECT_TRUE(d.wait);
  EXPECT_EQ(Parse({"-o", "json", "drain", "--reason=bios", "w2"}).reason,
            "bios");
  EXPECT_EQ(Parse({"drain", "--", "-odd-id"}).worker_id, "-odd-id");
  CliArgs u = Parse({"undrain", "w1"});
  EXPECT_EQ(u.command, Command::kUndrain);
  EXPECT_EQ(u.worker_id, "w1");
  EXPECT_THAT(UsageText(),
              HasSubstr("drain WORKER [--reason TEXT] [--keep-jobs] [--wait]"));
  EXPECT_THAT(UsageText(), HasSubstr("undrain WORKER"));
}

TEST(CliArgsTest, ParsesSetPriority) {
  CliArgs a = Parse({"set-priority", "j-1", "j-2", "--priority", "-5"});
  EXPECT_EQ(a.command, Command::kSetPriority);
  EXPECT_EQ(a.job_ids, (std::vector<std::string>{"j-1", "j-2"}));
  EXPECT_EQ(a.priority, -5);
  EXPECT_EQ(Parse({"set-priority", "--priority=1000", "j-1"}).priority, 1000);
  EXPECT_EQ(Error({"set-priority", "j-1"}),
            "'set-priority': missing --priority P");
  EXPECT_EQ(Error({"set-priority", "--priority", "1"}),
            "'set-priority': missing job ID");
  EXPECT_EQ(Error({"set-priority", "j-1", "--priority", "high"}),
            "--priority: must be an integer from -1000 to 1000, got \"high\"");
  EXPECT_EQ(Error({"set-priority", "j-1", "--priority", "-1001"}),
            "--priority: must be an integer from -1000 to 1000, got \"-1001\"");
  EXPECT_EQ(Error({"cancel", "j-1", "--priority", "1"}),
            "unknown flag \"--priority\" for 'cancel'");
  EXPECT_THAT(UsageText(), HasSubstr("set-priority ID... --priority P"));
}

TEST(CliArgsTest, ParsesATenantsPriorityCap) {
  EXPECT_FALSE(Parse({"tenant", "set", "a"}).max_priority.has_value());
  EXPECT_EQ(Parse({"tenant", "set", "a", "--max-priority", "-3"}).max_priority,
            -3);
  EXPECT_EQ(Parse({"tenant", "set", "a", "--max-priority=none"}).max_priority,
            kNoPriorityCap);
  EXPECT_EQ(Error({"tenant", "set", "a", "--max-priority", "1001"}),
            "--max-priority: must be an integer from -1000 to 1000, or none, "
            "got \"1001\"");
  EXPECT_THAT(UsageText(), HasSubstr("[--max-priority P|none]"));
}

TEST(CliArgsTest, ParsesForget) {
  CliArgs f = Parse({"forget", "gpu-07"});
  EXPECT_EQ(f.command, Command::kForget);
  EXPECT_EQ(f.worker_id, "gpu-07");
  EXPECT_THAT(UsageText(), HasSubstr("forget WORKER"));
  EXPECT_EQ(Error({"forget"}), "'forget': missing worker ID");
  EXPECT_EQ(Error({"forget", "w1", "--keep-jobs"}),
            "unknown flag \"--keep-jobs\" for 'forget'");
}

TEST(CliArgsTest, BadDrainCommandsAreUsageErrors) {
  EXPECT_EQ(Error({"drain"}), "'drain': missing worker ID");
  EXPECT_EQ(Error({"undrain"}), "'undrain': missing worker ID");
  EXPECT_EQ(Error({"drain", ""}), "'drain': empty worker ID");
  EXPECT_EQ(Error({"drain", "w1", "w2"}), "unexpected argument \"w2\"");
  EXPECT_EQ(Error({"undrain", "w1", "--force"}),
            "unknown flag \"--force\" for 'undrain'");
  EXPECT_EQ(Error({"undrain", "w1", "--keep-jobs"}),
            "unknown flag \"--keep-jobs\" for 'undrain'");
  EXPECT_EQ(Error({"undrain", "w1", "--reason", "x"}),
            "unknown flag \"--reason\" for 'undrain'");
  EXPECT_EQ(Error({"drain", "w1", "--bogus"}),
            "unknown flag \"--bogus\" for 'drain'");
  EXPECT_EQ(Error({"drain", "w1", "--reason"}), "--reason: missing value");
  EXPECT_EQ(Error({"drain", "w1", "--keep-jobs=yes"}),
            "--keep-jobs: takes no value");
  EXPECT_EQ(Error({"drain", "w1", "--wait=1"}), "--wait: takes no value");
  EXPECT_EQ(Error({"--keep-jobs", "drain", "w1"}),
            "unknown flag \"--keep-jobs\" (command flags go after the "
            "command)");
  EXPECT_EQ(Error({"cancel", "j1", "--keep-jobs"}),
            "unknown flag \"--keep-jobs\" for 'cancel'");
}

TEST(CliArgsTest, ParsesDelete) {
  CliArgs d = Parse({"delete", "j-000001"});
  EXPECT_EQ(d.command, Command::kDelete);
  EXPECT_EQ(d.job_id, "j-000001");
  EXPECT_FALSE(d.keep_checkpoints);
  d = Parse({"delete", "--keep-checkpoints", "j-000002"});
  EXPECT_EQ(d.job_id, "j-000002");
  EXPECT_TRUE(d.keep_checkpoints);
  d = Parse({"-o", "json", "delete", "j-3", "--keep-checkpoints"});
  EXPECT_EQ(d.output, OutputFormat::kJson);
  EXPECT_TRUE(d.keep_checkpoints);
  EXPECT_EQ(Parse({"delete", "--", "-odd-id"}).job_id, "-odd-id");
  EXPECT_THAT(UsageText(), HasSubstr("delete ID... [--keep-checkpoints]"));
}

TEST(CliArgsTest, CancelSuspendResumeAndDeleteTakeSeveralIds) {
  for (const char* command : {"cancel", "suspend", "resume", "delete"}) {
    CliArgs a = Parse({command, "j-1", "j-2", "j-3"});
    EXPECT_EQ(a.job_id, "j-1");
    EXPECT_THAT(a.job_ids, ::testing::ElementsAre("j-1", "j-2", "j-3"));
    EXPECT_THAT(Parse({command, "j-1"}).job_ids, ::testing::ElementsAre("j-1"));
    EXPECT_EQ(Error({command, "j-1", "", "j-3"}),
              absl::StrCat("'", command, "': empty job ID"));
  }
  CliArgs d = Parse({"delete", "j-1", "--keep-checkpoints", "j-2"});
  EXPECT_THAT(d.job_ids, ::testing::ElementsAre("j-1", "j-2"));
  EXPECT_TRUE(d.keep_checkpoints);
  EXPECT_EQ(Error({"get", "j-1", "j-2"}), "unexpected argument \"j-2\"");
}

TEST(CliArgsTest, CheckpointsAndDownload) {
  CliArgs list = Parse({"checkpoints", "j-1"});
  EXPECT_EQ(list.command, Command::kCheckpoints);
  EXPECT_EQ(list.job_id, "j-1");
  CliArgs d = Parse({"download", "j-1"});
  EXPECT_EQ(d.command, Command::kDownload);
  EXPECT_EQ(d.step, 0);
  EXPECT_FALSE(d.best);
  EXPECT_EQ(d.dir, "");
  d = Parse({"download", "j-1", "--step", "500", "--dir=model"});
  EXPECT_EQ(d.step, 500);
  EXPECT_EQ(d.dir, "model");
  EXPECT_TRUE(Parse({"download", "--best", "j-1"}).best);
  EXPECT_EQ(Error({"download"}), "'download': missing job ID");
  EXPECT_EQ(Error({"download", "j-1", "j-2"}), "unexpected argument \"j-2\"");
  EXPECT_EQ(Error({"download", "j-1", "--step", "0"}),
            "--step: must be a positive step number, got \"0\"");
  EXPECT_EQ(Error({"download", "j-1", "--step", "x"}),
            "--step: must be a positive step number, got \"x\"");
  EXPECT_EQ(Error({"download", "j-1", "--step", "5", "--best"}),
            "--step and --best exclude each other");
  EXPECT_EQ(Error({"download", "j-1", "--dir", ""}),
            "--dir: must not be empty");
  EXPECT_EQ(Error({"download", "j-1", "--best=yes"}), "--best: takes no value");
  EXPECT_EQ(Error({"checkpoints", "j-1", "--best"}),
            "unknown flag \"--best\" for 'checkpoints'");
  EXPECT_EQ(Error({"checkpoints"}), "'checkpoints': missing job ID");
}

TEST(CliArgsTest, MaxRunningGoesWithASweep) {
  CliArgs a =
      Parse({"submit", "x.yaml", "--sweep", "seed=1,2", "--max-running", "3"});
  EXPECT_EQ(a.max_running, 3);
  EXPECT_EQ(Parse({"submit", "x.yaml"}).max_running, 0);
  EXPECT_EQ(Error({"submit", "x.yaml", "--max-running", "2"}),
            "--max-running: only with --sweep (one job alone: --set "
            "concurrency.group=NAME --set concurrency.max_running=N)");
  EXPECT_EQ(
      Error({"submit", "x.yaml", "--sweep", "seed=1,2", "--max-running", "0"}),
      "--max-running: must be a positive number of jobs, got \"0\"");
  EXPECT_EQ(Error({"ls", "--max-running", "2"}),
            "unknown flag \"--max-running\" for 'ls'");
}

TEST(CliArgsTest, HalvingGoesWithASweep) {
  CliArgs a =
      Parse({"submit", "x.yaml", "--sweep", "seed=1,2", "--halving", "100:4"});
  EXPECT_EQ(a.halving_min_steps, 100);
  EXPECT_EQ(a.halving_factor, 4);
  a = Parse({"submit", "x.yaml", "--sweep", "seed=1,2", "--halving=30"});
  EXPECT_EQ(a.halving_min_steps, 30);
  EXPECT_EQ(a.halving_factor, 0);
  EXPECT_EQ(Parse({"submit", "x.yaml"}).halving_min_steps, 0);
  EXPECT_EQ(Error({"submit", "x.yaml", "--halving", "100"}),
            "--halving: only with --sweep (jobs submitted apart: --set "
            "halving.group=NAME --set halving.min_steps=N in each)");
  for (const char* bad :
       {"0", "-5", "x", "100:", "100:0", "100:x", ":3", "100:3:2"}) {
    EXPECT_EQ(
        Error({"submit", "x.yaml", "--sweep", "seed=1,2", "--halving", bad}),
        absl::StrCat("--halving: expected STEPS or STEPS:FACTOR "
                     "(positive numbers, e.g. 100:3), got \"",
                     bad, "\""));
  }
  EXPECT_EQ(Error({"submit", "x.yaml", "--sweep", "seed=1,2", "--halving"}),
            "--halving: missing value");
}

TEST(CliArgsTest, Usage) {
  CliArgs u = Parse({"usage"});
  EXPECT_EQ(u.command, Command::kUsage);
  EXPECT_EQ(u.since, "");
  EXPECT_EQ(u.until, "");
  EXPECT_EQ(u.tenant, "");
  EXPECT_FALSE(u.by_job);
  u = Parse({"usage", "--since", "30d", "--until=2026-11-20", "--jobs",
             "--tenant", "team-b"});
  EXPECT_EQ(u.since, "30d");
  EXPECT_EQ(u.until, "2026-11-20");
  EXPECT_EQ(u.tenant, "team-b");
  EXPECT_TRUE(u.by_job);
  EXPECT_EQ(Parse({"usage", "--since", "2026-11-01T09:30:00Z"}).since,
            "2026-11-01T09:30:00Z");

  EXPECT_THAT(Error({"usage", "--since", "last week"}),
              ::testing::StartsWith("--since: \"last week\" is not a time: "
                                    "give an age such as 7d"));
  EXPECT_THAT(Error({"usage", "--until", "5w"}),
              ::testing::StartsWith("--until: \"5w\" is not a time (unknown "
                                    "unit): "));
  EXPECT_EQ(Error({"usage", "--since"}), "--since: missing value");
  EXPECT_EQ(Error({"usage", "--tenant", ""}), "--tenant: must not be empty");
  EXPECT_EQ(Error({"usage", "--jobs=1"}), "--jobs: takes no value");
  EXPECT_EQ(Error({"usage", "j-1"}), "unexpected argument \"j-1\"");
  EXPECT_EQ(Error({"usage", "--best"}), "unknown flag \"--best\" for 'usage'");
  EXPECT_EQ(Error({"ls", "--since", "7d"}),
            "unknown flag \"--since\" for 'ls'");
}

TEST(CliArgsTest, BadDeleteCommandsAreUsageErrors) {
  EXPECT_EQ(Error({"delete"}), "'delete': missing job ID");
  EXPECT_EQ(Error({"delete", ""}), "'delete': empty job ID");
  EXPECT_EQ(Error({"delete", "j-1", "--force"}),
            "unknown flag \"--force\" for 'delete'");
  EXPECT_EQ(Error({"delete", "j-1", "--reason", "x"}),
            "unknown flag \"--reason\" for 'delete'");
  EXPECT_EQ(Error({"delete", "j-1", "--keep-checkpoints=yes"}),
            "--keep-checkpoints: takes no value");
  EXPECT_EQ(Error({"--keep-checkpoints", "delete", "j-1"}),
            "unknown flag \"--keep-checkpoints\" (command flags go after the "
            "command)");
  EXPECT_EQ(Error({"cancel", "j-1", "--keep-checkpoints"}),
            "unknown flag \"--keep-checkpoints\" for 'cancel'");
}

TEST(ExitCodeTest, MapsStatusCodes) {
  EXPECT_EQ(ExitCodeForStatus(absl::OkStatus()), 0);
  EXPECT_EQ(ExitCodeForStatus(absl::InvalidArgumentError("x")), 3);
  EXPECT_EQ(ExitCodeForStatus(absl::NotFoundError("x")), 4);
  EXPECT_EQ(ExitCodeForStatus(absl::FailedPreconditionError("x")), 5);
  EXPECT_EQ(ExitCodeForStatus(absl::UnavailableError("x")), 6);
  EXPECT_EQ(ExitCodeForStatus(absl::DeadlineExceededError("x")), 6);
  EXPECT_EQ(ExitCodeForStatus(absl::InternalError("x")), 7);
  EXPECT_EQ(ExitCodeForStatus(absl::UnauthenticatedError("x")), 8);
  EXPECT_EQ(ExitCodeForStatus(absl::PermissionDeniedError("x")), 8);
  EXPECT_EQ(ExitCodeForStatus(absl::ResourceExhaustedError("x")), 9);
  EXPECT_EQ(ExitCodeForStatus(absl::OutOfRangeError("x")), 7);
  EXPECT_EQ(kExitJobNotSucceeded, 1);
  EXPECT_EQ(kExitUsage, 2);
}

}  // namespace
}  // namespace trainyard::client
