#include "server/job_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "common/test_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Optional;
using ::testing::UnorderedElementsAre;

class JobStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<JobStore> Open(JobStoreOptions options = {}) {
    options.path = dir_.File("trainyard.db");
    options.clock = &clock_;
    auto store = JobStore::Open(std::move(options));
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  // Turns the store file back into what a server of schema `version` (1 to
  // 7) wrote: `extra` SQL first, then without the tables and columns added
  // after `version`.
  void AsWrittenBy(int version, const std::string& extra) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(dir_.File("trainyard.db").c_str(), &db), SQLITE_OK);
    const std::string sql = absl::StrCat(
        extra, "DROP TABLE halving_entries; ",
        version < 7 ? "DROP TABLE metric_points; DROP TABLE metric_series; "
                    : "",
        version < 6 ? "DROP TABLE known_workers; " : "",
        version < 5 ? "DROP TABLE attempt_usage; " : "",
        version < 4 ? "ALTER TABLE jobs DROP COLUMN name; " : "",
        version < 3
            ? "DROP INDEX jobs_by_end; ALTER TABLE jobs DROP COLUMN end_ms; "
            : "",
        "PRAGMA user_version=", version);
    char* error = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error),
              SQLITE_OK)
        << (error != nullptr ? error : "");
    sqlite3_free(error);
    sqlite3_close(db);
  }

  static v1::Job NewJob(std::string request_id = "",
                        std::string tenant = "default") {
    v1::Job job;
    job.set_tenant(std::move(tenant));
    job.set_request_id(std::move(request_id));
    job.mutable_spec()->set_steps(100);
    return job;
  }

  static v1::Job Named(std::string name, std::string tenant = "default") {
    v1::Job job = NewJob("", std::move(tenant));
    job.set_name(name);
    job.mutable_spec()->set_name(std::move(name));
    return job;
  }

  static std::vector<std::string> IdsOf(const JobPage& page) {
    std::vector<std::string> ids;
    for (const v1::Job& job : page.jobs) ids.push_back(job.id());
    return ids;
  }

  static v1::JobEvent ProgressEvent(int64_t step) {
    v1::JobEvent e;
    e.mutable_trainer()->mutable_progress()->set_step(step);
    return e;
  }

  // Adds one trainer event per step to job `id`.
  static void AddProgress(JobStore& store, const std::string& id, int from,
                          int to) {
    for (int step = from; step <= to; ++step) {
      auto r = store.UpdateJob(id, Durability::kTelemetry,
                               [&](JobRecord& rec, auto& events) {
                                 rec.job.mutable_progress()->set_step(step);
                                 events.push_back(ProgressEvent(step));
                                 return true;
                               });
      ASSERT_TRUE(r.ok()) << r.status();
    }
  }

  TestDir dir_;
  FakeClock clock_;
};

JobStoreOptions AtPath(std::string path) {
  JobStoreOptions o;
  o.path = std::move(path);
  return o;
}

TEST_F(JobStoreTest, CreatesQueuedJobsWithSortableIdsAndFirstEvent) {
  auto store = Open();
  auto a = store->CreateJob(NewJob());
  auto b = store->CreateJob(NewJob());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->record.job.id(), "j-000001");
  EXPECT_EQ(b->record.job.id(), "j-000002");
  EXPECT_EQ(a->record.job.state(), v1::QUEUED);
  EXPECT_FALSE(a->already_existed);
  auto events = store->ReadEvents("j-000001", 0, 100);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].sequence(), 1);
  EXPECT_EQ((*events)[0].job_id(), "j-000001");
  EXPECT_EQ((*events)[0].state_change().to(), v1::QUEUED);
  auto got = store->GetJob("j-000002");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->job.spec().steps(), 100);
  EXPECT_EQ(got->last_sequence, 1);
}

TEST_F(JobStoreTest, StatesOfReadsManyJobsAndLeavesUnknownOnesOut) {
  auto store = Open();
  std::vector<std::string> ids;
  for (int i = 0; i < 600; ++i) {  // more than one query's worth
    auto created = store->CreateJob(NewJob());
    ASSERT_TRUE(created.ok()) << created.status();
    ids.push_back(created->record.job.id());
  }
  auto done = store->UpdateJob(ids[300], Durability::kTransition,
                               [](JobRecord& r, auto&) {
                                 r.job.set_state(v1::SUCCEEDED);
                                 return true;
                               });
  ASSERT_TRUE(done.ok()) << done.status();
  ids.push_back("j-999999");
  ids.push_back(ids[300]);  // asked twice
  auto states = store->StatesOf(ids);
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ(states->size(), 600u);
  EXPECT_EQ(states->at(ids[0]), v1::QUEUED);
  EXPECT_EQ(states->at(ids[599]), v1::QUEUED);
  EXPECT_EQ(states->at(ids[300]), v1::SUCCEEDED);
  EXPECT_FALSE(states->contains("j-999999"));
  EXPECT_TRUE(store->StatesOf({})->empty());
}

TEST_F(JobStoreTest, UnknownJobIsNotFoundNamingTheId) {
  auto store = Open();
  auto got = store->GetJob("j-424242");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(got.status().message(), HasSubstr("j-424242"));
  EXPECT_EQ(store->ReadEvents("nope", 0, 1).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->AppendLog("nope", "x").code(), absl::StatusCode::kNotFound);
}

TEST_F(JobStoreTest, CreateIsIdempotentPerTenantAndRequestId) {
  auto store = Open();
  auto first = store->CreateJob(NewJob("req-1"));
  auto again = store->CreateJob(NewJob("req-1"));
  auto other_tenant = store->CreateJob(NewJob("req-1", "other"));
  ASSERT_TRUE(first.ok() && again.ok() && other_tenant.ok());
  EXPECT_TRUE(again->already_existed);
  EXPECT_EQ(again->record.job.id(), first->record.job.id());
  EXPECT_FALSE(other_tenant->already_existed);
  EXPECT_NE(other_tenant->record.job.id(), first->record.job.id());
}

TEST_F(JobStoreTest, ListsOldestFirstInPages) {
  auto store = Open();
  for (int i = 0; i < 120; ++i) ASSERT_TRUE(store->CreateJob(NewJob()).ok());
  std::vector<std::string> seen;
  ListJobsQuery q;  // page_size 0 = 50
  int pages = 0;
  do {
    auto page = store->ListJobs(q);
    ASSERT_TRUE(page.ok()) << page.status();
    for (const auto& j : page->jobs) seen.push_back(j.id());
    q.page_token = page->next_page_token;
    ++pages;
  } while (!q.page_token.empty());
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(seen.size(), 120u);
  EXPECT_EQ(seen.front(), "j-000001");
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), 120u);

  ListJobsQuery big;
  big.page_size = 100000;  // capped at 500
  auto all = store->ListJobs(big);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->jobs.size(), 120u);
  EXPECT_TRUE(all->next_page_token.empty());
}

// Large specs (up to 1 MiB each) end a page early so that a response fits
// gRPC's default 4 MiB, with a token to the rest; every job is still seen.
TEST_F(JobStoreTest, APageEndsBeforeItsJobsPassTheByteBudget) {
  auto store = Open();
  for (int i = 0; i < 7; ++i) {
    v1::Job job = NewJob();
    job.mutable_spec()->mutable_data()->mutable_text()->set_train(
        std::string(900 << 10, 'a'));  // ~900 KiB each
    ASSERT_TRUE(store->CreateJob(std::move(job)).ok());
  }
  ListJobsQuery q;
  q.page_size = 500;
  std::vector<size_t> sizes;
  size_t seen = 0;
  do {
    auto page = store->ListJobs(q);
    ASSERT_TRUE(page.ok()) << page.status();
    size_t bytes = 0;
    for (const v1::Job& j : page->jobs) bytes += j.ByteSizeLong();
    EXPECT_LE(bytes, static_cast<size_t>(JobStore::kMaxPageBytes));
    sizes.push_back(page->jobs.size());
    seen += page->jobs.size();
    q.page_token = page->next_page_token;
  } while (!q.page_token.empty());
  EXPECT_EQ(seen, 7u);
  EXPECT_EQ(sizes, (std::vector<size_t>{3, 3, 1}));
}

