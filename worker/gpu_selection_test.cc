// --gpus parsing and CUDA_VISIBLE_DEVICES read as CUDA reads it, over a
// made-up device list (no library involved).
#include "worker/gpu_selection.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const std::vector<NvmlDeviceId> kFour = {
    {0, "GPU-a0a0a0a0-0000-4000-8000-000000000000"},
    {1, "GPU-b1b1b1b1-1111-4111-8111-111111111111"},
    {2, "GPU-b1b2c3d4-2222-4222-8222-222222222222"},
    {3, ""},  // NVML could not read its UUID
};

TEST(ParseGpuSelectionTest, AutoNoneAndLists) {
  EXPECT_EQ(ParseGpuSelection("auto")->mode, GpuSelection::Mode::kAuto);
  EXPECT_EQ(ParseGpuSelection(" AUTO ")->mode, GpuSelection::Mode::kAuto);
  EXPECT_EQ(ParseGpuSelection("none")->mode, GpuSelection::Mode::kNone);
  absl::StatusOr<GpuSelection> list = ParseGpuSelection("0, 2,GPU-b1b1");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->mode, GpuSelection::Mode::kList);
  EXPECT_THAT(list->devices, ElementsAre("0", "2", "GPU-b1b1"));
}

TEST(ParseGpuSelectionTest, BadValuesNameTheFlag) {
  for (const char* bad : {"", "1,", ",1", "-1", "1.5", "all", "GPU-", "x,0",
                          "99999999999", "MIG-abc"}) {
    absl::StatusOr<GpuSelection> s = ParseGpuSelection(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr("--gpus"));
    EXPECT_THAT(s.status().message(), HasSubstr(bad));
  }
}

TEST(ResolveCudaVisibleDevicesTest, IndicesAndUuidsInTheirOrder) {
  VisibleDevices v = ResolveCudaVisibleDevices("2,0", kFour);
  EXPECT_THAT(v.indices, ElementsAre(2, 0));
  EXPECT_THAT(v.ignored, IsEmpty());
  v = ResolveCudaVisibleDevices(
      " GPU-a0a0a0a0-0000-4000-8000-000000000000 , gpu-B1B1", kFour);
  EXPECT_THAT(v.indices, ElementsAre(0, 1));
  EXPECT_THAT(v.ignored, IsEmpty());
}

TEST(ResolveCudaVisibleDevicesTest, EmptyHidesEverything) {
  EXPECT_THAT(ResolveCudaVisibleDevices("", kFour).indices, IsEmpty());
  EXPECT_THAT(ResolveCudaVisibleDevices("  ", kFour).indices, IsEmpty());
}

TEST(ResolveCudaVisibleDevicesTest, TheFirstBadEntryEndsTheList) {
  // Unknown index, negative, ambiguous prefix, repeated, MIG, junk.
  const std::vector<std::pair<std::string, std::vector<int32_t>>> cases = {
      {"1,7,0", {1}},     {"-1", {}},    {"0,GPU-b1b,2", {0}}, {"2,2,1", {2}},
      {"MIG-abcd,0", {}}, {"0,,1", {0}}, {"3,GPU-", {3}},
  };
  for (const auto& [value, want] : cases) {
    const VisibleDevices v = ResolveCudaVisibleDevices(value, kFour);
    EXPECT_EQ(v.indices, want) << value;
    EXPECT_FALSE(v.ignored.empty()) << value;
  }
  EXPECT_THAT(ResolveCudaVisibleDevices("1,7,0", kFour).ignored,
              ElementsAre("7", "0"));
}

TEST(SelectGpusTest, AutoTakesEveryVisibleGpuInIndexOrder) {
  const GpuSelection automatic;
  EXPECT_THAT(*SelectGpus(automatic, std::nullopt, kFour),
              ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(*SelectGpus(automatic, "3,1", kFour), ElementsAre(1, 3));
  EXPECT_THAT(*SelectGpus(automatic, "", kFour), IsEmpty());
  EXPECT_THAT(*SelectGpus(automatic, std::nullopt, {}), IsEmpty());
}

TEST(SelectGpusTest, IgnoredVisibleEntriesAreNoted) {
  std::vector<std::string> notes;
  EXPECT_THAT(*SelectGpus(GpuSelection{}, "1,9,2", kFour, &notes),
              ElementsAre(1));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0], HasSubstr("CUDA_VISIBLE_DEVICES=\"1,9,2\""));
  EXPECT_THAT(notes[0], HasSubstr("ignoring \"9,2\""));
}

TEST(SelectGpusTest, NoneSelectsNothing) {
  GpuSelection none;
  none.mode = GpuSelection::Mode::kNone;
  EXPECT_THAT(*SelectGpus(none, std::nullopt, kFour), IsEmpty());
}

