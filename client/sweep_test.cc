#include "client/sweep.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/spec.h"

namespace trainyard::client {
namespace {

namespace v1 = ::trainyard::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

SweepAxis Axis(const char* text) {
  absl::StatusOr<SweepAxis> axis = ParseSweepAxis(text);
  EXPECT_TRUE(axis.ok()) << axis.status();
  return axis.ok() ? *axis : SweepAxis();
}

std::string ErrorOf(const char* text) {
  absl::StatusOr<SweepAxis> axis = ParseSweepAxis(text);
  EXPECT_EQ(axis.status().code(), absl::StatusCode::kInvalidArgument) << text;
  return std::string(axis.status().message());
}

TEST(SweepTest, ParsesValuesAndBracketedLists) {
  SweepAxis lr = Axis("optimizer.lr=0.001,3e-3, 0.01");
  EXPECT_EQ(lr.field, "optimizer.lr");
  EXPECT_THAT(lr.values, ElementsAre("0.001", "3e-3", " 0.01"));

  SweepAxis hidden = Axis("model.mlp.hidden=[256],[512,256],128");
  EXPECT_THAT(hidden.values, ElementsAre("256", "512,256", "128"));
  EXPECT_THAT(hidden.shown, ElementsAre("[256]", "[512,256]", "128"));

  // Only the first '=' splits: a string value may hold one.
  SweepAxis name = Axis("data.text.path=a=b.txt,c.txt");
  EXPECT_EQ(name.field, "data.text.path");
  EXPECT_THAT(name.values, ElementsAre("a=b.txt", "c.txt"));

  EXPECT_THAT(Axis("depends_on=[]").values, ElementsAre(""));  // empty list
  EXPECT_THAT(Axis("seed=7").values, ElementsAre("7"));
}

TEST(SweepTest, MalformedAxesSayWhatIsWrong) {
  EXPECT_EQ(ErrorOf("optimizer.lr"),
            "--sweep optimizer.lr: expected FIELD=VALUE,VALUE,...");
  EXPECT_THAT(ErrorOf("=1,2"), HasSubstr("no field before '='"));
  EXPECT_THAT(ErrorOf("seed="), HasSubstr("no values after '='"));
  EXPECT_THAT(ErrorOf("seed=1,,2"), HasSubstr("value 2 is empty"));
  EXPECT_THAT(ErrorOf("seed=1,"), HasSubstr("value 2 is empty"));
  EXPECT_THAT(ErrorOf("seed=1,2,1"), HasSubstr("the value 1 is given twice"));
  EXPECT_THAT(ErrorOf("h=[1,2"), HasSubstr("a '[' without its ']'"));
  EXPECT_THAT(ErrorOf("h=1,2]"), HasSubstr("a ']' without its '['"));
  EXPECT_THAT(ErrorOf("h=[[1]]"), HasSubstr("a '[' inside brackets"));
  EXPECT_THAT(ErrorOf("h=[1]x"), HasSubstr("the list [1]x has text after"));
  EXPECT_THAT(ErrorOf("h=x[1]"), HasSubstr("the value x[1] has a bracket"));
}

TEST(SweepTest, ExpandsTheGridWithTheFirstAxisSlowest) {
  auto points = ExpandSweep(
      {Axis("optimizer.lr=0.1,0.2,0.3"), Axis("model.mlp.hidden=[8],[16,8]")});
  ASSERT_TRUE(points.ok()) << points.status();
  ASSERT_EQ(points->size(), 6u);
  std::vector<std::string> labels;
  for (const SweepPoint& p : *points) labels.push_back(p.label);
  EXPECT_THAT(labels, ElementsAre("optimizer.lr=0.1 model.mlp.hidden=[8]",
                                  "optimizer.lr=0.1 model.mlp.hidden=[16,8]",
                                  "optimizer.lr=0.2 model.mlp.hidden=[8]",
                                  "optimizer.lr=0.2 model.mlp.hidden=[16,8]",
                                  "optimizer.lr=0.3 model.mlp.hidden=[8]",
                                  "optimizer.lr=0.3 model.mlp.hidden=[16,8]"));
  EXPECT_THAT((*points)[3].assignments,
              ElementsAre("optimizer.lr=0.2", "model.mlp.hidden=16,8"));
  EXPECT_THAT((*points)[3].values, ElementsAre("0.2", "[16,8]"));

  auto none = ExpandSweep({});
  ASSERT_TRUE(none.ok());
  ASSERT_EQ(none->size(), 1u);
  EXPECT_TRUE((*none)[0].assignments.empty());
}

TEST(SweepTest, RefusesARepeatedFieldAndTooManyJobs) {
  auto twice = ExpandSweep({Axis("seed=1,2"), Axis("seed=3")});
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(twice.status().message(), HasSubstr("seed is swept twice"));

  // 11 x 10 = 110 > 100.
  auto big = ExpandSweep({Axis("seed=1,2,3,4,5,6,7,8,9,10,11"),
                          Axis("steps=1,2,3,4,5,6,7,8,9,10")});
  EXPECT_EQ(big.status().message(),
            "--sweep: 110 combinations; a sweep makes at most 100 jobs");
  EXPECT_TRUE(ExpandSweep({Axis("seed=1,2,3,4,5,6,7,8,9,10"),
                           Axis("steps=1,2,3,4,5,6,7,8,9,10")})
                  .ok());
  // Far more than fits in an integer is still refused, not overflowed.
  std::vector<SweepAxis> many(70, Axis("seed=1,2"));
  for (size_t i = 0; i < many.size(); ++i) many[i].field = std::to_string(i);
  EXPECT_THAT(ExpandSweep(many).status().message(),
              HasSubstr("more than 10^15 combinations"));
}

v1::JobSpec Base() {
  auto spec = spec::ParseJobSpec(R"(name: mnist
model: {mlp: {hidden: [64]}}
optimizer: {lr: 0.001}
steps: 100
)");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

TEST(SweepTest, SpecsApplyEachPointAndAreNamedAfterIt) {
  auto points = ExpandSweep(
      {Axis("optimizer.lr=0.01,0.03"), Axis("model.mlp.hidden=[32],[64,32]")});
  auto specs = SweepSpecs(Base(), *points);
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 4u);
  EXPECT_EQ((*specs)[1].name(),
            "mnist optimizer.lr=0.01 model.mlp.hidden=[64,32]");
  EXPECT_FLOAT_EQ((*specs)[1].optimizer().lr(), 0.01f);
  EXPECT_THAT((*specs)[1].model().mlp().hidden(), ElementsAre(64, 32));
  EXPECT_FLOAT_EQ((*specs)[2].optimizer().lr(), 0.03f);
  EXPECT_THAT((*specs)[2].model().mlp().hidden(), ElementsAre(32));
  EXPECT_EQ((*specs)[2].steps(), 100);  // the rest is the base's

  v1::JobSpec unnamed = Base();
  unnamed.clear_name();
  EXPECT_EQ((*SweepSpecs(unnamed, *points))[0].name(),
            "optimizer.lr=0.01 model.mlp.hidden=[32]");
}

TEST(SweepTest, SpecsRefuseAValueThatDoesNotFitAndOverlongNames) {
  auto bad = SweepSpecs(Base(), *ExpandSweep({Axis("optimizer.lr=0.1,fast")}));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("--sweep optimizer.lr=fast"));

  auto unknown = SweepSpecs(Base(), *ExpandSweep({Axis("optimizer.lrr=1")}));
  EXPECT_THAT(unknown.status().message(), HasSubstr("no field \"lrr\""));

  // "<name> optimizer.lr=0.25" is the name plus 18 characters.
  v1::JobSpec long_name = Base();
  long_name.set_name(std::string(110, 'n'));
  EXPECT_TRUE(
      SweepSpecs(long_name, *ExpandSweep({Axis("optimizer.lr=0.1,0.25")}))
          .ok());
  long_name.set_name(std::string(111, 'n'));
  auto too_long =
      SweepSpecs(long_name, *ExpandSweep({Axis("optimizer.lr=0.1,0.25")}));
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.status().message(),
              HasSubstr("would be 129 bytes, at most 128"));
}

TEST(SweepTest, RequestIdsNumberTheJobsFromOne) {
  EXPECT_EQ(SweepRequestId("grid-7", 0), "grid-7-1");
  EXPECT_EQ(SweepRequestId("grid-7", 9), "grid-7-10");
}

}  // namespace
}  // namespace trainyard::client