TEST_F(JobStoreTest, ListFiltersByStateAndTenant) {
  auto store = Open();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(store->CreateJob(NewJob()).ok());
  ASSERT_TRUE(store->CreateJob(NewJob("", "other")).ok());
  ASSERT_TRUE(store
                  ->UpdateJob("j-000002", Durability::kTransition,
                              [](JobRecord& r, auto&) {
                                r.job.set_state(v1::CANCELLED);
                                return true;
                              })
                  .ok());
  ListJobsQuery q;
  q.states = {v1::CANCELLED};
  auto cancelled = store->ListJobs(q);
  ASSERT_TRUE(cancelled.ok());
  ASSERT_EQ(cancelled->jobs.size(), 1u);
  EXPECT_EQ(cancelled->jobs[0].id(), "j-000002");
  q.states = {};
  q.tenant = "other";
  auto other = store->ListJobs(q);
  ASSERT_TRUE(other.ok());
  ASSERT_EQ(other->jobs.size(), 1u);
  EXPECT_EQ(other->jobs[0].id(), "j-000005");
  auto counts = store->CountJobsByState();
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ((*counts)[v1::QUEUED], 4);
  EXPECT_EQ((*counts)[v1::CANCELLED], 1);
}

// The name filter is a plain, case-sensitive substring match (no LIKE
// wildcards), combined with the others, and pages keep to it.
TEST_F(JobStoreTest, ListFiltersByNameContaining) {
  auto store = Open();
  for (const char* name :
       {"mlp optimizer.lr=0.001", "gpt small", "mlp optimizer.lr=0.003",
        "MLP upper", "100%_mlp", ""}) {
    ASSERT_TRUE(store->CreateJob(Named(name)).ok());
  }
  ASSERT_TRUE(store->CreateJob(Named("mlp other tenant", "other")).ok());
  ListJobsQuery q;
  q.name_contains = "mlp";
  EXPECT_THAT(IdsOf(*store->ListJobs(q)),
              ElementsAre("j-000001", "j-000003", "j-000005", "j-000007"));
  q.tenant = "default";
  q.name_contains = "lr=0.003";
  EXPECT_THAT(IdsOf(*store->ListJobs(q)), ElementsAre("j-000003"));
  q.name_contains = "%";  // not a wildcard
  EXPECT_THAT(IdsOf(*store->ListJobs(q)), ElementsAre("j-000005"));
  q.name_contains = "_";
  EXPECT_THAT(IdsOf(*store->ListJobs(q)), ElementsAre("j-000005"));
  q.name_contains = "nothing like it";
  EXPECT_TRUE(store->ListJobs(q)->jobs.empty());

  q.name_contains = "mlp";
  q.page_size = 1;
  std::vector<std::string> paged;
  do {
    auto page = store->ListJobs(q);
    ASSERT_TRUE(page.ok()) << page.status();
    for (const std::string& id : IdsOf(*page)) paged.push_back(id);
    q.page_token = page->next_page_token;
  } while (!q.page_token.empty());
  EXPECT_THAT(paged, ElementsAre("j-000001", "j-000003", "j-000005"));

  q.page_token = store->ListJobs(q)->next_page_token;
  ASSERT_FALSE(q.page_token.empty());
  q.name_contains = "gpt";  // a token must be used with the same filters
  auto mismatched = store->ListJobs(q);
  EXPECT_EQ(mismatched.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatched.status().message(), HasSubstr("name"));
}

TEST_F(JobStoreTest, BadPageTokensAndSizesAreInvalidArgument) {
  auto store = Open();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(store->CreateJob(NewJob()).ok());
  ListJobsQuery q;
  q.page_token = "garbage!";
  EXPECT_EQ(store->ListJobs(q).status().code(),
            absl::StatusCode::kInvalidArgument);
  q.page_token = "djE6eHl6OnF1ZXVl";  // base64 of something not ours
  EXPECT_THAT(store->ListJobs(q).status().message(), HasSubstr("page_token"));
  q.page_token = "";
  q.page_size = 1;
  auto first = store->ListJobs(q);
  ASSERT_TRUE(first.ok());
  ASSERT_FALSE(first->next_page_token.empty());
  q.page_token = first->next_page_token;
  q.states = {v1::RUNNING};  // a token must be used with the same filters
  EXPECT_EQ(store->ListJobs(q).status().code(),
            absl::StatusCode::kInvalidArgument);
  ListJobsQuery negative;
  negative.page_size = -1;
  EXPECT_EQ(store->ListJobs(negative).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(JobStoreTest, UpdateAppendsNumberedEventsOrLeavesJobAlone) {
  auto store = Open();
  ASSERT_TRUE(store->CreateJob(NewJob()).ok());
  auto updated = store->UpdateJob(
      "j-000001", Durability::kTransition, [](JobRecord& r, auto& events) {
        r.job.set_state(v1::SCHEDULED);
        r.gpu_indices = {0, 3};
        r.cancel_reason = "user asked";
        events.emplace_back().mutable_state_change()->set_to(v1::SCHEDULED);
        events.emplace_back().mutable_state_change()->set_to(v1::RUNNING);
        return true;
      });
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ(updated->last_sequence, 3);
  auto got = store->GetJob("j-000001");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->gpu_indices, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(got->cancel_reason, "user asked");
  EXPECT_EQ(got->job.state(), v1::SCHEDULED);

  auto unchanged = store->UpdateJob("j-000001", Durability::kTransition,
                                    [](JobRecord& r, auto& events) {
                                      r.job.set_state(v1::FAILED);
                                      events.emplace_back();
                                      return false;
                                    });
  ASSERT_TRUE(unchanged.ok());
  EXPECT_EQ(unchanged->job.state(), v1::SCHEDULED);
  auto failed = store->UpdateJob(
      "j-000001", Durability::kTransition,
      [](JobRecord& r, auto&) -> absl::StatusOr<bool> {
        r.job.set_state(v1::FAILED);
        return absl::FailedPreconditionError("no");
      });
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kFailedPrecondition);
  auto renamed = store->UpdateJob("j-000001", Durability::kTransition,
                                  [](JobRecord& r, auto&) {
                                    r.job.set_id("j-999999");
                                    return true;
                                  });
  EXPECT_EQ(renamed.status().code(), absl::StatusCode::kInternal);
  auto after = store->GetJob("j-000001");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->job.state(), v1::SCHEDULED);
  EXPECT_EQ(after->last_sequence, 3);
}

