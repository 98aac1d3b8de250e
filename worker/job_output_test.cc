#include "worker/job_output.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::worker {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> Split(LineSplitter& splitter,
                               const std::vector<std::string>& chunks,
                               bool flush = true) {
  std::vector<std::string> lines;
  auto fn = [&](std::string_view l) { lines.emplace_back(l); };
  for (const std::string& chunk : chunks) splitter.Feed(chunk, fn);
  if (flush) splitter.Flush(fn);
  return lines;
}

TEST(LineSplitterTest, JoinsLinesAcrossChunks) {
  LineSplitter s;
  EXPECT_THAT(Split(s, {"ab", "c\nde", "f\n\ng"}),
              ElementsAre("abc", "def", "", "g"));
}

TEST(LineSplitterTest, StripsCarriageReturn) {
  LineSplitter s;
  EXPECT_THAT(Split(s, {"a\r\nb\r\n"}), ElementsAre("a", "b"));
}

TEST(LineSplitterTest, KeepsPartialLineUntilFlush) {
  LineSplitter s;
  EXPECT_THAT(Split(s, {"one\ntw"}, /*flush=*/false), ElementsAre("one"));
  EXPECT_THAT(Split(s, {"o\n"}, /*flush=*/false), ElementsAre("two"));
  EXPECT_THAT(Split(s, {}), ElementsAre());
}

TEST(LineSplitterTest, CutsOverlongLines) {
  LineSplitter s(4);
  EXPECT_THAT(Split(s, {"abcdefghij\nxy\n"}),
              ElementsAre("abcd", "efgh", "ij", "xy"));
}

TEST(LineSplitterTest, LineOfExactlyMaxLengthIsOneLine) {
  LineSplitter s(4);
  EXPECT_THAT(Split(s, {"ab", "cd", "\nef\n"}), ElementsAre("abcd", "ef"));
}

TEST(TailBufferTest, KeepsLastLines) {
  TailBuffer tail(3, 1000);
  for (int i = 0; i < 10; ++i) tail.AddLine("line " + std::to_string(i));
  EXPECT_EQ(tail.Text(), "line 7\nline 8\nline 9");
}

TEST(TailBufferTest, KeepsAboutMaxBytes) {
  TailBuffer tail(100, 10);
  tail.AddLine("aaaa");
  tail.AddLine("bbbb");
  tail.AddLine("cccc");
  EXPECT_EQ(tail.Text(), "bbbb\ncccc");
}

TEST(TailBufferTest, CutsOneHugeLineToItsEnd) {
  TailBuffer tail(20, 8);
  tail.AddLine("0123456789abcdef");
  EXPECT_EQ(tail.Text(), "89abcdef");
  EXPECT_TRUE(TailBuffer().empty());
}

TEST(ParseTrainerEventLineTest, ParsesEvents) {
  auto progress = ParseTrainerEventLine(
      R"({"progress":{"step":"5","totalSteps":"10","loss":0.25}})");
  ASSERT_TRUE(progress.has_value());
  EXPECT_EQ(progress->progress().step(), 5);
  EXPECT_EQ(progress->progress().total_steps(), 10);
  EXPECT_DOUBLE_EQ(progress->progress().loss(), 0.25);

  auto started = ParseTrainerEventLine("  {\"started\":{}}  ");
  ASSERT_TRUE(started.has_value());
  EXPECT_TRUE(started->has_started());

  auto snake = ParseTrainerEventLine(R"({"finished":{"eval_accuracy":0.9}})");
  ASSERT_TRUE(snake.has_value());
  EXPECT_DOUBLE_EQ(snake->finished().eval_accuracy(), 0.9);
}

TEST(ParseTrainerEventLineTest, IgnoresUnknownFieldsInsideAnEvent) {
  auto event = ParseTrainerEventLine(R"({"progress":{"step":3,"newField":1}})");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->progress().step(), 3);
}

TEST(ParseTrainerEventLineTest, RejectsWhatIsNotAnEvent) {
  EXPECT_FALSE(ParseTrainerEventLine("").has_value());
  EXPECT_FALSE(ParseTrainerEventLine("step 5 loss 0.3").has_value());
  EXPECT_FALSE(ParseTrainerEventLine("{}").has_value());
  EXPECT_FALSE(ParseTrainerEventLine(R"({"other":1})").has_value());
  EXPECT_FALSE(ParseTrainerEventLine(R"({"progress":)").has_value());
  EXPECT_FALSE(
      ParseTrainerEventLine(R"({"progress":{"step":"x"}})").has_value());
  EXPECT_FALSE(ParseTrainerEventLine("[1,2]").has_value());
}

}  // namespace
}  // namespace trainyard::worker
