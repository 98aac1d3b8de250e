// JobStore: opening, schema, and the jobs table. Events and logs live in
// job_store_events.cc.
#include "server/job_store.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/field_errors.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "server/checkpoint_paths.h"
#include "server/job_state.h"

namespace trainyard::server {
namespace {

// "TYD1" in the SQLite header's application_id: marks the file as ours.
constexpr int64_t kApplicationId = 0x54594431;

constexpr char kSchema[] = R"sql(
CREATE TABLE meta (
  key TEXT PRIMARY KEY,
  value INTEGER NOT NULL
);
INSERT INTO meta (key, value) VALUES ('next_job_number', 1);
CREATE TABLE jobs (
  create_seq INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  tenant TEXT NOT NULL,
  state INTEGER NOT NULL,
  request_id TEXT NOT NULL,
  cancel_reason TEXT NOT NULL DEFAULT '',
  gpu_indices TEXT NOT NULL DEFAULT '',
  last_sequence INTEGER NOT NULL DEFAULT 0,
  pruned_through INTEGER NOT NULL DEFAULT 0,
  trainer_events INTEGER NOT NULL DEFAULT 0,
  log_start INTEGER NOT NULL DEFAULT 0,
  log_end INTEGER NOT NULL DEFAULT 0,
  job BLOB NOT NULL
);
CREATE INDEX jobs_by_state ON jobs (state, create_seq);
CREATE UNIQUE INDEX jobs_by_request ON jobs (tenant, request_id)
  WHERE request_id != '';
CREATE TABLE events (
  job_seq INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  kind INTEGER NOT NULL,
  event BLOB NOT NULL,
  PRIMARY KEY (job_seq, seq)
) WITHOUT ROWID;
CREATE INDEX events_by_kind ON events (job_seq, kind, seq);
CREATE TABLE logs (
  job_seq INTEGER NOT NULL,
  start INTEGER NOT NULL,
  end INTEGER NOT NULL,
  data BLOB NOT NULL,
  PRIMARY KEY (job_seq, start)
) WITHOUT ROWID;
)sql";

// Version 2 adds the administrators' worker drains; a version 1 store is
// brought up to date by adding the table.
constexpr char kDrainsTable[] = R"sql(
CREATE TABLE worker_drains (
  worker_id TEXT PRIMARY KEY,
  drain BLOB NOT NULL
);
)sql";
// Version 3 keeps each ended job's end time in a column (milliseconds since
// the epoch; 0 while the job has not ended), so the retention finds expired
// jobs with an index instead of reading every ended job. A version 1 or 2
// store gains it, filled in from the jobs' records.
constexpr char kEndTimeColumn[] = R"sql(
ALTER TABLE jobs ADD COLUMN end_ms INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_by_end ON jobs (end_ms) WHERE end_ms > 0;
)sql";
// Version 4 keeps each job's name in a column, so that listing by name
// (ListJobsRequest.name_contains) reads the names, not every job's record.
// Filled in from the records on upgrade.
constexpr char kNameColumn[] = R"sql(
ALTER TABLE jobs ADD COLUMN name TEXT NOT NULL DEFAULT '';
)sql";
// Version 5 keeps the usage of every ended attempt (server/attempt_usage.h)
// in a table of its own, which outlives the job's deletion, for GetUsage.
// Filled in from the records on upgrade.
constexpr char kAttemptUsageTable[] = R"sql(
CREATE TABLE attempt_usage (
  job_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  tenant TEXT NOT NULL,
  job_name TEXT NOT NULL,
  start_ms INTEGER NOT NULL,
  end_ms INTEGER NOT NULL,
  gpu_milli INTEGER NOT NULL,
  cpu_slots INTEGER NOT NULL,
  outcome INTEGER NOT NULL,
  PRIMARY KEY (job_id, attempt)
) WITHOUT ROWID;
CREATE INDEX attempt_usage_by_end ON attempt_usage (end_ms);
)sql";
// Version 6 remembers the workers that have connected (JobStore::
// PutKnownWorker), so a server restart knows the idle ones too.
constexpr char kKnownWorkersTable[] = R"sql(
CREATE TABLE known_workers (
  worker_id TEXT PRIMARY KEY,
  hello BLOB NOT NULL,
  lost INTEGER NOT NULL DEFAULT 0
);
)sql";
// Version 7 keeps each job's training curve (job_store_metrics.cc): its
// points, and per series the stride they are thinned to, how many it holds
// and its newest step. Filled in from the trainer events still held on
// upgrade.
constexpr char kMetricsTables[] = R"sql(
CREATE TABLE metric_points (
  job_seq INTEGER NOT NULL,
  series INTEGER NOT NULL,
  step INTEGER NOT NULL,
  point BLOB NOT NULL,
  PRIMARY KEY (job_seq, series, step)
) WITHOUT ROWID;
CREATE TABLE metric_series (
  job_seq INTEGER NOT NULL,
  series INTEGER NOT NULL,
  stride INTEGER NOT NULL,
  points INTEGER NOT NULL,
  newest INTEGER NOT NULL,
  PRIMARY KEY (job_seq, series)
) WITHOUT ROWID;
)sql";
// Version 8 keeps the entries of halving groups at their rungs
// (RungBoard): nothing to fill in on upgrade, no job could have one.
constexpr char kHalvingTable[] = R"sql(
CREATE TABLE halving_entries (
  tenant TEXT NOT NULL,
  grp TEXT NOT NULL,
  rung INTEGER NOT NULL,
  job_seq INTEGER NOT NULL,
  loss REAL NOT NULL,
  PRIMARY KEY (tenant, grp, rung, job_seq)
) WITHOUT ROWID;
CREATE INDEX halving_entries_by_job ON halving_entries (job_seq, rung);
)sql";
constexpr int64_t kOldestUpgradable = 1;