TEST_F(JobStoreTest, PrunesOldTrainerEventsAndKeepsStateChanges) {
  JobStoreOptions o;
  o.trainer_events_kept = 3;
  auto store = Open(o);
  ASSERT_TRUE(store->CreateJob(NewJob()).ok());  // event 1: QUEUED
  AddProgress(*store, "j-000001", 1, 10);         // events 2..11
  auto all = store->ReadEvents("j-000001", 0, 100);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 4u);  // the state change and the last 3 progress
  EXPECT_TRUE((*all)[0].has_state_change());
  EXPECT_EQ((*all)[1].sequence(), 9);
  EXPECT_EQ((*all)[3].trainer().progress().step(), 10);

  auto pruned = store->ReadEvents("j-000001", 2, 100);
  EXPECT_EQ(pruned.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(pruned.status().message(), HasSubstr("pruned"));
  auto resume = store->ReadEvents("j-000001", 8, 100);
  ASSERT_TRUE(resume.ok()) << resume.status();
  EXPECT_EQ(resume->size(), 3u);
  auto limited = store->ReadEvents("j-000001", 8, 2);
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(limited->size(), 2u);
  EXPECT_TRUE(store->ReadEvents("j-000001", 11, 100)->empty());
  EXPECT_EQ(store->ReadEvents("j-000001", 12, 100).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(store->ReadEvents("j-000001", -1, 100).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(JobStoreTest, LogsAppendReadAndKeepTheTail) {
  JobStoreOptions o;
  o.log_bytes_kept = 10;
  auto store = Open(o);
  ASSERT_TRUE(store->CreateJob(NewJob()).ok());
  ASSERT_TRUE(store->AppendLog("j-000001", "hello ").ok());
  ASSERT_TRUE(store->AppendLog("j-000001", "world").ok());
  auto read = store->ReadLog("j-000001", 0, 1 << 20);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->offset, 0);
  EXPECT_EQ(read->data, "hello world");  // the first chunk still straddles
  EXPECT_EQ(read->end, 11);
  auto mid = store->ReadLog("j-000001", 3, 4);
  ASSERT_TRUE(mid.ok());
  EXPECT_EQ(mid->data, "lo w");
  ASSERT_TRUE(store->AppendLog("j-000001", "!!!!!").ok());  // "hello " drops
  auto tail = store->ReadLog("j-000001", 0, 1 << 20);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->offset, 6);
  EXPECT_EQ(tail->data, "world!!!!!");
  ASSERT_TRUE(store->AppendLog("j-000001", "0123456789abcdef").ok());
  auto big = store->ReadLog("j-000001", 0, 1 << 20);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->data, "6789abcdef");
  EXPECT_EQ(big->offset, 22);
  EXPECT_EQ(big->end, 32);
  auto at_end = store->ReadLog("j-000001", 32, 100);
  ASSERT_TRUE(at_end.ok());
  EXPECT_TRUE(at_end->data.empty());
  EXPECT_EQ(store->ReadLog("j-000001", 33, 100).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(store->ReadLog("j-000001", -5, 100).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(JobStoreTest, DeleteTakesTheJobItsEventsAndLogAndNothingElse) {
  auto store = Open();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(store->CreateJob(NewJob()).ok());
  AddProgress(*store, "j-000002", 1, 5);
  ASSERT_TRUE(store->AppendLog("j-000002", "hello\n").ok());
  ASSERT_TRUE(store->AppendLog("j-000003", "neighbour\n").ok());

  // A failing check aborts: the job stays whole.
  absl::Status refused = store->DeleteJob("j-000002", [](const JobRecord&) {
    return absl::FailedPreconditionError("still running");
  });
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store->GetJob("j-000002").ok());
  ASSERT_EQ(store->ReadEvents("j-000002", 0, 100)->size(), 6u);

  const int64_t seq = store->GetJob("j-000002")->create_seq;
  std::string checked;
  ASSERT_TRUE(store
                  ->DeleteJob("j-000002",
                              [&](const JobRecord& r) {
                                checked = r.job.id();
                                return absl::OkStatus();
                              })
                  .ok());
  EXPECT_EQ(checked, "j-000002");
  EXPECT_EQ(store->GetJob("j-000002").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->ReadEvents("j-000002", 0, 100).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->ReadLog("j-000002", 0, 100).status().code(),
            absl::StatusCode::kNotFound);
  // Its neighbours keep everything, and its number is not handed out again.
  EXPECT_EQ(store->ReadLog("j-000003", 0, 100)->data, "neighbour\n");
  EXPECT_EQ(store->ReadEvents("j-000001", 0, 100)->size(), 1u);
  EXPECT_EQ(store->CreateJob(NewJob())->record.job.id(), "j-000004");
  auto counts = store->CountJobsByState();
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ((*counts)[v1::QUEUED], 3);
  // No row of it is left behind.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir_.File("trainyard.db").c_str(), &db), SQLITE_OK);
  for (const std::string& sql :
       {absl::StrCat("SELECT COUNT(*) FROM events WHERE job_seq = ", seq),
        absl::StrCat("SELECT COUNT(*) FROM logs WHERE job_seq = ", seq),
        absl::StrCat("SELECT COUNT(*) FROM jobs WHERE create_seq = ", seq)}) {
    int rows = -1;
    char* error = nullptr;
    ASSERT_EQ(sqlite3_exec(
                  db, sql.c_str(),
                  [](void* out, int, char** values, char**) {
                    *static_cast<int*>(out) = std::atoi(values[0]);
                    return 0;
                  },
                  &rows, &error),
              SQLITE_OK)
        << error;
    EXPECT_EQ(rows, 0) << sql;
  }
  sqlite3_close(db);

  absl::Status again = store->DeleteJob(
      "j-000002", [](const JobRecord&) { return absl::OkStatus(); });
  EXPECT_EQ(again.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(again.message(), HasSubstr("j-000002"));
}

TEST_F(JobStoreTest, FailedWriteReturnsErrorAndLeavesStoreConsistent) {
  bool fail = false;
  JobStoreOptions o;
  o.fault_injector = [&](std::string_view op) {
    return fail ? absl::UnavailableError(
                      absl::StrCat("injected: ", std::string(op)))
                : absl::OkStatus();
  };
  auto store = Open(o);
  ASSERT_TRUE(store->CreateJob(NewJob()).ok());
  fail = true;
  auto created = store->CreateJob(NewJob("r"));
  EXPECT_EQ(created.status().code(), absl::StatusCode::kUnavailable);
  auto updated = store->UpdateJob("j-000001", Durability::kTransition,
                                  [](JobRecord& r, auto& events) {
                                    r.job.set_state(v1::SCHEDULED);
                                    events.emplace_back();
                                    return true;
                                  });
  EXPECT_FALSE(updated.ok());
  EXPECT_FALSE(store->AppendLog("j-000001", "lost").ok());
  fail = false;
  // Nothing of the failed writes is visible, and the id was not consumed.
  auto job = store->GetJob("j-000001");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->job.state(), v1::QUEUED);
  EXPECT_EQ(job->last_sequence, 1);
  EXPECT_EQ(store->ReadEvents("j-000001", 0, 10)->size(), 1u);
  EXPECT_EQ(store->ReadLog("j-000001", 0, 10)->end, 0);
  auto next = store->CreateJob(NewJob("r"));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->record.job.id(), "j-000002");
  EXPECT_FALSE(next->already_existed);
}

TEST_F(JobStoreTest, EverythingSurvivesAProcessThatDiesWithoutClosing) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    JobStoreOptions options;
    options.path = dir_.File("trainyard.db");
    auto store = JobStore::Open(options);
    if (!store.ok()) _exit(10);
    for (int i = 0; i < 3; ++i) {
      if (!(*store)->CreateJob(NewJob(absl::StrCat("r", i))).ok()) _exit(11);
    }
    if (!(*store)->AppendLog("j-000002", "log bytes").ok()) _exit(12);
    auto r = (*store)->UpdateJob("j-000003", Durability::kTelemetry,
                                 [](JobRecord& rec, auto& events) {
                                   events.push_back(ProgressEvent(7));
                                   rec.job.mutable_progress()->set_step(7);
                                   return true;
                                 });
    if (!r.ok()) _exit(13);
    _exit(0);  // no destructors: the connection is never closed
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);

  auto store = Open();
  auto page = store->ListJobs({});
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->jobs.size(), 3u);
  EXPECT_EQ(store->ReadLog("j-000002", 0, 100)->data, "log bytes");
  EXPECT_EQ(store->GetJob("j-000003")->job.progress().step(), 7);
  EXPECT_EQ(store->ReadEvents("j-000003", 0, 10)->size(), 2u);
  EXPECT_TRUE(store->CreateJob(NewJob("r1"))->already_existed);
  EXPECT_EQ(store->CreateJob(NewJob())->record.job.id(), "j-000004");
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_F(JobStoreTest, RefusesAFileThatIsNotADatabase) {
  const std::string path = dir_.File("trainyard.db");
  std::ofstream(path) << "these are somebody's notes, not a database\n";
  auto store = JobStore::Open(AtPath(path));
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("not a Trainyard job store"));
  EXPECT_EQ(ReadFile(path), "these are somebody's notes, not a database\n");
}