TEST(SelectGpusTest, AListNamesGpusThatMustExistAndBeVisible) {
  GpuSelection list = *ParseGpuSelection("3,GPU-b1b1,0");
  EXPECT_THAT(*SelectGpus(list, std::nullopt, kFour), ElementsAre(0, 1, 3));
  EXPECT_THAT(*SelectGpus(list, "0,1,2,3", kFour), ElementsAre(0, 1, 3));

  auto error = [](const std::string& flag, std::optional<std::string> visible) {
    absl::StatusOr<std::vector<int32_t>> r =
        SelectGpus(*ParseGpuSelection(flag), visible, kFour);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << flag;
    return std::string(r.status().message());
  };
  EXPECT_THAT(error("4", std::nullopt), HasSubstr("\"4\" names no GPU"));
  EXPECT_THAT(error("4", std::nullopt),
              HasSubstr("this machine has 0 (GPU-a0a0"));
  EXPECT_THAT(error("GPU-b1b", std::nullopt), HasSubstr("or more than one"));
  EXPECT_THAT(error("1,GPU-b1b1", std::nullopt),
              HasSubstr("GPU 1 is named twice"));
  EXPECT_THAT(error("0,1", "1"),
              HasSubstr("GPU 0 is hidden by CUDA_VISIBLE_DEVICES=\"1\""));
  absl::StatusOr<std::vector<int32_t>> none_here =
      SelectGpus(list, std::nullopt, {});
  EXPECT_THAT(none_here.status().message(),
              HasSubstr("this machine has no GPU"));
}

TEST(IsGpuUuidTest, OnlyUuidsAsNvmlWritesThem) {
  EXPECT_TRUE(IsGpuUuid("GPU-a0a0a0a0-0000-4000-8000-000000000000"));
  EXPECT_TRUE(IsGpuUuid("GPU-B1B1"));
  for (const char* bad :
       {"", "GPU-", "GPU-a0a0,1", "GPU-a0a0 ", " GPU-a0", "gpu-a0a0",
        "MIG-a0a0", "GPU-xyz", "0", "GPU-a0\n1"}) {
    EXPECT_FALSE(IsGpuUuid(bad)) << bad;
  }
}

const std::map<int32_t, std::string> kUuids = {
    {0, "GPU-a0a0a0a0-0000-4000-8000-000000000000"},
    {1, "GPU-b1b1b1b1-1111-4111-8111-111111111111"},
    {2, "GPU-b1b2c3d4-2222-4222-8222-222222222222"},
    {3, ""},  // NVML could not read it
};

TEST(CudaVisibleDevicesForTest, UuidsInTheOrderGiven) {
  EXPECT_EQ(CudaVisibleDevicesFor({1}, kUuids),
            "GPU-b1b1b1b1-1111-4111-8111-111111111111");
  EXPECT_EQ(CudaVisibleDevicesFor({2, 0}, kUuids),
            "GPU-b1b2c3d4-2222-4222-8222-222222222222,"
            "GPU-a0a0a0a0-0000-4000-8000-000000000000");
  EXPECT_EQ(CudaVisibleDevicesFor({}, kUuids), "");  // hides every GPU
}

TEST(CudaVisibleDevicesForTest, AGpuWithoutAUsableUuidGoesByIndex) {
  EXPECT_EQ(CudaVisibleDevicesFor({3}, kUuids), "3");   // empty UUID
  EXPECT_EQ(CudaVisibleDevicesFor({5}, kUuids), "5");   // none known
  EXPECT_EQ(CudaVisibleDevicesFor({0, 1}, {}), "0,1");  // CPU/fake setups
  EXPECT_EQ(CudaVisibleDevicesFor({1, 0}, {{1, "GPU-a0a0,1"}}), "1,0");
  EXPECT_EQ(CudaVisibleDevicesFor({3, 1}, kUuids),
            "3,GPU-b1b1b1b1-1111-4111-8111-111111111111");
}

// What a job is given reads back, as CUDA reads it, to the GPUs it was
// placed on: a worker nested in a job's environment offers just those.
TEST(CudaVisibleDevicesForTest, ReadsBackToTheSameGpus) {
  for (const std::vector<int32_t>& gpus :
       std::vector<std::vector<int32_t>>{{0}, {2, 0}, {3, 1}, {1, 3, 2, 0}}) {
    const std::string value = CudaVisibleDevicesFor(gpus, kUuids);
    const VisibleDevices v = ResolveCudaVisibleDevices(value, kFour);
    EXPECT_EQ(v.indices, gpus) << value;
    EXPECT_THAT(v.ignored, IsEmpty()) << value;
  }
}

}  // namespace
}  // namespace trainyard::worker