// The end_ms column of a job: when it ended (its end time, or its last
// update for a record without one), 0 while it has not.
int64_t EndMillis(const v1::Job& job) {
  if (!IsTerminal(job.state())) return 0;
  const absl::Time end =
      FromProtoTime(job.has_end_time() ? job.end_time() : job.update_time());
  return std::max<int64_t>(1, absl::ToUnixMillis(end));
}

constexpr char kJobColumns[] =
    "create_seq, cancel_reason, gpu_indices, last_sequence, job";

// The job of a row read with kJobColumns, its checkpoint paths under
// `checkpoint_root` (server/checkpoint_paths.h).
absl::StatusOr<JobRecord> RecordFromRow(const SqliteStatement& row,
                                        const std::string& checkpoint_root) {
  JobRecord r;
  r.create_seq = row.ColumnInt64(0);
  r.cancel_reason = row.ColumnText(1);
  for (absl::string_view part :
       absl::StrSplit(row.ColumnText(2), ',', absl::SkipEmpty())) {
    int32_t g = 0;
    if (!absl::SimpleAtoi(part, &g)) {
      return absl::DataLossError(
          absl::StrCat("job row ", r.create_seq, ": bad gpu_indices"));
    }
    r.gpu_indices.push_back(g);
  }
  r.last_sequence = row.ColumnInt64(3);
  if (!r.job.ParseFromString(row.ColumnBlob(4))) {
    return absl::DataLossError(
        absl::StrCat("job row ", r.create_seq, ": cannot parse the job"));
  }
  PlaceCheckpointsUnder(checkpoint_root, r.job);
  return r;
}

// The filters a page token was issued for, so a token cannot be replayed
// against different filters.
std::string FilterKey(const ListJobsQuery& q) {
  std::vector<int> states(q.states.begin(), q.states.end());
  std::sort(states.begin(), states.end());
  return absl::StrCat(absl::StrJoin(states, ","), "|", q.tenant, "|",
                      q.name_contains);
}

std::string MakePageToken(int64_t last_seq, const ListJobsQuery& q) {
  return absl::WebSafeBase64Escape(
      absl::StrCat("v1:", last_seq, ":", FilterKey(q)));
}

absl::StatusOr<int64_t> ParsePageToken(const ListJobsQuery& q) {
  const absl::Status bad = InvalidFieldError(
      "page_token", "not a token from a previous ListJobs response");
  std::string raw;
  if (!absl::WebSafeBase64Unescape(q.page_token, &raw)) return bad;
  std::vector<std::string> parts = absl::StrSplit(raw, absl::MaxSplits(':', 2));
  int64_t seq = 0;
  if (parts.size() != 3 || parts[0] != "v1" ||
      !absl::SimpleAtoi(parts[1], &seq) || seq < 0) {
    return bad;
  }
  if (parts[2] != FilterKey(q)) {
    return InvalidFieldError(
        "page_token",
        "was issued for a different state, tenant or name filter");
  }
  return seq;
}