TEST_F(JobStoreTest, RefusesAForeignOrNewerSchemaWithoutTouchingIt) {
  const std::string path = dir_.File("trainyard.db");
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE invoices(x); INSERT INTO "
                           "invoices VALUES (42);", nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  const std::string before = ReadFile(path);
  auto foreign = JobStore::Open(AtPath(path));
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(foreign.status().message(), HasSubstr("refusing"));
  EXPECT_EQ(ReadFile(path), before);

  const std::string ours = dir_.File("newer.db");
  ASSERT_TRUE(JobStore::Open(AtPath(ours)).ok());
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(ours.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(
        sqlite3_exec(db, "PRAGMA user_version=9", nullptr, nullptr, nullptr),
        SQLITE_OK);
    sqlite3_close(db);
  }
  auto newer = JobStore::Open(AtPath(ours));
  EXPECT_EQ(newer.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(newer.status().message(), HasSubstr("schema version 9"));
}

// The server decides, before anything is written, whether it may create or
// upgrade the store; refused, the file is as it was (a missing one is not
// left behind).
TEST_F(JobStoreTest, ARefusalBeforeTheFirstWriteLeavesTheFileAsItWas) {
  const std::string path = dir_.File("trainyard.db");
  std::vector<JobStoreFound> seen;
  auto refused = [&] {
    JobStoreOptions o = AtPath(path);
    o.before_write = [&](const JobStoreFound& found) {
      seen.push_back(found);
      return absl::FailedPreconditionError("not now");
    };
    return JobStore::Open(std::move(o)).status();
  };
  EXPECT_EQ(refused().message(), "not now");
  EXPECT_FALSE(std::filesystem::exists(path));
  std::ofstream{path};  // 0 bytes
  EXPECT_EQ(refused().message(), "not now");
  EXPECT_EQ(ReadFile(path), "");
  std::filesystem::remove(path);
  ASSERT_NE(Open(), nullptr);
  const std::string current = ReadFile(path);
  EXPECT_EQ(refused().message(), "not now");
  EXPECT_EQ(ReadFile(path), current);
  AsWrittenBy(3, "");
  const std::string older = ReadFile(path);
  EXPECT_EQ(refused().message(), "not now");
  EXPECT_EQ(ReadFile(path), older);
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_TRUE(seen[0].is_new);
  EXPECT_TRUE(seen[1].is_new);
  EXPECT_FALSE(seen[2].is_new);
  EXPECT_EQ(seen[2].version, JobStore::kSchemaVersion);
  EXPECT_EQ(seen[3].version, 3);
}

// An upgrade that cannot go through (a write fails, or a job record cannot
// be read) leaves the file byte for byte as it was: its version and its
// journal mode (here the rollback journal a copy may have), so an older
// server still opens it.
TEST_F(JobStoreTest, AFailedUpgradeLeavesTheFileAsItWas) {
  {
    auto store = Open();
    ASSERT_TRUE(store->CreateJob(Named("a")).ok());
    ASSERT_TRUE(store->CreateJob(Named("b")).ok());
  }
  AsWrittenBy(4, "PRAGMA journal_mode=DELETE; ");
  const std::string path = dir_.File("trainyard.db");
  const std::string before = ReadFile(path);
  JobStoreOptions failing = AtPath(path);
  failing.fault_injector = [](std::string_view op) {
    return op == "init" ? absl::UnavailableError("injected: disk on fire")
                        : absl::OkStatus();
  };
  auto failed = JobStore::Open(std::move(failing));
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ReadFile(path), before);

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "UPDATE jobs SET job = x'ffffffff' WHERE id = "
                         "'j-000002'",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  const std::string unreadable = ReadFile(path);
  auto refused = JobStore::Open(AtPath(path));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("cannot upgrade the job store from schema version 4"));
  EXPECT_THAT(refused.status().message(), HasSubstr("job row 2"));
  EXPECT_THAT(refused.status().message(), HasSubstr("not modified"));
  EXPECT_EQ(ReadFile(path), unreadable);
}

// Jobs are read with their checkpoint paths under the root the store is
// opened with, whatever root they were written under (the state dir
// moved); an update writes the current path back.
TEST_F(JobStoreTest, JobsAreReadWithTheirCheckpointsUnderTheCurrentRoot) {
  std::string id;
  {
    auto store = Open();
    id = store->CreateJob(NewJob("r"))->record.job.id();
    ASSERT_TRUE(store
                    ->UpdateJob(id, Durability::kTransition,
                                [&](JobRecord& r, auto&) {
                                  r.job.set_checkpoint_dir("/old/ckpt/" + id);
                                  r.job.mutable_last_checkpoint()->set_path(
                                      "/old/ckpt/" + id + "/step-00000010");
                                  return true;
                                })
                    .ok());
    EXPECT_EQ(store->GetJob(id)->job.checkpoint_dir(), "/old/ckpt/" + id);
  }
  JobStoreOptions o;
  o.checkpoint_root = "/new/ckpt";
  auto store = Open(o);
  const std::string now = "/new/ckpt/" + id;
  EXPECT_EQ(store->GetJob(id)->job.checkpoint_dir(), now);
  EXPECT_EQ(store->GetJob(id)->job.last_checkpoint().path(),
            now + "/step-00000010");
  EXPECT_EQ(store->ListJobs({})->jobs.at(0).checkpoint_dir(), now);
  EXPECT_EQ((*store->FindJobByRequest("default", "r"))->job.checkpoint_dir(),
            now);
  EXPECT_EQ(store->JobsInStates({v1::QUEUED})->at(0).job.checkpoint_dir(), now);
  auto updated =
      store->UpdateJob(id, Durability::kTransition, [&](JobRecord& r, auto&) {
        EXPECT_EQ(r.job.checkpoint_dir(), now);
        r.job.set_state_reason("touched");
        return true;
      });
  ASSERT_TRUE(updated.ok()) << updated.status();
  store.reset();
  EXPECT_EQ(Open()->GetJob(id)->job.checkpoint_dir(), now);
}

TEST_F(JobStoreTest, SkippedJobNumbersAreNeverHandedOut) {
  auto store = Open();
  EXPECT_EQ(store->CreateJob(NewJob())->record.job.id(), "j-000001");
  EXPECT_EQ(*store->SkipJobNumbersThrough(1), 0);
  EXPECT_EQ(*store->SkipJobNumbersThrough(41), 40);
  EXPECT_EQ(*store->SkipJobNumbersThrough(7), 0);
  EXPECT_EQ(store->CreateJob(NewJob())->record.job.id(), "j-000042");
  store.reset();
  EXPECT_EQ(Open()->CreateJob(NewJob())->record.job.id(), "j-000043");
}

v1::WorkerDrain DrainOf(const std::string& worker, const std::string& reason) {
  v1::WorkerDrain d;
  d.set_worker_id(worker);
  d.set_reason(reason);
  return d;
}

