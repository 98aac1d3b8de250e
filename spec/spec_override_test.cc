// Tests for field overrides (`yard submit --set`): every kind of scalar,
// lists, oneofs, and every kind of bad override.
#include "spec/spec_override.h"

#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/wrappers.pb.h"
#include "gtest/gtest.h"
#include "spec/spec.h"
#include "trainyard/v1/jobs.pb.h"

namespace trainyard::spec {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::trainyard::v1::JobSpec;

constexpr char kSpec[] = R"(
name: mnist-mlp
model: {mlp: {hidden: [256, 128]}}
data:
  mnist:
    images: examples/data/mnist/t10k-images-idx3-ubyte.gz
    labels: examples/data/mnist/t10k-labels-idx1-ubyte.gz
optimizer: {lr: 1e-3}
batch: {micro_batch: 64}
steps: 1500
seed: 42
)";

JobSpec Base() {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(kSpec);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec();
}

// Applies overrides in order to the base spec; fails the test on an error.
JobSpec With(std::initializer_list<const char*> assignments) {
  JobSpec spec = Base();
  for (const char* a : assignments) {
    absl::Status s = ApplySpecOverride(a, spec);
    EXPECT_TRUE(s.ok()) << a << ": " << s;
  }
  return spec;
}

// The error of one override on the base spec, which must stay unchanged.
std::string ErrorOf(const std::string& assignment) {
  JobSpec spec = Base();
  absl::Status s = ApplySpecOverride(assignment, spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << assignment;
  EXPECT_TRUE(MessageDifferencer::Equals(spec, Base()))
      << assignment << " changed the spec: " << spec.DebugString();
  return std::string(s.message());
}

template <typename M>
std::string ErrorOn(M message, const std::string& assignment) {
  absl::Status s = ApplyFieldOverride(assignment, message);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << assignment;
  return std::string(s.message());
}

TEST(SpecOverrideTest, SetsScalarsOfEveryKindInTheSpec) {
  JobSpec spec = With({"steps=2000", "optimizer.lr=0.003", "name=lr-3e-3",
                       "batch.micro_batch=32", "seed=18446744073709551615",
                       "precision=BF16", "priority=-5"});
  EXPECT_EQ(spec.steps(), 2000);
  EXPECT_DOUBLE_EQ(spec.optimizer().lr(), 0.003);
  EXPECT_EQ(spec.name(), "lr-3e-3");
  EXPECT_EQ(spec.batch().micro_batch(), 32);
  EXPECT_EQ(spec.seed(), 18446744073709551615u);
  EXPECT_EQ(spec.precision(), v1::BF16);
  EXPECT_EQ(spec.priority(), -5);
  // Untouched fields keep the file's values.
  EXPECT_THAT(spec.model().mlp().hidden(), ElementsAre(256, 128));
  EXPECT_EQ(spec.data().mnist().labels(),
            "examples/data/mnist/t10k-labels-idx1-ubyte.gz");
}

TEST(SpecOverrideTest, NumbersAsTheSpecFileWritesThem) {
  JobSpec spec = With({"optimizer.lr=3e-4", "steps=2e3", "seed= 7 ",
                       "optimizer.beta2=1", "optimizer.weight_decay=-0.5",
                       "log_every_steps=+5", "time_limit_s=1.0"});
  EXPECT_DOUBLE_EQ(spec.optimizer().lr(), 3e-4);
  EXPECT_EQ(spec.steps(), 2000);
  EXPECT_EQ(spec.seed(), 7u);
  EXPECT_DOUBLE_EQ(spec.optimizer().beta2(), 1.0);
  EXPECT_DOUBLE_EQ(spec.optimizer().weight_decay(), -0.5);
  EXPECT_EQ(spec.log_every_steps(), 5);
  EXPECT_EQ(spec.time_limit_s(), 1);
}

TEST(SpecOverrideTest, StringsAreKeptVerbatim) {
  EXPECT_EQ(With({"name=a=b c"}).name(), "a=b c");
  EXPECT_EQ(With({"name= padded "}).name(), " padded ");
  EXPECT_EQ(With({"name=\xC3\xA9t\xC3\xA9"}).name(), "\xC3\xA9t\xC3\xA9");
  EXPECT_EQ(With({"name="}).name(), "");
  EXPECT_EQ(With({"name=[run 3]"}).name(), "[run 3]");
}

TEST(SpecOverrideTest, OptionalFieldsGainPresence) {
  JobSpec spec = With({"optimizer.grad_clip=0", "resources.cpu_threads=4"});
  EXPECT_TRUE(spec.optimizer().has_grad_clip());
  EXPECT_EQ(spec.optimizer().grad_clip(), 0.0);
  EXPECT_EQ(spec.resources().cpu_threads(), 4);
}

TEST(SpecOverrideTest, CreatesMessagesOnTheWay) {
  JobSpec spec;
  ASSERT_TRUE(ApplySpecOverride("resources.gpus=2", spec).ok());
  ASSERT_TRUE(ApplySpecOverride("data.text.train=shakespeare.txt", spec).ok());
  EXPECT_EQ(spec.resources().gpus(), 2);
  EXPECT_EQ(spec.data().text().train(), "shakespeare.txt");
  ASSERT_TRUE(ApplySpecOverride("data.text.tokenizer=CHAR", spec).ok());
  EXPECT_EQ(spec.data().text().tokenizer(), v1::CHAR);
}

TEST(SpecOverrideTest, JsonNamesWorkToo) {
  JobSpec spec = With(
      {"batch.microBatch=8", "optimizer.weightDecay=0.1", "logEverySteps=20"});
  EXPECT_EQ(spec.batch().micro_batch(), 8);
  EXPECT_DOUBLE_EQ(spec.optimizer().weight_decay(), 0.1);
  EXPECT_EQ(spec.log_every_steps(), 20);
}

TEST(SpecOverrideTest, ListsAreReplacedByACommaList) {
  EXPECT_THAT(With({"model.mlp.hidden=512,256"}).model().mlp().hidden(),
              ElementsAre(512, 256));
  EXPECT_THAT(With({"model.mlp.hidden= 64 , 32,16"}).model().mlp().hidden(),
              ElementsAre(64, 32, 16));
  EXPECT_THAT(With({"model.mlp.hidden=1024"}).model().mlp().hidden(),
              ElementsAre(1024));
  EXPECT_THAT(With({"model.mlp.hidden="}).model().mlp().hidden(), IsEmpty());
  JobSpec spec = With({"data.tokens.train=a.bin,b.bin", "data.tokens.eval="});
  EXPECT_THAT(spec.data().tokens().train(), ElementsAre("a.bin", "b.bin"));
  EXPECT_THAT(spec.data().tokens().eval(), IsEmpty());

  v1::ListJobsRequest request;
  ASSERT_TRUE(ApplyFieldOverride("states=RUNNING, QUEUED", request).ok());
  EXPECT_THAT(request.states(), ElementsAre(v1::RUNNING, v1::QUEUED));
}

// As a spec file and --sweep write a list.
TEST(SpecOverrideTest, AListMayBeInBrackets) {
  EXPECT_THAT(With({"model.mlp.hidden=[512,256]"}).model().mlp().hidden(),
              ElementsAre(512, 256));
  EXPECT_THAT(With({"model.mlp.hidden=[ 64, 32 ]"}).model().mlp().hidden(),
              ElementsAre(64, 32));
  EXPECT_THAT(With({"model.mlp.hidden=[1024]"}).model().mlp().hidden(),
              ElementsAre(1024));
  EXPECT_THAT(With({"model.mlp.hidden=[]"}).model().mlp().hidden(), IsEmpty());
  EXPECT_THAT(With({"data.tokens.train=[a.bin,b.bin]"}).data().tokens().train(),
              ElementsAre("a.bin", "b.bin"));
}

TEST(SpecOverrideTest, AOneofMemberSwitchesTheOneof) {
  JobSpec spec = With({"model.gpt.n_layer=2"});
  EXPECT_EQ(spec.model().kind_case(), v1::ModelSpec::kGpt);
  EXPECT_EQ(spec.model().gpt().n_layer(), 2);
  EXPECT_FALSE(spec.model().has_mlp());
  // Moving the data to tokens drops the MNIST paths.
  spec = With({"data.tokens.train=x.bin"});
  EXPECT_EQ(spec.data().source_case(), v1::DataSpec::kTokens);
  // Setting a field of the current member keeps its other fields.
  spec = With({"model.mlp.input_dim=100"});
  EXPECT_THAT(spec.model().mlp().hidden(), ElementsAre(256, 128));
  EXPECT_EQ(spec.model().mlp().input_dim(), 100);
}

TEST(SpecOverrideTest, LaterOverridesWin) {
  JobSpec spec = With(
      {"steps=10", "steps=20", "model.gpt.n_layer=2", "model.mlp.hidden=8"});
  EXPECT_EQ(spec.steps(), 20);
  EXPECT_EQ(spec.model().kind_case(), v1::ModelSpec::kMlp);
  EXPECT_THAT(spec.model().mlp().hidden(), ElementsAre(8));
}

TEST(SpecOverrideTest, OtherScalarTypes) {
  google::protobuf::BoolValue b;
  ASSERT_TRUE(ApplyFieldOverride("value=true", b).ok());
  EXPECT_TRUE(b.value());
  ASSERT_TRUE(ApplyFieldOverride("value=false", b).ok());
  EXPECT_FALSE(b.value());
  google::protobuf::FloatValue f;
  ASSERT_TRUE(ApplyFieldOverride("value=1.5", f).ok());
  EXPECT_EQ(f.value(), 1.5f);
  ASSERT_TRUE(ApplyFieldOverride("value=-3e38", f).ok());
  google::protobuf::UInt32Value u;
  ASSERT_TRUE(ApplyFieldOverride("value=4294967295", u).ok());
  EXPECT_EQ(u.value(), 4294967295u);
  google::protobuf::Int64Value i;
  ASSERT_TRUE(ApplyFieldOverride("value=-9223372036854775808", i).ok());
  EXPECT_EQ(i.value(), INT64_MIN);
  v1::DeleteJobRequest d;
  ASSERT_TRUE(ApplyFieldOverride("keep_checkpoints=true", d).ok());
  EXPECT_TRUE(d.keep_checkpoints());
}

TEST(SpecOverrideTest, MalformedAssignments) {
  EXPECT_EQ(ErrorOf("steps"), "steps: expected FIELD=VALUE");
  EXPECT_EQ(ErrorOf(""), "empty override; expected FIELD=VALUE");
  EXPECT_EQ(ErrorOf("=3"), "=3: empty field name");
  EXPECT_EQ(ErrorOf("optimizer..lr=1"),
            "optimizer..lr=1: empty field name in \"optimizer..lr\"");
  EXPECT_EQ(ErrorOf(".steps=1"), ".steps=1: empty field name in \".steps\"");
  EXPECT_EQ(ErrorOf("optimizer.=1"),
            "optimizer.=1: empty field name in \"optimizer.\"");
}

TEST(SpecOverrideTest, UnknownFieldsNameTheChoices) {
  EXPECT_EQ(ErrorOf("optimizer.lrr=1"),
            "optimizer.lrr=1: no field \"lrr\" in optimizer (fields: lr, "
            "beta1, beta2, eps, weight_decay, grad_clip, warmup_steps, "
            "min_lr_ratio)");
  EXPECT_THAT(ErrorOf("stepz=1"),
              ::testing::StartsWith("stepz=1: no field \"stepz\" in the spec "
                                    "(fields: name, model, data, "));
  EXPECT_EQ(ErrorOf("model.mlp.hiden=1"),
            "model.mlp.hiden=1: no field \"hiden\" in model.mlp (fields: "
            "hidden, input_dim, num_classes)");
  EXPECT_THAT(ErrorOn(google::protobuf::BoolValue(), "valu=true"),
              ::testing::StartsWith("valu=true: no field \"valu\" in "
                                    "BoolValue"));
}

TEST(SpecOverrideTest, PathsMustEndAtAScalar) {
  EXPECT_EQ(ErrorOf("model=mlp"),
            "model=mlp: model is a message; set one of its fields (mlp, gpt)");
  EXPECT_EQ(ErrorOf("model.mlp=1"),
            "model.mlp=1: model.mlp is a message; set one of its fields "
            "(hidden, input_dim, num_classes)");
  EXPECT_EQ(ErrorOf("steps.x=1"),
            "steps.x=1: steps is not a message; it has no field \"x\"");
  EXPECT_EQ(ErrorOf("model.mlp.hidden.size=1"),
            "model.mlp.hidden.size=1: model.mlp.hidden is not a message; it "
            "has no field \"size\"");
  EXPECT_EQ(ErrorOn(v1::ListJobsResponse(), "jobs.id=j-1"),
            "jobs.id=j-1: jobs is a list of messages, which an override "
            "cannot set");
}

TEST(SpecOverrideTest, BadValuesForTheType) {
  EXPECT_EQ(ErrorOf("steps=ten"), "steps=ten: not an integer");
  EXPECT_EQ(ErrorOf("steps=1.5"), "steps=1.5: not an integer");
  EXPECT_EQ(ErrorOf("steps="), "steps=: not an integer");
  EXPECT_EQ(ErrorOf("steps=0x10"), "steps=0x10: not an integer");
  EXPECT_EQ(ErrorOf("steps=-"), "steps=-: not an integer");
  EXPECT_EQ(ErrorOf("steps=inf"), "steps=inf: not an integer");
  EXPECT_EQ(ErrorOf("optimizer.lr=abc"), "optimizer.lr=abc: not a number");
  EXPECT_EQ(ErrorOf("optimizer.lr="), "optimizer.lr=: not a number");
  EXPECT_EQ(ErrorOf("optimizer.lr=nan"), "optimizer.lr=nan: not a number");
  EXPECT_EQ(ErrorOf("optimizer.lr=inf"), "optimizer.lr=inf: not a number");
  EXPECT_EQ(ErrorOf("optimizer.lr=0x10"), "optimizer.lr=0x10: not a number");
  EXPECT_EQ(ErrorOf("optimizer.lr=1e-3e"), "optimizer.lr=1e-3e: not a number");
  EXPECT_EQ(ErrorOf("precision=bf16"), "precision=bf16: not one of FP32, BF16");
  EXPECT_EQ(ErrorOf("precision=2"), "precision=2: not one of FP32, BF16");
  EXPECT_EQ(ErrorOf("name=\xFF"), "name=\xFF: not valid UTF-8");
  EXPECT_EQ(ErrorOf("model.mlp.hidden=512,x"),
            "model.mlp.hidden=512,x: item 2 (\"x\"): not an integer");
  EXPECT_EQ(ErrorOf("model.mlp.hidden=512,"),
            "model.mlp.hidden=512,: item 2 (\"\"): not an integer");
  EXPECT_EQ(ErrorOf("model.mlp.hidden=[512,256"),
            "model.mlp.hidden=[512,256: a '[' without its ']'");
  EXPECT_EQ(ErrorOf("model.mlp.hidden=512]"),
            "model.mlp.hidden=512]: a ']' without its '['");
  EXPECT_EQ(ErrorOf("model.mlp.hidden=["),
            "model.mlp.hidden=[: a '[' without its ']'");
  EXPECT_EQ(ErrorOf("model.mlp.hidden=[[1]]"),
            "model.mlp.hidden=[[1]]: item 1 (\"[1]\"): not an integer");
  EXPECT_EQ(ErrorOf("steps=[10]"),
            "steps=[10]: brackets are for a list, and this field takes one "
            "value");
  EXPECT_EQ(ErrorOn(google::protobuf::BoolValue(), "value=yes"),
            "value=yes: not true or false");
  EXPECT_EQ(ErrorOn(google::protobuf::BoolValue(), "value=True"),
            "value=True: not true or false");
}

TEST(SpecOverrideTest, OutOfRange) {
  EXPECT_EQ(ErrorOf("batch.micro_batch=2147483648"),
            "batch.micro_batch=2147483648: out of range: must be in "
            "[-2147483648, 2147483647]");
  EXPECT_EQ(ErrorOf("steps=9223372036854775808"),
            "steps=9223372036854775808: out of range: must be in "
            "[-9223372036854775808, 9223372036854775807]");
  EXPECT_EQ(ErrorOf("steps=1e19"),
            "steps=1e19: out of range: must be in "
            "[-9223372036854775808, 9223372036854775807]");
  EXPECT_EQ(ErrorOf("seed=-1"),
            "seed=-1: out of range: must be in [0, 18446744073709551615]");
  EXPECT_EQ(ErrorOf("seed=18446744073709551616"),
            "seed=18446744073709551616: out of range: must be in "
            "[0, 18446744073709551615]");
  EXPECT_EQ(ErrorOn(google::protobuf::UInt32Value(), "value=4294967296"),
            "value=4294967296: out of range: must be in [0, 4294967295]");
  EXPECT_EQ(ErrorOn(google::protobuf::FloatValue(), "value=1e39"),
            "value=1e39: out of range: must be within +-3.40282e+38");
  EXPECT_EQ(ErrorOf("optimizer.lr=-1e999"),
            "optimizer.lr=-1e999: out of range: must be within "
            "+-1.79769e+308");
}

TEST(SpecOverrideTest, AFailedOverrideChangesNothing) {
  // ErrorOf checks the spec is unchanged; these would have created a
  // message or switched a oneof before failing.
  ErrorOf("model.gpt.n_layer=x");
  ErrorOf("resources.gpus=x");
  ErrorOf("data.tokens.train=\xFF");
  JobSpec empty;
  EXPECT_FALSE(ApplySpecOverride("resources.gpus=x", empty).ok());
  EXPECT_FALSE(empty.has_resources());
}

}  // namespace
}  // namespace trainyard::spec