// WAL: readers never block the writer, and a commit is one append+fsync.
absl::Status UseWal(SqliteDb& db) {
  ASSIGN_OR_RETURN(SqliteStatement wal, db.Prepare("PRAGMA journal_mode=WAL"));
  ASSIGN_OR_RETURN(bool row, wal.Step());
  if (!row || wal.ColumnText(0) != "wal") {
    return absl::FailedPreconditionError(
        absl::StrCat(db.path(), ": cannot switch the database to WAL mode"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string JobIdForNumber(int64_t number) {
  return absl::StrFormat("j-%06d", number);
}

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(
    JobStoreOptions options) {
  if (options.path.empty()) {
    return absl::InvalidArgumentError("job store: empty database path");
  }
  if (options.trainer_events_kept < 1 || options.log_bytes_kept < 1) {
    return absl::InvalidArgumentError(
        "job store: retention limits must be positive");
  }
  if (options.metric_points_kept < 4 || options.metric_points_kept > 10'000) {
    return absl::InvalidArgumentError(
        absl::StrCat("job store: metric_points_kept must be 4 to 10000, got ",
                     options.metric_points_kept));
  }
  std::error_code ec;
  const bool existed = std::filesystem::exists(options.path, ec) || ec;
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db, SqliteDb::Open(options.path));
  std::unique_ptr<JobStore> store(
      new JobStore(std::move(options), std::move(db)));
  absl::Status init;
  {
    absl::MutexLock lock(&store->mu_);
    init = store->InitSchema();
  }
  if (!init.ok()) {
    // A start refused before the store existed leaves no file behind.
    if (!existed) {
      const std::string path = store->options_.path;
      store.reset();
      std::filesystem::remove(path, ec);
    }
    return init;
  }
  for (int i = 0; i < kReadConnections; ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> reader,
                     SqliteDb::Open(store->options_.path));
    RETURN_IF_ERROR(reader->Exec("PRAGMA query_only=1"));
    absl::MutexLock lock(&store->read_mu_);
    store->idle_readers_.push_back(std::move(reader));
  }
  return store;
}

JobStore::Reader::Reader(const JobStore* store) : store_(store) {
  absl::MutexLock lock(&store->read_mu_);
  store->read_mu_.Await(absl::Condition(
      +[](std::vector<std::unique_ptr<SqliteDb>>* idle) {
        return !idle->empty();
      },
      &store->idle_readers_));
  db_ = std::move(store->idle_readers_.back());
  store->idle_readers_.pop_back();
}

JobStore::Reader::~Reader() {
  absl::MutexLock lock(&store_->read_mu_);
  store_->idle_readers_.push_back(std::move(db_));
}

absl::Status JobStore::InitSchema() {
  const std::string& path = db_->path();
  absl::StatusOr<int64_t> app_id = db_->QueryInt64("PRAGMA application_id");
  if (!app_id.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is not a Trainyard job store (", app_id.status().message(),
        "); refusing to use it"));
  }
  ASSIGN_OR_RETURN(int64_t version, db_->QueryInt64("PRAGMA user_version"));
  ASSIGN_OR_RETURN(int64_t tables,
                   db_->QueryInt64("SELECT count(*) FROM sqlite_master"));
  const bool fresh = *app_id == 0 && version == 0 && tables == 0;
  if (!fresh && *app_id != kApplicationId) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is not a Trainyard job store (SQLite application_id ",
        *app_id, ", ", tables, " schema objects); refusing to modify it"));
  }
  if (!fresh && (version > kSchemaVersion || version < kOldestUpgradable)) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": job store schema version ", version,
        " is not supported by this yard-server (it knows version ",
        kSchemaVersion, "); refusing to modify it"));
  }
  std::vector<JobRecord> jobs;
  if (!fresh && version < 5) {
    absl::StatusOr<std::vector<JobRecord>> read = ReadEveryJob();
    if (!read.ok()) {
      return absl::Status(
          read.status().code(),
          absl::StrCat(path,
                       ": cannot upgrade the job store from schema "
                       "version ",
                       version, ": ", read.status().message(),
                       "; the file was not modified"));
    }
    jobs = *std::move(read);
  }
  if (options_.before_write) {
    RETURN_IF_ERROR(options_.before_write(
        JobStoreFound{.is_new = fresh, .version = fresh ? 0 : version}));
  }
  RETURN_IF_ERROR(db_->Exec("PRAGMA synchronous=FULL"));
  current_durability_ = Durability::kTransition;
  // A new store is in WAL mode before its schema is written; an older one
  // switches only once its upgrade committed, so that a failed upgrade
  // leaves the file in the journal mode it had.
  if (fresh) RETURN_IF_ERROR(UseWal(*db_));
  if (fresh || version < kSchemaVersion) {
    RETURN_IF_ERROR(CreateOrUpgradeSchema(fresh, version, jobs));
  }
  return fresh ? absl::OkStatus() : UseWal(*db_);
}