TEST_F(JobStoreTest, KeepsWorkerDrainsAcrossReopen) {
  {
    auto store = Open();
    ASSERT_TRUE(store->PutWorkerDrain(DrainOf("w2", "new disk")).ok());
    ASSERT_TRUE(store->PutWorkerDrain(DrainOf("w1", "driver upgrade")).ok());
    v1::WorkerDrain replaced = DrainOf("w2", "new disk, then reboot");
    replaced.set_keep_jobs(true);
    ASSERT_TRUE(store->PutWorkerDrain(replaced).ok());
  }
  auto store = Open();
  auto drains = store->ListWorkerDrains();
  ASSERT_TRUE(drains.ok()) << drains.status();
  ASSERT_EQ(drains->size(), 2u);
  EXPECT_EQ((*drains)[0].worker_id(), "w1");
  EXPECT_EQ((*drains)[0].reason(), "driver upgrade");
  EXPECT_EQ((*drains)[1].reason(), "new disk, then reboot");
  EXPECT_TRUE((*drains)[1].keep_jobs());

  ASSERT_TRUE(store->DeleteWorkerDrain("w1").ok());
  absl::Status again = store->DeleteWorkerDrain("w1");
  EXPECT_EQ(again.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(again.message(), HasSubstr("'w1' is not drained"));
  EXPECT_EQ(store->ListWorkerDrains()->size(), 1u);
  EXPECT_EQ(store->PutWorkerDrain(DrainOf("", "x")).code(),
            absl::StatusCode::kInvalidArgument);
}

// The store is the owner's only (jobs' specs, logs, tenants), whatever the
// umask; so is an older store's file, and its WAL, once reopened.
TEST_F(JobStoreTest, TheStoreFilesAreTheOwnersOnly) {
  const std::string db = dir_.File("trainyard.db");
  auto mode = [](const std::string& f) {
    struct stat st;
    EXPECT_EQ(stat(f.c_str(), &st), 0) << f;
    return st.st_mode & 0777;
  };
  {
    auto store = Open();
    ASSERT_TRUE(store->CreateJob(NewJob()).ok());
    EXPECT_EQ(mode(db), 0600u);
    EXPECT_EQ(mode(db + "-wal"), 0600u);
    ASSERT_EQ(chmod(db.c_str(), 0644), 0);
    ASSERT_EQ(chmod((db + "-wal").c_str(), 0644), 0);
  }
  auto store = Open();
  EXPECT_EQ(mode(db), 0600u);
}

// The store's connections keep SQLite's locks on its file while it is
// open: were one dropped (closing any descriptor of the file drops all of a
// process's POSIX locks), an operator's sqlite3 shell would take itself for
// the last user on exit, checkpoint and delete the WAL under the server,
// and later commits would be lost.
TEST_F(JobStoreTest, AnotherProcessSeesTheOpenStoreLocked) {
  auto store = Open();
  ASSERT_TRUE(store->CreateJob(NewJob()).ok());
  ASSERT_TRUE(store->ListJobs({}).ok());
  const std::string db = dir_.File("trainyard.db");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = open(db.c_str(), O_RDONLY | O_CLOEXEC);
    struct flock lock = {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;  // the whole file
    if (fd < 0 || fcntl(fd, F_GETLK, &lock) != 0) _exit(2);
    _exit(lock.l_type == F_UNLCK ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "no lock held: another process could delete the WAL";
}

TEST_F(JobStoreTest, KeepsKnownWorkersAcrossReopen) {
  {
    auto store = Open();
    v1::WorkerHello w2;
    w2.set_worker_id("w2");
    w2.set_hostname("gpu-node-2");
    w2.add_running()->set_job_id("j-000001");
    ASSERT_TRUE(store->PutKnownWorker(w2).ok());
    v1::WorkerHello w1;
    w1.set_worker_id("w1");
    w1.set_cpu_slots(2);
    ASSERT_TRUE(store->PutKnownWorker(w1).ok());
    w1.set_cpu_slots(4);  // it came back bigger
    ASSERT_TRUE(store->PutKnownWorker(w1).ok());
  }
  auto store = Open();
  auto known = store->ListKnownWorkers();
  ASSERT_TRUE(known.ok()) << known.status();
  ASSERT_EQ(known->size(), 2u);
  EXPECT_EQ((*known)[0].hello.worker_id(), "w1");
  EXPECT_EQ((*known)[0].hello.cpu_slots(), 4);
  EXPECT_EQ((*known)[1].hello.hostname(), "gpu-node-2");
  EXPECT_EQ((*known)[1].hello.running_size(), 0) << "its jobs are not kept";
  EXPECT_FALSE((*known)[1].lost);
  // Lost until it connects again.
  ASSERT_TRUE(store->MarkKnownWorkerLost("w2").ok());
  EXPECT_TRUE((*store->ListKnownWorkers())[1].lost);
  ASSERT_TRUE(store->PutKnownWorker((*known)[1].hello).ok());
  EXPECT_FALSE((*store->ListKnownWorkers())[1].lost);
  // Forgotten: its row and its drain go together.
  v1::WorkerDrain drain;
  drain.set_worker_id("w2");
  ASSERT_TRUE(store->PutWorkerDrain(drain).ok());
  ASSERT_TRUE(store->ForgetWorker("w2").ok());
  EXPECT_TRUE(store->ListWorkerDrains()->empty());
  ASSERT_TRUE(store->PutKnownWorker((*known)[1].hello).ok());

  ASSERT_TRUE(store->DeleteKnownWorker("w1").ok());
  ASSERT_TRUE(store->DeleteKnownWorker("w1").ok());  // gone already: fine
  EXPECT_EQ(store->ListKnownWorkers()->size(), 1u);
  EXPECT_EQ(store->PutKnownWorker(v1::WorkerHello()).code(),
            absl::StatusCode::kInvalidArgument);
}

// What a version 5 server wrote has no known workers: the upgrade adds the
// table, empty.
TEST_F(JobStoreTest, UpgradesAVersionFiveStoreWithNoKnownWorkers) {
  { auto store = Open(); }
  AsWrittenBy(5, "");
  auto store = Open();
  auto known = store->ListKnownWorkers();
  ASSERT_TRUE(known.ok()) << known.status();
  EXPECT_TRUE(known->empty());
}

TEST_F(JobStoreTest, UpgradesAVersionOneStoreKeepingItsJobs) {
  std::string id;
  {
    auto store = Open();
    auto c = store->CreateJob(NewJob("first"));
    ASSERT_TRUE(c.ok()) << c.status();
    id = c->record.job.id();
  }
  // What a version 1 server wrote: no drains table, no end times.
  AsWrittenBy(1, "DROP TABLE worker_drains;");
  auto store = Open();
  EXPECT_EQ(store->GetJob(id)->job.request_id(), "first");
  ASSERT_TRUE(store->PutWorkerDrain(DrainOf("w1", "")).ok());
  EXPECT_EQ(store->ListWorkerDrains()->size(), 1u);
  store.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir_.File("trainyard.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* version = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &version,
                               nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(version), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(version, 0), JobStore::kSchemaVersion);
  sqlite3_finalize(version);
  sqlite3_close(db);
}

// An ended job (and two that have not ended) in a store that version 2
// wrote: after the upgrade the retention's queries find it by its end time.
TEST_F(JobStoreTest, UpgradesAVersionTwoStoreFillingInEndTimes) {
  clock_.Advance(absl::Hours(1));
  const absl::Time ended_at = absl::FromUnixMillis(1'700'000'123'456);
  std::string ended, queued;
  {
    auto store = Open();
    ended = store->CreateJob(NewJob("a"))->record.job.id();
    queued = store->CreateJob(NewJob("b"))->record.job.id();
    auto done = store->UpdateJob(
        ended, Durability::kTransition, [&](JobRecord& r, auto&) {
          r.job.set_state(v1::FAILED);
          *r.job.mutable_end_time() = ToProtoTime(ended_at);
          return true;
        });
    ASSERT_TRUE(done.ok()) << done.status();
  }
  AsWrittenBy(2, "");
  auto store = Open();
  EXPECT_THAT(*store->EndedBy(ended_at, 10), ElementsAre(ended));
  EXPECT_TRUE(store->EndedBy(ended_at - absl::Milliseconds(1), 10)->empty());
  EXPECT_EQ(*store->FirstEndAfter(absl::InfinitePast()), ended_at);
  EXPECT_EQ(*store->FirstEndAfter(ended_at), std::nullopt);
  EXPECT_EQ(store->GetJob(queued)->job.state(), v1::QUEUED);
}

// Jobs in a store that version 3 wrote (no name column): after the upgrade
// the name filter finds them by the names in their records.
TEST_F(JobStoreTest, UpgradesAVersionThreeStoreFillingInNames) {
  {
    auto store = Open();
    ASSERT_TRUE(store->CreateJob(Named("sweep lr=1")).ok());
    ASSERT_TRUE(store->CreateJob(Named("other")).ok());
    ASSERT_TRUE(store->CreateJob(Named("sweep lr=2")).ok());
  }
  AsWrittenBy(3, "");
  auto store = Open();
  ListJobsQuery q;
  q.name_contains = "sweep";
  EXPECT_THAT(IdsOf(*store->ListJobs(q)), ElementsAre("j-000001", "j-000003"));
  ASSERT_TRUE(store->CreateJob(Named("sweep lr=3")).ok());
  EXPECT_THAT(IdsOf(*store->ListJobs(q)),
              ElementsAre("j-000001", "j-000003", "j-000004"));
}

// Ended attempts in a store that version 4 wrote (no usage table): after
// the upgrade their usage is there, charged what their specs ask for, and
// attempts that end later are added as they end.
TEST_F(JobStoreTest, UpgradesAVersionFourStoreFillingInAttemptUsage) {
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  auto attempt = [&](v1::Job& job, int n, absl::Duration from,
                     std::optional<absl::Duration> to, v1::JobState outcome) {
    v1::Attempt* a = job.add_attempts();
    a->set_number(n);
    *a->mutable_start_time() = ToProtoTime(t0 + from);
    if (to) *a->mutable_end_time() = ToProtoTime(t0 + *to);
    a->set_outcome(outcome);
  };
  std::string gpu_job, cpu_job;
  {
    auto store = Open();
    v1::Job gpu = Named("two gpus", "a");
    gpu.mutable_spec()->mutable_resources()->set_gpus(2);
    gpu_job = store->CreateJob(gpu)->record.job.id();
    cpu_job = store->CreateJob(Named("cpu", "b"))->record.job.id();
    auto set = [&](const std::string& id, auto fill) {
      ASSERT_TRUE(store
                      ->UpdateJob(id, Durability::kTransition,
                                  [&](JobRecord& r, auto&) {
                                    fill(r.job);
                                    return true;
                                  })
                      .ok());
    };
    set(gpu_job, [&](v1::Job& j) {
      attempt(j, 1, absl::ZeroDuration(), absl::Minutes(10), v1::QUEUED);
      attempt(j, 2, absl::Minutes(20), absl::Minutes(30), v1::SUCCEEDED);
      j.set_state(v1::SUCCEEDED);
    });
    set(cpu_job, [&](v1::Job& j) {
      attempt(j, 1, absl::Minutes(5), std::nullopt, v1::JOB_STATE_UNSPECIFIED);
      j.set_state(v1::RUNNING);
    });
  }
  AsWrittenBy(4, "");
  auto store = Open();
  auto usage = store->EndedAttempts(t0, t0 + absl::Hours(1), "");
  ASSERT_TRUE(usage.ok()) << usage.status();
  ASSERT_EQ(usage->size(), 2u);
  std::sort(usage->begin(), usage->end(),
            [](const AttemptUsage& x, const AttemptUsage& y) {
              return x.attempt < y.attempt;
            });
  EXPECT_EQ((*usage)[0].job_id, gpu_job);
  EXPECT_EQ((*usage)[0].tenant, "a");
  EXPECT_EQ((*usage)[0].job_name, "two gpus");
  EXPECT_EQ((*usage)[0].start, t0);
  EXPECT_EQ((*usage)[0].end, t0 + absl::Minutes(10));
  EXPECT_EQ((*usage)[0].held, (Holding{2000, 0}));
  EXPECT_EQ((*usage)[0].outcome, v1::QUEUED);
  EXPECT_EQ((*usage)[1].attempt, 2);
  EXPECT_EQ((*usage)[1].outcome, v1::SUCCEEDED);

  // The window and the tenant filter.
  EXPECT_EQ(
      store->EndedAttempts(t0 + absl::Minutes(10), t0 + absl::Minutes(20), "")
          ->size(),
      0u);
  EXPECT_EQ(store->EndedAttempts(t0, t0 + absl::Hours(1), "b")->size(), 0u);

  // The running attempt is recorded once it ends, and only then.
  ASSERT_TRUE(store
                  ->UpdateJob(cpu_job, Durability::kTransition,
                              [&](JobRecord& r, auto&) {
                                *r.job.mutable_attempts(0)->mutable_end_time() =
                                    ToProtoTime(t0 + absl::Minutes(50));
                                r.job.mutable_attempts(0)->set_outcome(
                                    v1::FAILED);
                                r.job.set_state(v1::FAILED);
                                return true;
                              })
                  .ok());
  auto b = store->EndedAttempts(t0, t0 + absl::Hours(1), "b");
  ASSERT_EQ(b->size(), 1u);
  EXPECT_EQ((*b)[0].held, (Holding{0, 1}));
  EXPECT_EQ((*b)[0].end, t0 + absl::Minutes(50));
  EXPECT_EQ((*b)[0].outcome, v1::FAILED);

  // Deleting the job leaves its usage.
  ASSERT_TRUE(store
                  ->DeleteJob(cpu_job,
                              [](const JobRecord&) { return absl::OkStatus(); })
                  .ok());
  EXPECT_EQ(store->EndedAttempts(t0, t0 + absl::Hours(1), "b")->size(), 1u);
}

// Shared-GPU jobs in a store that version 4 wrote: their share was granted
// by the scheduler (the spec names none), and their records carry the
// grants. An attempt that ended with them, and one still running, are
// charged the grant's share, not whole GPUs: after the upgrade, and when
// the running one ends (the same write that ends it drops its grants).
TEST_F(JobStoreTest, UpgradeChargesOldSharedGpuAttemptsTheirGrants) {
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  std::string ended, running;
  {
    auto store = Open();
    auto shared = [&](const std::string& name, v1::JobState state,
                      bool end) -> std::string {
      v1::Job job = Named(name, "a");
      job.mutable_spec()->mutable_resources()->set_gpus(1);
      const std::string id = store->CreateJob(job)->record.job.id();
      EXPECT_TRUE(store
                      ->UpdateJob(id, Durability::kTransition,
                                  [&](JobRecord& r, auto&) {
                                    v1::Attempt* a = r.job.add_attempts();
                                    a->set_number(1);
                                    *a->mutable_start_time() = ToProtoTime(t0);
                                    if (end) {
                                      *a->mutable_end_time() =
                                          ToProtoTime(t0 + absl::Minutes(10));
                                      a->set_outcome(state);
                                    }
                                    r.job.set_attempt(1);
                                    r.job.add_gpu_grants()->set_compute_milli(
                                        100);
                                    r.job.set_state(state);
                                    return true;
                                  })
                      .ok());
      return id;
    };
    ended = shared("ended", v1::SUCCEEDED, true);
    running = shared("running", v1::RUNNING, false);
  }
  AsWrittenBy(4, "");
  auto store = Open();
  auto usage = store->EndedAttempts(t0, t0 + absl::Hours(1), "");
  ASSERT_TRUE(usage.ok()) << usage.status();
  ASSERT_EQ(usage->size(), 1u);
  EXPECT_EQ((*usage)[0].job_id, ended);
  EXPECT_EQ((*usage)[0].held, (Holding{100, 0}));

  ASSERT_TRUE(store
                  ->UpdateJob(running, Durability::kTransition,
                              [&](JobRecord& r, auto&) {
                                *r.job.mutable_attempts(0)->mutable_end_time() =
                                    ToProtoTime(t0 + absl::Minutes(20));
                                r.job.mutable_attempts(0)->set_outcome(
                                    v1::FAILED);
                                r.job.set_state(v1::FAILED);
                                r.job.clear_gpu_grants();
                                return true;
                              })
                  .ok());
  usage = store->EndedAttempts(t0, t0 + absl::Hours(1), "");
  ASSERT_EQ(usage->size(), 2u);
  for (const AttemptUsage& u : *usage) {
    EXPECT_EQ(u.held, (Holding{100, 0})) << u.job_id;
  }
  auto total = store->EndedUsageByTenant(t0 + absl::Hours(1));
  ASSERT_TRUE(total.ok()) << total.status();
  EXPECT_DOUBLE_EQ((*total)["a"].gpu_seconds, 0.1 * 30 * 60);
  // Seen from before the second attempt ended: only up to then.
  total = store->EndedUsageByTenant(t0 + absl::Minutes(15));
  EXPECT_DOUBLE_EQ((*total)["a"].gpu_seconds, 0.1 * 25 * 60);
}

// The server's last sign of life outlives it: the next start reads it.
TEST_F(JobStoreTest, KeepsTheServersLastSignOfLife) {
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  {
    auto store = Open();
    auto alive = store->LastAlive();
    ASSERT_TRUE(alive.ok()) << alive.status();
    EXPECT_EQ(*alive, std::nullopt);
    ASSERT_TRUE(store->MarkAlive(t0).ok());
    ASSERT_TRUE(store->MarkAlive(t0 + absl::Milliseconds(1500)).ok());
  }
  auto store = Open();
  EXPECT_EQ(*store->LastAlive(), t0 + absl::Milliseconds(1500));
}

TEST_F(JobStoreTest, EndedByListsEndedJobsLongestEndedFirst) {
  auto store = Open();
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(
        store->CreateJob(NewJob(absl::StrCat("r", i)))->record.job.id());
  }
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  // Ended in the order 2, 0, 1; job 3 is still queued.
  for (auto [i, at] : std::vector<std::pair<int, absl::Time>>{
           {2, t0}, {0, t0 + absl::Seconds(5)}, {1, t0 + absl::Seconds(9)}}) {
    ASSERT_TRUE(store
                    ->UpdateJob(ids[i], Durability::kTransition,
                                [&](JobRecord& r, auto&) {
                                  r.job.set_state(v1::SUCCEEDED);
                                  *r.job.mutable_end_time() = ToProtoTime(at);
                                  return true;
                                })
                    .ok());
  }
  EXPECT_THAT(*store->EndedBy(t0 + absl::Seconds(5), 10),
              ElementsAre(ids[2], ids[0]));
  EXPECT_THAT(*store->EndedBy(t0 + absl::Hours(1), 2),
              ElementsAre(ids[2], ids[0]));
  EXPECT_EQ(store->EndedBy(t0 + absl::Hours(1), 10)->size(), 3u);
  EXPECT_EQ(*store->FirstEndAfter(t0), t0 + absl::Seconds(5));
  EXPECT_EQ(*store->FirstEndAfter(t0 + absl::Seconds(9)), std::nullopt);
  // Back in the queue (a restart): no longer ended.
  ASSERT_TRUE(store
                  ->UpdateJob(ids[2], Durability::kTransition,
                              [](JobRecord& r, auto&) {
                                r.job.set_state(v1::QUEUED);
                                return true;
                              })
                  .ok());
  EXPECT_THAT(*store->EndedBy(t0 + absl::Seconds(5), 10), ElementsAre(ids[0]));
}

TEST_F(JobStoreTest, SafeForConcurrentUse) {
  auto store = Open();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        auto c = store->CreateJob(NewJob(absl::StrCat("t", t, "-", i % 20)));
        ASSERT_TRUE(c.ok()) << c.status();
        ASSERT_TRUE(store->AppendLog(c->record.job.id(), "x").ok());
        ASSERT_TRUE(store->ListJobs({}).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  ListJobsQuery q;
  q.page_size = 500;
  EXPECT_EQ(store->ListJobs(q)->jobs.size(), 80u);  // 20 distinct ids per thread
}

// The training curve: trainer events of job `id` stored as UpdateJob
// stores them (one commit each).
void AddTrainerEvents(JobStore& store, const std::string& id,
                      const std::vector<v1::TrainerEvent>& events) {
  for (const v1::TrainerEvent& t : events) {
    auto r = store.UpdateJob(id, Durability::kTelemetry,
                             [&](JobRecord&, std::vector<v1::JobEvent>& out) {
                               *out.emplace_back().mutable_trainer() = t;
                               return true;
                             });
    ASSERT_TRUE(r.ok()) << r.status();
  }
}

v1::TrainerEvent Report(int64_t step, double loss = 1.0) {
  v1::TrainerEvent t;
  t.mutable_progress()->set_step(step);
  t.mutable_progress()->set_loss(loss);
  return t;
}

v1::TrainerEvent Evaluated(int64_t step, double loss = 1.0) {
  v1::TrainerEvent t;
  t.mutable_eval()->set_step(step);
  t.mutable_eval()->set_loss(loss);
  return t;
}

v1::TrainerEvent StartedAt(int64_t step) {
  v1::TrainerEvent t;
  t.mutable_started()->set_start_step(step);
  return t;
}

// "p10" for a progress point at step 10, "e20" for an evaluation.
std::vector<std::string> CurveOf(const JobStore& store, const std::string& id) {
  auto m = store.ReadMetrics(id);
  EXPECT_TRUE(m.ok()) << m.status();
  std::vector<std::string> out;
  if (!m.ok()) return out;
  for (const v1::MetricPoint& p : m->points()) {
    out.push_back(p.has_progress() ? absl::StrCat("p", p.progress().step())
                                   : absl::StrCat("e", p.eval().step()));
  }
  return out;
}

TEST_F(JobStoreTest, KeepsTheWholeRunsCurveThinnedEvenly) {
  JobStoreOptions o;
  o.trainer_events_kept = 3;
  o.metric_points_kept = 10;
  auto store = Open(o);
  ASSERT_TRUE(store->CreateJob(NewJob()).ok());
  std::vector<v1::TrainerEvent> events = {StartedAt(0)};
  for (int step = 1; step <= 100; ++step) {
    events.push_back(Report(step, 1.0 / step));
  }
  AddTrainerEvents(*store, "j-000001", events);

  // The events keep only the last 3; the curve spans the run: every 16th
  // step (8 would keep 12 and the newest, past 10) and the newest.
  EXPECT_EQ(store->ReadEvents("j-000001", 0, 100)->size(), 4u);
  auto m = store->ReadMetrics("j-000001");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->job_id(), "j-000001");
  EXPECT_EQ(m->progress_stride(), 16);
  EXPECT_EQ(m->eval_stride(), 1);
  EXPECT_THAT(CurveOf(*store, "j-000001"),
              ElementsAre("p16", "p32", "p48", "p64", "p80", "p96", "p100"));
  // Each point is the report as stored, with the time it was received.
  EXPECT_DOUBLE_EQ(m->points(1).progress().loss(), 1.0 / 32);
  EXPECT_EQ(FromProtoTime(m->points(0).time()), clock_.Now());

  // The next report is kept; 100 (off the stride) then goes.
  AddTrainerEvents(*store, "j-000001", {Report(101), Report(112)});
  EXPECT_THAT(CurveOf(*store, "j-000001"),
              ElementsAre("p16", "p32", "p48", "p64", "p80", "p96", "p112"));
}

TEST_F(JobStoreTest, AResumedRunReplacesThePointsPastItsCheckpoint) {
  auto store = Open();
  ASSERT_TRUE(store->CreateJob(NewJob()).ok());
  AddTrainerEvents(
      *store, "j-000001",
      {StartedAt(0), Evaluated(0), Report(10), Report(20), Evaluated(20),
       Report(30), Report(40), Evaluated(40), Report(50)});
  // Preempted after a checkpoint at step 20: the next attempt starts there.
  AddTrainerEvents(*store, "j-000001",
                   {StartedAt(20), Report(30, 0.5), Report(40, 0.25)});
  EXPECT_THAT(CurveOf(*store, "j-000001"),
              ElementsAre("e0", "p10", "p20", "e20", "p30", "p40"));
  EXPECT_DOUBLE_EQ(store->ReadMetrics("j-000001")->points(4).progress().loss(),
                   0.5);
  // A report at or before the newest step replaces the points from it on,
  // start event or not.
  AddTrainerEvents(*store, "j-000001", {Report(20, 0.125)});
  EXPECT_THAT(CurveOf(*store, "j-000001"),
              ElementsAre("e0", "p10", "p20", "e20"));
  EXPECT_DOUBLE_EQ(store->ReadMetrics("j-000001")->points(2).progress().loss(),
                   0.125);
}

TEST_F(JobStoreTest, AFreshStartBeginsTheCurveAgain) {
  JobStoreOptions o;
  o.metric_points_kept = 4;
  auto store = Open(o);
  ASSERT_TRUE(store->CreateJob(NewJob()).ok());
  AddTrainerEvents(*store, "j-000001",
                   {Report(1), Report(2), Report(3), Report(4), Report(5)});
  EXPECT_EQ(store->ReadMetrics("j-000001")->progress_stride(), 2);
  // Failed before its first checkpoint: the next attempt starts at 0.
  AddTrainerEvents(*store, "j-000001", {StartedAt(0), Report(1)});
  auto m = store->ReadMetrics("j-000001");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->progress_stride(), 1);
  EXPECT_THAT(CurveOf(*store, "j-000001"), ElementsAre("p1"));
}

// Steps near the top of int64: the stride stops doubling before it would
// pass the newest step (no overflow), and the series still fits.
TEST_F(JobStoreTest, StepsNearTheLimitThinWithoutOverflow) {
  JobStoreOptions o;
  o.metric_points_kept = 4;
  auto store = Open(o);
  ASSERT_TRUE(store->CreateJob(NewJob()).ok());
  constexpr int64_t k61 = int64_t{1} << 61;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  AddTrainerEvents(
      *store, "j-000001",
      {Report(0), Report(k61), Report(2 * k61), Report(3 * k61), Report(kMax)});
  auto m = store->ReadMetrics("j-000001");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->progress_stride(), 2 * k61);
  EXPECT_THAT(
      CurveOf(*store, "j-000001"),
      ElementsAre("p0", absl::StrCat("p", 2 * k61), absl::StrCat("p", kMax)));
}

