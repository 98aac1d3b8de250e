// JobService semantics that need no training: idempotent submission by
// request_id and pagination. No worker is attached, so jobs stay QUEUED.
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/harness.h"

namespace trainyard::itest {
namespace {
namespace v1 = trainyard::v1;

class JobsApiTest : public ClusterTest {};

// How often `id` appears in `text` as a whole word: not as part of a longer
// id ("job-1" in "job-10") nor of a path (a checkpoint dir ends in the id).
size_t Occurrences(const std::string& text, const std::string& id) {
  auto part_of_word = [](char c) {
    return absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '/' ||
           c == '.';
  };
  size_t n = 0;
  for (size_t pos = text.find(id); pos != std::string::npos;
       pos = text.find(id, pos + 1)) {
    bool starts = pos == 0 || !part_of_word(text[pos - 1]);
    size_t end = pos + id.size();
    bool ends = end == text.size() || !part_of_word(text[end]);
    if (starts && ends) ++n;
  }
  return n;
}

TEST_F(JobsApiTest, ResubmitWithSameRequestIdReturnsTheSameJob) {
  YARD_ASSERT_OK(StartServer());
  v1::JobSpec spec = MnistSpec{.name = "idempotent"}.ToProto();

  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse first, Submit(spec, "req-1"));
  EXPECT_FALSE(first.already_existed());
  EXPECT_EQ(first.job().request_id(), "req-1");
  EXPECT_EQ(first.job().state(), v1::QUEUED);
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse again, Submit(spec, "req-1"));
  EXPECT_TRUE(again.already_existed());
  EXPECT_EQ(again.job().id(), first.job().id());
  YARD_ASSIGN_OR_FAIL(std::vector<v1::Job> all, ListAllJobs(jobs()));
  ASSERT_EQ(all.size(), 1u) << "a retried submit must not create a job";

  // A different request_id (and none at all) does create jobs.
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse other, Submit(spec, "req-2"));
  EXPECT_NE(other.job().id(), first.job().id());
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse plain1, Submit(spec));
  YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse plain2, Submit(spec));
  EXPECT_NE(plain1.job().id(), plain2.job().id());
  YARD_ASSIGN_OR_FAIL(all, ListAllJobs(jobs()));
  EXPECT_EQ(all.size(), 4u);

  // The CLI's --request-id.
  std::string path = WriteSpec("idem.yaml", MnistSpec{.name = "cli"}.ToYaml());
  CommandResult c1 = Yard({"submit", path, "--request-id", "cli-req"});
  ASSERT_EQ(c1.exit_code(), YardExit::kOk) << c1.DebugString();
  YARD_ASSIGN_OR_FAIL(all, ListAllJobs(jobs()));
  ASSERT_EQ(all.size(), 5u);
  const std::string cli_id = all.back().id();
  EXPECT_EQ(all.back().request_id(), "cli-req");
  EXPECT_NE(c1.out.find(cli_id), std::string::npos) << c1.DebugString();
  CommandResult c2 = Yard({"submit", path, "--request-id", "cli-req"});
  ASSERT_EQ(c2.exit_code(), YardExit::kOk) << c2.DebugString();
  EXPECT_NE(c2.out.find(cli_id), std::string::npos) << c2.DebugString();
  YARD_ASSIGN_OR_FAIL(all, ListAllJobs(jobs()));
  EXPECT_EQ(all.size(), 5u);
}

TEST_F(JobsApiTest, PaginationVisitsFiftyJobsOnceInOrder) {
  YARD_ASSERT_OK(StartServer());
  constexpr int kJobs = 50;
  std::vector<std::string> ids;
  for (int i = 0; i < kJobs; ++i) {
    MnistSpec spec{.name = absl::StrCat("page-", i)};
    YARD_ASSIGN_OR_FAIL(v1::SubmitJobResponse r, Submit(spec.ToProto()));
    ids.push_back(r.job().id());
  }
  ASSERT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), ids.size())
      << "job ids must be unique";

  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    auto ctx = ContextWithTimeout();
    v1::ListJobsRequest req;
    req.set_page_size(7);
    req.set_page_token(token);
    v1::ListJobsResponse resp;
    grpc::Status s = jobs().ListJobs(ctx.get(), req, &resp);
    ASSERT_TRUE(s.ok()) << CodeName(s.error_code()) << " " << s.error_message();
    ASSERT_LE(resp.jobs_size(), 7);
    ++pages;
    ASSERT_LE(pages, 9) << "page tokens do not converge";
    if (!resp.next_page_token().empty()) {
      EXPECT_EQ(resp.jobs_size(), 7) << "only the last page may be short";
    }
    for (const auto& j : resp.jobs()) seen.push_back(j.id());
    token = resp.next_page_token();
  } while (!token.empty());
  EXPECT_EQ(seen, ids) << "each job exactly once, oldest first";
  EXPECT_GE(pages, 8);

  // The state filter.
  auto ctx = ContextWithTimeout();
  v1::ListJobsRequest queued;
  queued.set_page_size(500);
  queued.add_states(v1::QUEUED);
  v1::ListJobsResponse resp;
  ASSERT_TRUE(jobs().ListJobs(ctx.get(), queued, &resp).ok());
  EXPECT_EQ(resp.jobs_size(), kJobs);
  auto ctx2 = ContextWithTimeout();
  v1::ListJobsRequest succeeded;
  succeeded.add_states(v1::SUCCEEDED);
  ASSERT_TRUE(jobs().ListJobs(ctx2.get(), succeeded, &resp).ok());
  EXPECT_EQ(resp.jobs_size(), 0);

  // `yard ls --all` shows every job once, in either output format.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"ls", "--all"},
        std::vector<std::string>{"-o", "json", "ls", "--all"}}) {
    CommandResult ls = Yard(args);
    ASSERT_EQ(ls.exit_code(), YardExit::kOk) << ls.DebugString();
    for (const auto& id : ids) {
      EXPECT_EQ(Occurrences(ls.out, id), 1u)
          << "job " << id << " in `yard " << ls.command_line << "`:\n"
          << ls.out;
    }
  }
}

}  // namespace
}  // namespace trainyard::itest