absl::Status JobStore::CreateOrUpgradeSchema(
    bool fresh, int64_t version, const std::vector<JobRecord>& jobs) {
  return InTransaction(Durability::kTransition, "init", [&] {
    if (fresh) {
      RETURN_IF_ERROR(db_->Exec(kSchema));
      RETURN_IF_ERROR(
          db_->Exec(absl::StrCat("PRAGMA application_id=", kApplicationId)));
    }
    if (fresh || version < 2) RETURN_IF_ERROR(db_->Exec(kDrainsTable));
    if (fresh || version < 3) RETURN_IF_ERROR(db_->Exec(kEndTimeColumn));
    if (fresh || version < 4) RETURN_IF_ERROR(db_->Exec(kNameColumn));
    if (fresh || version < 5) RETURN_IF_ERROR(db_->Exec(kAttemptUsageTable));
    if (fresh || version < 6) RETURN_IF_ERROR(db_->Exec(kKnownWorkersTable));
    if (fresh || version < 7) RETURN_IF_ERROR(db_->Exec(kMetricsTables));
    if (fresh || version < 8) RETURN_IF_ERROR(db_->Exec(kHalvingTable));
    // The columns and table versions before 5 added, filled from the jobs.
    if (!fresh && version < 5) RETURN_IF_ERROR(FillDerivedColumns(jobs));
    if (!fresh && version < 7) RETURN_IF_ERROR(FillMetricsFromEvents());
    return db_->Exec(absl::StrCat("PRAGMA user_version=", kSchemaVersion));
  });
}

absl::Status JobStore::InTransaction(
    Durability durability, std::string_view operation,
    const std::function<absl::Status()>& body) {
  if (durability != current_durability_) {
    RETURN_IF_ERROR(db_->Exec(durability == Durability::kTransition
                                  ? "PRAGMA synchronous=FULL"
                                  : "PRAGMA synchronous=NORMAL"));
    current_durability_ = durability;
  }
  RETURN_IF_ERROR(db_->Exec("BEGIN IMMEDIATE"));
  absl::Status s = body();
  if (s.ok() && options_.fault_injector) s = options_.fault_injector(operation);
  if (s.ok()) s = db_->Exec("COMMIT");
  if (!s.ok()) {
    // After some failures SQLite has already rolled back; that is fine.
    db_->Exec("ROLLBACK").IgnoreError();
    uncommitted_changes_.clear();
    return s;
  }
  if (options_.on_state_change) {
    for (const v1::StateChange& c : uncommitted_changes_) {
      options_.on_state_change(c);
    }
  }
  uncommitted_changes_.clear();
  if (options_.on_commit) options_.on_commit({});
  return absl::OkStatus();
}

static absl::StatusOr<JobRecord> LoadJobFrom(SqliteDb& db, std::string_view id,
                                             const std::string& root) {
  ASSIGN_OR_RETURN(
      SqliteStatement q,
      db.Prepare(absl::StrCat("SELECT ", kJobColumns,
                              " FROM jobs WHERE id = ?")));
  q.BindText(1, id);
  ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) {
    return absl::NotFoundError(
        absl::StrCat("job ", std::string(id), " not found"));
  }
  return RecordFromRow(q, root);
}

// The job `tenant` created with `request_id` (not empty), if any.
static absl::StatusOr<std::optional<JobRecord>> FindJobByRequestIn(
    SqliteDb& db, std::string_view tenant, std::string_view request_id,
    const std::string& root) {
  ASSIGN_OR_RETURN(SqliteStatement q,
                   db.Prepare(absl::StrCat(
                       "SELECT ", kJobColumns,
                       " FROM jobs WHERE tenant = ? AND "
                       // The second term lets SQLite use the partial index
                       // jobs_by_request rather than scan every job.
                       "request_id = ? AND request_id != ''")));
  q.BindText(1, tenant).BindText(2, request_id);
  ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return std::nullopt;
  return RecordFromRow(q, root);
}

absl::StatusOr<JobRecord> JobStore::LoadJob(std::string_view id) const {
  return LoadJobFrom(*db_, id, options_.checkpoint_root);
}

