#include "sim/sim_flags.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::sim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(SimFlagsTest, DefaultsAndOverrides) {
  auto f = ParseSimFlags({"saturation"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->trace, "../shared/traces/alibaba-gpu-v2023");
  EXPECT_EQ(f->seeds, 10);
  f = ParseSimFlags({"saturation", "--seeds", "3", "--policies=fgd,best-fit",
                     "--loads", "0.5,1", "--pods", "a.csv,b.csv", "--csv",
                     "out.csv", "--arrival-speedup", "50"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->seeds, 3);
  EXPECT_THAT(f->policies, ElementsAre("fgd", "best-fit"));
  EXPECT_THAT(f->loads, ElementsAre(0.5, 1.0));
  EXPECT_THAT(f->pods, ElementsAre("a.csv", "b.csv"));
  EXPECT_EQ(f->csv, "out.csv");
  EXPECT_EQ(f->arrival_speedup, 50);
  EXPECT_TRUE(ParseSimFlags({"replay"}).ok());
}

TEST(SimFlagsTest, BadInputNamesTheFlag) {
  EXPECT_THAT(ParseSimFlags({}).status().message(), HasSubstr("experiment"));
  EXPECT_THAT(ParseSimFlags({"replay-all"}).status().message(),
              HasSubstr("replay-all"));
  EXPECT_THAT(ParseSimFlags({"saturation", "--seeds", "0"}).status().message(),
              HasSubstr("--seeds"));
  EXPECT_THAT(
      ParseSimFlags({"saturation", "--loads", "0.9,0.8"}).status().message(),
      HasSubstr("--loads"));
  EXPECT_THAT(
      ParseSimFlags({"replay", "--arrival-speedup", "0.5"}).status().message(),
      HasSubstr("--arrival-speedup"));
  EXPECT_THAT(ParseSimFlags({"saturation", "--bogus", "1"}).status().message(),
              HasSubstr("--bogus"));
  EXPECT_THAT(ParseSimFlags({"saturation", "--csv"}).status().message(),
              HasSubstr("missing value"));
  // An unknown flag is unknown wherever it stands, with or without a value.
  EXPECT_EQ(ParseSimFlags({"saturation", "--seeds", "2", "--bogus"})
                .status()
                .message(),
            "unknown flag --bogus");
  EXPECT_EQ(ParseSimFlags({"saturation", "--bogus=1"}).status().message(),
            "unknown flag --bogus");
  EXPECT_EQ(ParseSimFlags({"saturation", "extra"}).status().message(),
            "unexpected argument extra");
  EXPECT_EQ(ParseSimFlags({"saturation", "--seeds", "abc"}).status().message(),
            "--seeds: \"abc\" is not an integer in [1, 1000]");
  EXPECT_EQ(ParseSimFlags({"saturation", "--policies", "best-fit,foo"})
                .status()
                .message(),
            "--policies: unknown placement policy \"foo\" (known: first-fit, "
            "best-fit, fgd, each optionally with +drf, +backfill, +preempt)");
  // Combinations the server takes are taken here too, where they can act.
  EXPECT_TRUE(
      ParseSimFlags({"replay", "--policies", "first-fit,best-fit+backfill"})
          .ok());
}

TEST(SimFlagsTest, RefusesSuffixesTheExperimentCannotActOn) {
  const std::string backfill = std::string(
      ParseSimFlags({"saturation", "--policies", "fgd,best-fit+backfill"})
          .status()
          .message());
  EXPECT_THAT(backfill, HasSubstr("--policies: best-fit+backfill: +backfill is "
                                  "refused: saturation has no queue"));
  for (const char* experiment : {"saturation", "replay"}) {
    EXPECT_THAT(ParseSimFlags({experiment, "--policies", "fgd+preempt"})
                    .status()
                    .message(),
                HasSubstr("fgd+preempt: +preempt is refused: the trace has no "
                          "priorities"));
    EXPECT_THAT(ParseSimFlags({experiment, "--policies", "best-fit+drf"})
                    .status()
                    .message(),
                HasSubstr("best-fit+drf: +drf is refused: the trace has "
                          "no tenants"));
  }
  EXPECT_THAT(ParseSimFlags({"replay", "--policies", "fgd+backfill+drf"})
                  .status()
                  .message(),
              HasSubstr("+drf"));
}

TEST(SimFlagsTest, RefusesAPolicyNamedTwice) {
  EXPECT_EQ(ParseSimFlags({"saturation", "--policies", "fgd,best-fit,fgd"})
                .status()
                .message(),
            "--policies: \"fgd\" is named twice");
}

TEST(SimFlagsTest, HelpOnlyWhereAFlagOrTheExperimentStands) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"help"},
           {"--help"},
           {"-h"},
           {"replay", "-h"},
           {"saturation", "--seeds", "2", "--help"}}) {
    auto f = ParseSimFlags(args);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_TRUE(f->help) << args.back();
  }
  // As a flag's value it is a value.
  auto csv = ParseSimFlags({"replay", "--csv", "help"});
  ASSERT_TRUE(csv.ok()) << csv.status();
  EXPECT_FALSE(csv->help);
  EXPECT_EQ(csv->csv, "help");
  csv = ParseSimFlags({"replay", "--csv", "-h"});
  ASSERT_TRUE(csv.ok()) << csv.status();
  EXPECT_FALSE(csv->help);
  EXPECT_EQ(csv->csv, "-h");
  EXPECT_EQ(ParseSimFlags({"replay", "help"}).status().message(),
            "unexpected argument help");
}

TEST(SimFlagsTest, UsageStatesExitCodesAndSuffixes) {
  const std::string usage = SimUsage();
  EXPECT_THAT(usage, HasSubstr("Exit status: 0"));
  EXPECT_THAT(usage, HasSubstr("2 bad command line"));
  EXPECT_THAT(usage, HasSubstr("+backfill"));
  EXPECT_THAT(usage, HasSubstr("+preempt"));
  EXPECT_THAT(usage, HasSubstr("gpu_spec"));
}

}  // namespace
}  // namespace trainyard::sim
