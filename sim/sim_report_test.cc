#include "sim/sim_report.h"

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::sim {
namespace {

// Every column is fixed-width, so an aligned table has lines of one length.
TEST(SimReportTest, LongPolicyNamesKeepTheTableAligned) {
  SimFlags f;
  f.loads = {0.9, 1.0};
  f.seeds = 1;
  const std::vector<std::string> names = {"fgd", "a-policy-named-at-length",
                                          "best-fit"};
  std::map<std::string, PolicyRow> rows;
  for (const std::string& name : names) {
    PolicyRow& r = rows[name];
    r.unallocated.resize(2);
    r.unallocated[0].Add(12.5);
    r.unallocated[1].Add(name == "fgd" ? 5 : 10);
    r.failed.Add(3);
    r.seconds.Add(0.25);
  }
  const std::string table = SaturationTable(f, "p.csv", 8, names, rows);
  std::vector<std::string> lines = absl::StrSplit(table, '\n');
  // "", the title, the header, three rows, the comparison, "".
  ASSERT_EQ(lines.size(), 8u) << table;
  EXPECT_THAT(lines[2], ::testing::StartsWith("policy "));
  for (size_t i = 3; i <= 5; ++i) {
    EXPECT_EQ(lines[i].size(), lines[2].size()) << table;
  }
  EXPECT_EQ(lines[6], "fgd vs best-fit at 100% load: 50.0% less unallocated");
}

TEST(SimReportTest, StatIsMeanAndSampleSd) {
  Stat s;
  for (double v : {2.0, 4.0, 6.0}) s.Add(v);
  EXPECT_DOUBLE_EQ(s.Mean(), 4);
  EXPECT_DOUBLE_EQ(s.Sd(), 2);
}

}  // namespace
}  // namespace trainyard::sim