absl::Status JobStore::WriteJobRow(const JobRecord& r) {
  ASSIGN_OR_RETURN(SqliteStatement u,
                   db_->Prepare("UPDATE jobs SET state = ?, "
                                "cancel_reason = ?, gpu_indices = ?, "
                                "last_sequence = ?, job = ?, end_ms = ? "
                                "WHERE create_seq = ?"));
  u.Bind(1, r.job.state())
      .BindText(2, r.cancel_reason)
      .BindText(3, absl::StrJoin(r.gpu_indices, ","))
      .Bind(4, r.last_sequence)
      .BindBlob(5, r.job.SerializeAsString())
      .Bind(6, EndMillis(r.job))
      .Bind(7, r.create_seq);
  return u.Run();
}

absl::StatusOr<std::vector<JobRecord>> JobStore::ReadEveryJob() {
  ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare(absl::StrCat("SELECT ", kJobColumns, " FROM jobs")));
  std::vector<JobRecord> jobs;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return jobs;
    ASSIGN_OR_RETURN(JobRecord r, RecordFromRow(q, ""));
    jobs.push_back(std::move(r));
  }
}

absl::Status JobStore::FillDerivedColumns(const std::vector<JobRecord>& jobs) {
  for (const JobRecord& r : jobs) {
    ASSIGN_OR_RETURN(SqliteStatement u,
                     db_->Prepare("UPDATE jobs SET end_ms = ?, name = ? "
                                  "WHERE create_seq = ?"));
    u.Bind(1, EndMillis(r.job)).BindText(2, r.job.name()).Bind(3, r.create_seq);
    RETURN_IF_ERROR(u.Run());
  }
  for (const JobRecord& r : jobs) {
    RETURN_IF_ERROR(RecordEndedAttempts(v1::Job(), r.job));
  }
  return absl::OkStatus();
}

absl::Status JobStore::RecordEndedAttempts(const v1::Job& before,
                                           const v1::Job& after) {
  for (int i = 0; i < after.attempts_size(); ++i) {
    const v1::Attempt& a = after.attempts(i);
    if (!a.has_end_time() ||
        (i < before.attempts_size() && before.attempts(i).has_end_time())) {
      continue;
    }
    AttemptUsage u = UsageOf(after, a, absl::InfinitePast());
    // An attempt from before accounting recorded holdings is charged its
    // grants, which the record loses as the attempt ends (ReleaseHoldings):
    // read them from the record before.
    if (i < before.attempts_size()) u.held = AttemptHolding(before, a);
    ASSIGN_OR_RETURN(
        SqliteStatement insert,
        db_->Prepare("INSERT OR REPLACE INTO attempt_usage (job_id, attempt, "
                     "tenant, job_name, start_ms, end_ms, gpu_milli, "
                     "cpu_slots, outcome) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"));
    insert.BindText(1, u.job_id)
        .Bind(2, u.attempt)
        .BindText(3, u.tenant)
        .BindText(4, u.job_name)
        .Bind(5, absl::ToUnixMillis(u.start))
        .Bind(6, absl::ToUnixMillis(u.end))
        .Bind(7, u.held.gpu_milli)
        .Bind(8, u.held.cpu_slots)
        .Bind(9, u.outcome);
    RETURN_IF_ERROR(insert.Run());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, JobStore::UsageTotal>>
JobStore::EndedUsageByTenant(absl::Time now) const {
  Reader reader(this);
  // TOTAL sums in floating point: no overflow, however long the history.
  // Each attempt's end is cut to now (?1), never before its start.
  ASSIGN_OR_RETURN(
      SqliteStatement q,
      reader.db().Prepare(
          "SELECT tenant, "
          "TOTAL((MAX(MIN(end_ms, ?1), start_ms) - start_ms) * gpu_milli), "
          "TOTAL((MAX(MIN(end_ms, ?1), start_ms) - start_ms) * cpu_slots) "
          "FROM attempt_usage GROUP BY tenant"));
  q.Bind(1, absl::ToUnixMillis(now));
  std::map<std::string, UsageTotal> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    UsageTotal& t = out[q.ColumnText(0)];
    t.gpu_seconds = q.ColumnDouble(1) / 1e6;  // ms x milli-GPUs
    t.cpu_slot_seconds = q.ColumnDouble(2) / 1e3;
  }
  return out;
}

absl::StatusOr<std::vector<AttemptUsage>> JobStore::EndedAttempts(
    absl::Time start, absl::Time end, std::string_view tenant) const {
  Reader reader(this);
  ASSIGN_OR_RETURN(
      SqliteStatement q,
      reader.db().Prepare(absl::StrCat(
          "SELECT job_id, attempt, tenant, job_name, start_ms, end_ms, "
          "gpu_milli, cpu_slots, outcome FROM attempt_usage "
          "WHERE end_ms > ? AND start_ms < ?",
          tenant.empty() ? "" : " AND tenant = ?")));
  q.Bind(1, absl::ToUnixMillis(start)).Bind(2, absl::ToUnixMillis(end));
  if (!tenant.empty()) q.BindText(3, tenant);
  std::vector<AttemptUsage> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    AttemptUsage& u = out.emplace_back();
    u.job_id = q.ColumnText(0);
    u.attempt = static_cast<int32_t>(q.ColumnInt64(1));
    u.tenant = q.ColumnText(2);
    u.job_name = q.ColumnText(3);
    u.start = absl::FromUnixMillis(q.ColumnInt64(4));
    u.end = absl::FromUnixMillis(q.ColumnInt64(5));
    u.held.gpu_milli = q.ColumnInt64(6);
    u.held.cpu_slots = static_cast<int32_t>(q.ColumnInt64(7));
    u.outcome = static_cast<v1::JobState>(q.ColumnInt64(8));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> JobStore::EndedBy(
    absl::Time cutoff, int32_t limit) const {
  Reader reader(this);
  ASSIGN_OR_RETURN(SqliteStatement q,
                   reader.db().Prepare("SELECT id FROM jobs WHERE end_ms > 0 "
                                       "AND end_ms <= ? ORDER BY end_ms "
                                       "LIMIT ?"));
  q.Bind(1, absl::ToUnixMillis(cutoff)).Bind(2, limit);
  std::vector<std::string> ids;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    ids.push_back(q.ColumnText(0));
  }
  return ids;
}

absl::StatusOr<std::optional<absl::Time>> JobStore::FirstEndAfter(
    absl::Time after) const {
  Reader reader(this);
  ASSIGN_OR_RETURN(SqliteStatement q,
                   reader.db().Prepare("SELECT min(end_ms) FROM jobs WHERE "
                                       "end_ms > ?"));
  q.Bind(1, std::max<int64_t>(0, absl::ToUnixMillis(after)));
  ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row || q.ColumnInt64(0) == 0) return std::nullopt;
  return absl::FromUnixMillis(q.ColumnInt64(0));
}