TEST_F(JobStoreTest, DeletingAJobDeletesItsCurve) {
  auto store = Open();
  ASSERT_TRUE(store->CreateJob(NewJob()).ok());
  AddTrainerEvents(*store, "j-000001", {Report(10), Evaluated(10)});
  ASSERT_TRUE(store->CreateJob(NewJob()).ok());
  AddTrainerEvents(*store, "j-000002", {Report(5)});
  ASSERT_TRUE(store
                  ->DeleteJob("j-000001",
                              [](const JobRecord&) { return absl::OkStatus(); })
                  .ok());
  auto gone = store->ReadMetrics("j-000001");
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(gone.status().message(), "job j-000001 not found");
  EXPECT_THAT(CurveOf(*store, "j-000002"), ElementsAre("p5"));
  store.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir_.File("trainyard.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* count = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT count(*) FROM metric_points", -1,
                               &count, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(count), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(count, 0), 1) << "only j-000002's point";
  sqlite3_finalize(count);
  sqlite3_close(db);
}

TEST_F(JobStoreTest, AJobWithoutReportsHasAnEmptyCurve) {
  auto store = Open();
  ASSERT_TRUE(store->CreateJob(NewJob()).ok());
  auto m = store->ReadMetrics("j-000001");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->points_size(), 0);
  EXPECT_EQ(m->progress_stride(), 1);
  EXPECT_EQ(store->ReadMetrics("j-424242").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(JobStoreTest, RefusesACurveCapBelowFourOrAboveTheLimit) {
  for (int32_t cap : {3, 0, -5, 10'001}) {
    JobStoreOptions o;
    o.path = dir_.File("caps.db");
    o.metric_points_kept = cap;
    auto store = JobStore::Open(o);
    EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument) << cap;
    EXPECT_THAT(store.status().message(), HasSubstr("metric_points_kept"));
  }
}

// The largest curve the options allow fits one gRPC response (4 MiB by
// default on the client): two series of the highest cap, each point as
// large as a point can be.
TEST_F(JobStoreTest, TheLargestCurveFitsOneResponse) {
  v1::MetricPoint p;
  p.mutable_time()->set_seconds(std::numeric_limits<int64_t>::max());
  p.mutable_time()->set_nanos(999'999'999);
  v1::TrainProgress* t = p.mutable_progress();
  t->set_step(std::numeric_limits<int64_t>::max());
  t->set_total_steps(std::numeric_limits<int64_t>::max());
  t->set_loss(1.5);
  t->set_lr(1.5);
  t->set_grad_norm(1.5);
  t->set_samples_per_second(1.5);
  t->set_tokens_per_second(1.5);
  t->set_memory_bytes(std::numeric_limits<int64_t>::max());
  v1::JobMetrics m;
  m.set_job_id(std::string(64, 'j'));
  for (int i = 0; i < 2 * 10'000; ++i) *m.add_points() = p;
  m.set_progress_stride(std::numeric_limits<int64_t>::max());
  m.set_eval_stride(std::numeric_limits<int64_t>::max());
  EXPECT_LT(m.ByteSizeLong(), size_t{4} << 20) << p.ByteSizeLong();
  JobStoreOptions o;
  o.metric_points_kept = 10'000;
  EXPECT_NE(Open(o), nullptr);
}

// A version 6 store has no curves: the upgrade makes them from the trainer
// events it still holds.
TEST_F(JobStoreTest, UpgradesAVersionSixStoreWithCurvesFromItsEvents) {
  {
    auto store = Open();
    ASSERT_TRUE(store->CreateJob(NewJob()).ok());
    AddTrainerEvents(*store, "j-000001",
                     {StartedAt(0), Report(10), Evaluated(10), Report(20),
                      StartedAt(10), Report(20, 0.5)});
    ASSERT_TRUE(store->CreateJob(NewJob()).ok());
  }
  AsWrittenBy(6, "");
  auto store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_THAT(CurveOf(*store, "j-000001"), ElementsAre("p10", "e10", "p20"));
  EXPECT_DOUBLE_EQ(store->ReadMetrics("j-000001")->points(2).progress().loss(),
                   0.5);
  EXPECT_TRUE(CurveOf(*store, "j-000002").empty());
  AddTrainerEvents(*store, "j-000001", {Report(30)});
  EXPECT_THAT(CurveOf(*store, "j-000001"),
              ElementsAre("p10", "e10", "p20", "p30"));
}

// A job of `tenant` in halving group `group`.
v1::Job InGroup(const std::string& tenant, const std::string& group) {
  v1::Job job;
  job.set_tenant(tenant);
  job.mutable_spec()->set_steps(100);
  job.mutable_spec()->mutable_halving()->set_group(group);
  return job;
}

// Enters `loss` for job `id` at `rung` in an update of its own; what
// RungBoard::Enter returned.
std::optional<std::vector<double>> EnterAt(JobStore& store,
                                           const std::string& id, int64_t rung,
                                           double loss) {
  std::optional<std::vector<double>> out;
  absl::StatusOr<JobRecord> r = store.UpdateJobWithRungs(
      id, Durability::kTransition,
      [&](JobRecord& r, std::vector<v1::JobEvent>&,
          RungBoard& rungs) -> absl::StatusOr<bool> {
        ASSIGN_OR_RETURN(out, rungs.Enter(r, rung, loss));
        return true;
      });
  EXPECT_TRUE(r.ok()) << r.status();
  return out;
}

// The entries of halving groups: per tenant and group, one per job and
// rung (none at or below a rung entered already), kept across a restart
// and an upgrade from schema 7, gone with their job.
TEST_F(JobStoreTest, HalvingEntriesArePerGroupAndGoWithTheirJob) {
  {
    auto store = Open();
    ASSERT_TRUE(store->CreateJob(InGroup("t1", "g")).ok());  // j-000001
  }
  AsWrittenBy(7, "");
  auto store = Open();
  ASSERT_NE(store, nullptr);
  for (const auto& [tenant, group] :
       std::vector<std::pair<std::string, std::string>>{
           {"t1", "g"}, {"t1", "g"}, {"t1", "other"}, {"t2", "g"}}) {
    ASSERT_TRUE(store->CreateJob(InGroup(tenant, group)).ok());
  }
  EXPECT_THAT(EnterAt(*store, "j-000001", 20, 1.5), Optional(IsEmpty()));
  EXPECT_THAT(EnterAt(*store, "j-000002", 20, 2.5), Optional(ElementsAre(1.5)));
  // Not again at that rung, nor at an earlier one.
  EXPECT_EQ(EnterAt(*store, "j-000002", 20, 0.1), std::nullopt);
  EXPECT_EQ(EnterAt(*store, "j-000001", 10, 0.1), std::nullopt);
  // Another group of the tenant, the same group of another tenant: apart.
  EXPECT_THAT(EnterAt(*store, "j-000004", 20, 9.0), Optional(IsEmpty()));
  EXPECT_THAT(EnterAt(*store, "j-000005", 20, 9.0), Optional(IsEmpty()));
  // A NaN is entered as +infinity.
  EXPECT_THAT(EnterAt(*store, "j-000003", 20, NAN),
              Optional(UnorderedElementsAre(1.5, 2.5)));
  store.reset();
  store = Open();
  EXPECT_THAT(EnterAt(*store, "j-000002", 60, 1.0), Optional(IsEmpty()));
  v1::Job fresh = InGroup("t1", "g");
  ASSERT_TRUE(store->CreateJob(fresh).ok());  // j-000006
  EXPECT_THAT(EnterAt(*store, "j-000006", 20, 1.0),
              Optional(UnorderedElementsAre(
                  1.5, 2.5, std::numeric_limits<double>::infinity())));
  ASSERT_TRUE(store
                  ->DeleteJob("j-000001",
                              [](const JobRecord&) { return absl::OkStatus(); })
                  .ok());
  ASSERT_TRUE(store->CreateJob(InGroup("t1", "g")).ok());  // j-000007
  EXPECT_THAT(EnterAt(*store, "j-000007", 20, 1.0),
              Optional(UnorderedElementsAre(
                  2.5, 1.0, std::numeric_limits<double>::infinity())));
}

}  // namespace
}  // namespace trainyard::server