absl::StatusOr<int64_t> JobStore::SkipJobNumbersThrough(int64_t number) {
  int64_t skipped = 0;
  RETURN_IF_ERROR(Commit(Durability::kTransition, "skip numbers", [&] {
    ASSIGN_OR_RETURN(int64_t next,
                     db_->QueryInt64("SELECT value FROM meta WHERE key = "
                                     "'next_job_number'"));
    if (next > number) return absl::OkStatus();
    skipped = number + 1 - next;
    return db_->Exec(absl::StrCat("UPDATE meta SET value = ", number + 1,
                                  " WHERE key = 'next_job_number'"));
  }));
  return skipped;
}

absl::StatusOr<JobStore::Created> JobStore::CreateJob(
    v1::Job job, const std::function<absl::Status()>& check_new) {
  Created out;
  RETURN_IF_ERROR(Commit(Durability::kTransition, "create", [&] {
    if (!job.request_id().empty()) {
      ASSIGN_OR_RETURN(std::optional<JobRecord> earlier,
                       FindJobByRequestIn(*db_, job.tenant(), job.request_id(),
                                          options_.checkpoint_root));
      if (earlier.has_value()) {
        out.record = *std::move(earlier);
        out.already_existed = true;
        return absl::OkStatus();
      }
    }
    if (check_new) RETURN_IF_ERROR(check_new());
    ASSIGN_OR_RETURN(int64_t number,
                     db_->QueryInt64("SELECT value FROM meta WHERE key = "
                                     "'next_job_number'"));
    RETURN_IF_ERROR(db_->Exec(
        "UPDATE meta SET value = value + 1 WHERE key = 'next_job_number'"));
    const absl::Time now = options_.clock->Now();
    job.set_id(JobIdForNumber(number));
    job.set_state(v1::QUEUED);
    *job.mutable_create_time() = ToProtoTime(now);
    *job.mutable_update_time() = ToProtoTime(now);
    *job.mutable_queue_time() = ToProtoTime(now);
    ASSIGN_OR_RETURN(SqliteStatement ins,
                     db_->Prepare("INSERT INTO jobs (create_seq, id, tenant, "
                                  "state, request_id, name, job) "
                                  "VALUES (?, ?, ?, ?, ?, ?, ?)"));
    ins.Bind(1, number)
        .BindText(2, job.id())
        .BindText(3, job.tenant())
        .Bind(4, job.state())
        .BindText(5, job.request_id())
        .BindText(6, job.name())
        .BindBlob(7, job.SerializeAsString());
    RETURN_IF_ERROR(ins.Run());
    out.record.job = std::move(job);
    out.record.create_seq = number;
    std::vector<v1::JobEvent> events(1);
    v1::StateChange* change = events[0].mutable_state_change();
    change->set_to(v1::QUEUED);
    change->set_reason("submitted");
    RETURN_IF_ERROR(InsertEvents(out.record, events));
    return WriteJobRow(out.record);
  }));
  return out;
}

absl::StatusOr<std::optional<JobRecord>> JobStore::FindJobByRequest(
    std::string_view tenant, std::string_view request_id) const {
  if (request_id.empty()) return std::nullopt;
  Reader reader(this);
  return FindJobByRequestIn(reader.db(), tenant, request_id,
                            options_.checkpoint_root);
}

absl::StatusOr<JobRecord> JobStore::GetJob(std::string_view id) const {
  Reader reader(this);
  return LoadJobFrom(reader.db(), id, options_.checkpoint_root);
}

absl::StatusOr<JobPage> JobStore::ListJobs(const ListJobsQuery& query) const {
  if (query.page_size < 0) {
    return InvalidFieldError(
        "page_size", absl::StrCat("must be >= 0, got ", query.page_size));
  }
  int32_t size = query.page_size == 0 ? kDefaultPageSize
                                      : std::min(query.page_size, kMaxPageSize);
  int64_t after = 0;
  if (!query.page_token.empty()) {
    ASSIGN_OR_RETURN(after, ParsePageToken(query));
  }
  std::string sql = absl::StrCat("SELECT ", kJobColumns,
                                 " FROM jobs WHERE create_seq > ?");
  if (!query.states.empty()) {
    std::vector<int> states(query.states.begin(), query.states.end());
    absl::StrAppend(&sql, " AND state IN (", absl::StrJoin(states, ","), ")");
  }
  if (!query.tenant.empty()) absl::StrAppend(&sql, " AND tenant = ?");
  if (!query.name_contains.empty()) {
    absl::StrAppend(&sql, " AND instr(name, ?) > 0");
  }
  absl::StrAppend(&sql, " ORDER BY create_seq LIMIT ?");

  Reader reader(this);
  ASSIGN_OR_RETURN(SqliteStatement q, reader.db().Prepare(sql));
  int index = 1;
  q.Bind(index++, after);
  if (!query.tenant.empty()) q.BindText(index++, query.tenant);
  if (!query.name_contains.empty()) q.BindText(index++, query.name_contains);
  q.Bind(index++, size + 1);  // one more tells whether another page exists
  JobPage page;
  int64_t last_seq = 0;
  int64_t bytes = 0;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    if (static_cast<int32_t>(page.jobs.size()) == size) {
      page.next_page_token = MakePageToken(last_seq, query);
      break;
    }
    ASSIGN_OR_RETURN(JobRecord r, RecordFromRow(q, options_.checkpoint_root));
    const int64_t job_bytes = static_cast<int64_t>(r.job.ByteSizeLong());
    if (!page.jobs.empty() && bytes + job_bytes > kMaxPageBytes) {
      page.next_page_token = MakePageToken(last_seq, query);
      break;
    }
    bytes += job_bytes;
    last_seq = r.create_seq;
    page.jobs.push_back(std::move(r.job));
  }
  return page;
}

absl::StatusOr<std::vector<JobRecord>> JobStore::JobsInStates(
    const std::vector<v1::JobState>& states) const {
  std::vector<int> ints(states.begin(), states.end());
  Reader reader(this);
  ASSIGN_OR_RETURN(SqliteStatement q,
                   reader.db().Prepare(absl::StrCat(
                       "SELECT ", kJobColumns, " FROM jobs WHERE state IN (",
                       absl::StrJoin(ints, ","), ") ORDER BY create_seq")));
  std::vector<JobRecord> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return out;
    ASSIGN_OR_RETURN(JobRecord r, RecordFromRow(q, options_.checkpoint_root));
    out.push_back(std::move(r));
  }
}

absl::StatusOr<std::map<v1::JobState, int64_t>> JobStore::CountJobsByState(
    std::string_view tenant) const {
  Reader reader(this);
  ASSIGN_OR_RETURN(
      SqliteStatement q,
      reader.db().Prepare(
          tenant.empty() ? "SELECT state, count(*) FROM jobs GROUP BY state"
                         : "SELECT state, count(*) FROM jobs WHERE tenant = "
                           "? GROUP BY state"));
  if (!tenant.empty()) q.BindText(1, tenant);
  std::map<v1::JobState, int64_t> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return out;
    out[static_cast<v1::JobState>(q.ColumnInt64(0))] = q.ColumnInt64(1);
  }
}

absl::StatusOr<std::map<std::string, v1::JobState>> JobStore::StatesOf(
    const std::vector<std::string>& ids) const {
  constexpr size_t kPerQuery = 256;  // well under SQLite's bound parameters
  std::map<std::string, v1::JobState> states;
  Reader reader(this);
  for (size_t first = 0; first < ids.size(); first += kPerQuery) {
    const size_t n = std::min(kPerQuery, ids.size() - first);
    std::string sql = "SELECT id, state FROM jobs WHERE id IN (?";
    for (size_t i = 1; i < n; ++i) sql += ", ?";
    sql += ")";
    ASSIGN_OR_RETURN(SqliteStatement q, reader.db().Prepare(sql));
    for (size_t i = 0; i < n; ++i) {
      q.BindText(static_cast<int>(i + 1), ids[first + i]);
    }
    while (true) {
      ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      states[q.ColumnText(0)] = static_cast<v1::JobState>(q.ColumnInt64(1));
    }
  }
  return states;
}

absl::StatusOr<int64_t> JobStore::CountJobs(std::string_view tenant,
                                            v1::JobState state) const {
  Reader reader(this);
  ASSIGN_OR_RETURN(SqliteStatement q,
                   reader.db().Prepare("SELECT count(*) FROM jobs "
                                       "WHERE state = ? AND tenant = ?"));
  q.Bind(1, state).BindText(2, tenant);
  ASSIGN_OR_RETURN(bool row, q.Step());
  return row ? q.ColumnInt64(0) : 0;
}

absl::StatusOr<JobRecord> JobStore::UpdateJob(std::string_view id,
                                              Durability durability,
                                              const Mutation& mutation) {
  return UpdateJobWithRungs(
      id, durability,
      [&](JobRecord& record, std::vector<v1::JobEvent>& events, RungBoard&) {
        return mutation(record, events);
      });
}

absl::StatusOr<JobRecord> JobStore::UpdateJobWithRungs(
    std::string_view id, Durability durability,
    const MutationWithRungs& mutation) {
  JobRecord record;
  RETURN_IF_ERROR(Commit(
      durability, "update",
      [&]() -> absl::Status {
        ASSIGN_OR_RETURN(record, LoadJob(id));
        const JobRecord before = record;
        std::vector<v1::JobEvent> events;
        RungBoard rungs(db_.get());
        ASSIGN_OR_RETURN(bool changed, mutation(record, events, rungs));
        if (!changed) {
          record = before;
          return absl::OkStatus();  // commits an empty transaction: cheap
        }
        if (record.job.id() != before.job.id() ||
            record.job.tenant() != before.job.tenant() ||
            record.job.request_id() != before.job.request_id() ||
            record.create_seq != before.create_seq) {
          return absl::InternalError(absl::StrCat(
              "job ", std::string(id), ": a mutation changed its identity"));
        }
        *record.job.mutable_update_time() = ToProtoTime(options_.clock->Now());
        RETURN_IF_ERROR(InsertEvents(record, events));
        RETURN_IF_ERROR(WriteJobRow(record));
        return RecordEndedAttempts(before.job, record.job);
      },
      id));
  return record;
}

absl::Status JobStore::DeleteJob(
    std::string_view id,
    const std::function<absl::Status(const JobRecord&)>& check) {
  return Commit(
      Durability::kTransition, "delete",
      [&]() -> absl::Status {
        ASSIGN_OR_RETURN(JobRecord record, LoadJob(id));
        RETURN_IF_ERROR(check(record));
        for (const char* sql : {"DELETE FROM events WHERE job_seq = ?",
                                "DELETE FROM logs WHERE job_seq = ?",
                                "DELETE FROM metric_points WHERE job_seq = ?",
                                "DELETE FROM metric_series WHERE job_seq = ?",
                                "DELETE FROM halving_entries WHERE job_seq = ?",
                                "DELETE FROM jobs WHERE create_seq = ?"}) {
          ASSIGN_OR_RETURN(SqliteStatement del, db_->Prepare(sql));
          del.Bind(1, record.create_seq);
          RETURN_IF_ERROR(del.Run());
        }
        return absl::OkStatus();
      },
      id);
}

}  // namespace trainyard::server
