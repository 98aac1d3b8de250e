// JobStore: the durable record of every job, its events and its log, kept in
// one SQLite database in WAL mode (STATE_DIR/trainyard.db). It is the source
// of truth for job state: the server commits a change here before it tells
// anyone about it or acts on it, and recovers everything from here after a
// restart.
//
// Durability: job creation and state transitions commit with
// synchronous=FULL (the WAL is fsynced before the call returns). Trainer
// progress events, wait reasons and log bytes commit with synchronous=NORMAL:
// they survive a crash of the process (the WAL is in the OS page cache) and
// may lose only their last few commits on power loss, which costs a progress
// line, never a job or a transition. A FULL commit also makes every earlier
// NORMAL commit durable, since the WAL is written in order. A batch (below)
// commits with FULL when any of its writes is a transition.
//
// Retention: state-change events are kept forever. Trainer events are pruned
// to the most recent `trainer_events_kept` per job; a reader resuming from a
// pruned sequence gets OUT_OF_RANGE. Each job's log keeps its last
// `log_bytes_kept` bytes: whole oldest chunks (one worker message each) are
// dropped once they lie entirely before that tail, so a little more than the
// cap may be held. Offsets keep counting from the first byte ever written.
// Each job's training curve (its progress reports and evaluations, written
// with the trainer events that carry them: job_store_metrics.cc) is thinned
// instead of cut: each series keeps at most `metric_points_kept` points
// spread over the whole run (v1::JobMetrics).
//
// Group commit: concurrent writes (CreateJob, UpdateJob, AppendLog) are
// batched into one SQLite transaction and one fsync. A writer queues its
// write; the first writer to find no batch in progress becomes the leader,
// runs every queued write in its own SAVEPOINT and commits them all at once,
// while later writers queue up behind it for the next batch. Every call
// returns only after its batch is durable (or failed). A write whose own
// body fails is rolled back alone; a failed COMMIT (disk full, I/O error)
// fails every write of the batch with "store: ..." and leaves the store as
// it was before the batch. Reads use a small pool of read-only connections,
// so they see only committed data and never wait for a commit's fsync.
//
// Beside the jobs it keeps the administrators' drains of workers
// (job_store_drains.cc), committed as transitions, and the usage of every
// attempt that ended (server/attempt_usage.h), written in the same
// transaction as the change that ended it and kept after the job is
// deleted.
//
// A JobStore is safe for concurrent use.
#ifndef TRAINYARD_SERVER_JOB_STORE_H_
#define TRAINYARD_SERVER_JOB_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "server/attempt_usage.h"
#include "server/sqlite_db.h"
#include "trainyard/v1/cluster.pb.h"
#include "trainyard/v1/jobs.pb.h"
#include "trainyard/v1/worker.pb.h"

namespace trainyard::server {

// Everything the store keeps about one job.
struct JobRecord {
  v1::Job job;
  int64_t create_seq = 0;  // creation order, assigned by the store
  // Set when CancelJob arrived while the job was running: the worker was
  // told to stop it, and its exit (or its worker's loss) makes the job
  // CANCELLED with this reason. Empty: no cancel pending.
  std::string cancel_reason;
  std::vector<int32_t> gpu_indices;  // GPUs of the current attempt
  int64_t last_sequence = 0;         // sequence number of its latest event

  bool cancel_requested() const { return !cancel_reason.empty(); }
};

enum class Durability {
  kTransition,  // synchronous=FULL
  kTelemetry,   // synchronous=NORMAL (see the file comment)
};

// Whether `status` is a write the store could not commit (its disk full, an
// I/O error): nothing of it was written, and it may succeed once the store
// heals. Other errors of a write (a job not found, a failed check) are not.
bool IsStoreWriteFailure(const absl::Status& status);
// `status` marked as such a failure.
absl::Status AsStoreWriteFailure(absl::Status status);

// What JobStore::Open found in its file, before it wrote anything.
struct JobStoreFound {
  // No schema at all: a missing, 0-byte or empty SQLite file. (A copy of
  // a live store's trainyard.db without its -wal file looks like this.)
  bool is_new = false;
  int64_t version = 0;  // the schema version (0 when new)
};

struct JobStoreOptions {
  std::string path;  // the database file; created if missing
  // Jobs are read with their checkpoint paths under this root, whatever
  // root they were stored under (server/checkpoint_paths.h). Empty: as
  // stored.
  std::string checkpoint_root;
  // Called once the file has passed the store's own checks and before
  // anything is written to it (a new store's schema, an upgrade, the switch
  // to WAL): an error stops the opening, is returned, and leaves the file
  // as it was (one this opening created is removed).
  std::function<absl::Status(const JobStoreFound&)> before_write;
  int32_t trainer_events_kept = 1000;
  int64_t log_bytes_kept = int64_t{8} << 20;
  // Points of each series of a job's training curve (4 to 10,000: two
  // series of 10,000 points, about 90 bytes each, stay within the 4 MiB a
  // gRPC client takes in one GetJobMetrics response).
  int32_t metric_points_kept = 1000;
  Clock* clock = Clock::Real();
  // Called after every successful commit (once per batch) with the ids of
  // the jobs it updated, appended a log to or deleted (empty when it wrote
  // none), with the store's write lock held: it must not call back into the
  // store (e.g. it notifies waiters).
  std::function<void(const std::vector<std::string>& job_ids)> on_commit;
  // Called after each successful write once per state change it recorded
  // (metrics count transitions here), under the same rules as on_commit.
  std::function<void(const v1::StateChange&)> on_state_change;
  // Called after each batch that could not be committed (once per batch,
  // with the failure), under the same rules as on_commit.
  std::function<void(const absl::Status&)> on_commit_failure;
  // Tests inject failing writes here: called before each COMMIT with the
  // operation's name; a non-OK status rolls the write back and is returned.
  std::function<absl::Status(std::string_view operation)> fault_injector;
  // Tests inject a failing COMMIT here (as a full disk would): called once
  // per batch; a non-OK status fails the whole batch as COMMIT would.
  std::function<absl::Status()> commit_fault;
  // The most writes one batch takes (bounds a batch's latency).
  int32_t max_batch = 512;
};

struct ListJobsQuery {
  int32_t page_size = 0;  // 0 = 50; capped at 500; negative INVALID_ARGUMENT
  std::string page_token;
  std::vector<v1::JobState> states;  // empty = all
  std::string tenant;                // empty = all
  std::string name_contains;         // empty = all
};

struct JobPage {
  std::vector<v1::Job> jobs;  // oldest first
  std::string next_page_token;  // empty on the last page
};

struct LogRead {
  int64_t offset = 0;  // offset of `data` (>= the requested one if trimmed)
  std::string data;
  int64_t end = 0;     // the log's total size so far
};

// The entries of halving groups at their rungs (spec.halving,
// server/halving.h): each job's eval loss at each rung it was ranked at,
// kept until the job is deleted. Only an UpdateJobWithRungs mutation gets
// one, to read and write them in its transaction.
class RungBoard {
 public:
  // Enters the eval loss of `record`'s job at `rung` of its halving group
  // (spec.halving.group, of its tenant), unless the job has an entry at
  // that rung or a later one: nullopt then, and nothing is written.
  // Otherwise returns the losses the group's other jobs entered at the
  // rung before it. A loss that is not a number is entered as +infinity.
  absl::StatusOr<std::optional<std::vector<double>>> Enter(
      const JobRecord& record, int64_t rung, double loss);

 private:
  friend class JobStore;
  explicit RungBoard(SqliteDb* db) : db_(db) {}
  SqliteDb* db_;  // the store's write connection, in its transaction
};

class JobStore {
 public:
  static constexpr int32_t kSchemaVersion = 8;
  static constexpr int32_t kDefaultPageSize = 50;
  static constexpr int32_t kMaxPageSize = 500;
  // A page ends before the job that would take its jobs past this many
  // encoded bytes (it always holds one), so that specs of up to 1 MiB never
  // make a response larger than gRPC's default 4 MiB a client accepts.
  static constexpr int64_t kMaxPageBytes = 3 << 20;

  // Opens or creates the store. A store of an older schema (1 to 7) is
  // brought up to date in one transaction, and switched to WAL only once
  // that committed. A file that is not a Trainyard job store, one with a
  // schema version this build does not know, or one whose upgrade would
  // need a job record that cannot be read, is refused with
  // FAILED_PRECONDITION (DATA_LOSS for the record) and left untouched;
  // every check runs before anything is written.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(JobStoreOptions options);

  struct Created {
    JobRecord record;
    bool already_existed = false;
  };
  // Stores `job` as a new QUEUED job: assigns its id ("j-000001", ...) and
  // create time and records event 1 (the state change to QUEUED). When
  // job.request_id is set and a job of the same tenant was created with it,
  // returns that job instead, with already_existed. `check_new`, when
  // given, runs only when a new job would be created, before it is; its
  // error is returned and nothing is stored. (A retry of a submission
  // whose first try got through then returns that job, whatever the check
  // would now say.)
  absl::StatusOr<Created> CreateJob(
      v1::Job job, const std::function<absl::Status()>& check_new = nullptr);

  // The job `tenant` created with `request_id`, if any (none for "").
  absl::StatusOr<std::optional<JobRecord>> FindJobByRequest(
      std::string_view tenant, std::string_view request_id) const;
  // NOT_FOUND naming the id when there is no such job.
  absl::StatusOr<JobRecord> GetJob(std::string_view id) const;
  absl::StatusOr<JobPage> ListJobs(const ListJobsQuery& query) const;
  // All jobs in any of `states`, oldest first.
  absl::StatusOr<std::vector<JobRecord>> JobsInStates(
      const std::vector<v1::JobState>& states) const;
  // Jobs in each state: all of them, or `tenant`'s.
  absl::StatusOr<std::map<v1::JobState, int64_t>> CountJobsByState(
      std::string_view tenant = "") const;
  // The state of each job of `ids` that exists (an id without a job is not
  // in the map). Reads only the state column: cheap for many ids.
  absl::StatusOr<std::map<std::string, v1::JobState>> StatesOf(
      const std::vector<std::string>& ids) const;
  // Ids of ended jobs that ended at or before `cutoff`, the longest ended
  // first, at most `limit` (an index, not a scan of the ended jobs).
  absl::StatusOr<std::vector<std::string>> EndedBy(absl::Time cutoff,
                                                   int32_t limit) const;
  // When the first job that ended after `after` ended; nullopt when none.
  absl::StatusOr<std::optional<absl::Time>> FirstEndAfter(
      absl::Time after) const;
  // Makes the next job numbers start after `number` when they would not
  // already (job numbers are never handed out twice); returns how many
  // numbers that skipped (0: none). The server uses it so that no new job
  // takes the id of a directory already in the checkpoint root.
  absl::StatusOr<int64_t> SkipJobNumbersThrough(int64_t number);

  // The number of jobs of `tenant` in `state` (committed ones).
  absl::StatusOr<int64_t> CountJobs(std::string_view tenant,
                                    v1::JobState state) const;

  // Read-modify-write of one job in one transaction. The mutation sees the
  // current record; it may change it and add events (payload only: the
  // store fills in job id, sequence and time). It returns false to leave the
  // job as it was, or an error to abort. The job's id, tenant and
  // request_id cannot change. Returns the record as stored afterwards.
  using Mutation = std::function<absl::StatusOr<bool>(
      JobRecord& record, std::vector<v1::JobEvent>& new_events)>;
  absl::StatusOr<JobRecord> UpdateJob(std::string_view id,
                                      Durability durability,
                                      const Mutation& mutation);
  // The same, the mutation also reading and writing halving rungs in the
  // transaction.
  using MutationWithRungs = std::function<absl::StatusOr<bool>(
      JobRecord& record, std::vector<v1::JobEvent>& new_events,
      RungBoard& rungs)>;
  absl::StatusOr<JobRecord> UpdateJobWithRungs(
      std::string_view id, Durability durability,
      const MutationWithRungs& mutation);

  // Deletes the job, its events, its log, its training curve and its
  // halving entries in one transaction once `check`, given the current
  // record, passes (its error aborts and is returned). NOT_FOUND naming
  // the id when there is no such job.
  // The job's number is never handed out again.
  absl::Status DeleteJob(
      std::string_view id,
      const std::function<absl::Status(const JobRecord&)>& check);

  // Events with sequence > after_sequence, at most max_events, in order.
  // OUT_OF_RANGE when events after after_sequence were pruned (after_sequence
  // 0 means "everything still held") or after_sequence is past the last one.
  absl::StatusOr<std::vector<v1::JobEvent>> ReadEvents(
      std::string_view id, int64_t after_sequence, int32_t max_events) const;

  // The job's training curve (v1::JobMetrics), by step; NOT_FOUND naming
  // the id when there is no such job.
  absl::StatusOr<v1::JobMetrics> ReadMetrics(std::string_view id) const;

  // Writes queued for the next batch, not yet being committed (tests watch
  // it to line up a batch).
  int32_t QueuedWrites() const ABSL_LOCKS_EXCLUDED(queue_mu_);

  // Appends bytes to the job's log, trimming its head past the cap.
  absl::Status AppendLog(std::string_view id, std::string_view bytes);
  // Up to max_bytes of the log from `offset` (moved forward to the oldest
  // byte still held). OUT_OF_RANGE when offset is past the end.
  absl::StatusOr<LogRead> ReadLog(std::string_view id, int64_t offset,
                                  int64_t max_bytes) const;

  // The usage of every ended attempt that overlaps [start, end), of
  // `tenant` (empty: every tenant's), in no particular order. Attempts of
  // deleted jobs are included.
  absl::StatusOr<std::vector<AttemptUsage>> EndedAttempts(
      absl::Time start, absl::Time end, std::string_view tenant) const;

  // What every ended attempt held up to `now`, summed by tenant over all
  // time (deleted jobs' attempts included), summed by the database. An
  // attempt recorded as ending after `now` (a clock set back) counts up to
  // `now`, as in GetUsage.
  struct UsageTotal {
    double gpu_seconds = 0;
    double cpu_slot_seconds = 0;
  };
  absl::StatusOr<std::map<std::string, UsageTotal>> EndedUsageByTenant(
      absl::Time now) const;

  // Creates or replaces the drain of drain.worker_id.
  absl::Status PutWorkerDrain(const v1::WorkerDrain& drain);
  // Removes a worker's drain; NOT_FOUND when it has none.
  absl::Status DeleteWorkerDrain(std::string_view worker_id);
  // Every drain, by worker id.
  absl::StatusOr<std::vector<v1::WorkerDrain>> ListWorkerDrains() const;

  // The workers that have connected and neither left (shut down) nor been
  // forgotten since, each with its latest hello (its running jobs left
  // out) and whether it was declared lost: after a server restart they are
  // still known, a lost one LOST at once and any other LOST if not back
  // within its lease. Putting a hello (it connected) clears `lost`.
  struct KnownWorker {
    v1::WorkerHello hello;
    bool lost = false;
  };
  absl::Status PutKnownWorker(const v1::WorkerHello& hello);
  absl::Status MarkKnownWorkerLost(std::string_view worker_id);
  // OK also when the worker is not there.
  absl::Status DeleteKnownWorker(std::string_view worker_id);
  // Deletes the worker's known row and its drain together (one commit);
  // OK when it has neither.
  absl::Status ForgetWorker(std::string_view worker_id);
  // By worker id; a row that does not parse is skipped with a warning.
  absl::StatusOr<std::vector<KnownWorker>> ListKnownWorkers() const;

  // The server's latest sign of life (the scheduler marks it about every
  // second while jobs hold workers): after a restart, the latest the previous
  // server can have heard from any worker, so that a worker that never comes
  // back is not charged for the time the server was down. MarkAlive commits
  // without waiting for the disk (a mark lost with a crash only makes the next
  // start charge a little less). nullopt before the first mark.
  absl::Status MarkAlive(absl::Time now);
  absl::StatusOr<std::optional<absl::Time>> LastAlive() const;

 private:
  JobStore(JobStoreOptions options, std::unique_ptr<SqliteDb> db)
      : options_(std::move(options)), db_(std::move(db)) {}

  // One queued write: its body runs inside the batch's transaction.
  struct Write {
    Durability durability;
    std::string_view operation;
    const std::function<absl::Status()>* body;
    std::string_view job_id;  // the job it writes; empty for none or new
    absl::Status result = absl::OkStatus();
    bool done = false;  // its batch committed or failed
    bool lead = false;  // it runs the next batch
  };

  absl::Status InitSchema() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues `body` for the next batch and returns once that batch committed
  // or failed. REQUIRES: mu_ and queue_mu_ not held.
  absl::Status Commit(Durability durability, std::string_view operation,
                      const std::function<absl::Status()>& body,
                      std::string_view job_id = {})
      ABSL_LOCKS_EXCLUDED(mu_, queue_mu_);
  // Runs `batch` in one transaction; sets each write's result.
  void CommitBatch(const std::vector<Write*>& batch) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status CommitBatchLocked(const std::vector<Write*>& batch,
                                 std::vector<v1::StateChange>& changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status InTransaction(Durability durability, std::string_view operation,
                             const std::function<absl::Status()>& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<JobRecord> LoadJob(std::string_view id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A read connection leased from the pool for one call: it sees only
  // committed data, and readers never wait on each other or on a commit.
  class Reader {
   public:
    explicit Reader(const JobStore* store);
    ~Reader();
    Reader(const Reader&) = delete;
    Reader& operator=(const Reader&) = delete;
    SqliteDb& db() { return *db_; }

   private:
    const JobStore* store_;
    std::unique_ptr<SqliteDb> db_;
  };
  absl::Status InsertEvents(JobRecord& record,
                            std::vector<v1::JobEvent>& events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PruneTrainerEvents(int64_t create_seq)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The training curve's share of a stored trainer event: a progress report
  // or evaluation becomes a point (thinning its series past the cap); a
  // start from a checkpoint drops the points past its step.
  absl::Status RecordMetricPoint(int64_t create_seq, const v1::JobEvent& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Upgrade to schema 7: the curves of the trainer events still held.
  absl::Status FillMetricsFromEvents() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteJobRow(const JobRecord& record)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records the usage of the attempts of `after` that have ended but had
  // not in `before`.
  absl::Status RecordEndedAttempts(const v1::Job& before, const v1::Job& after)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Upgrade of an older store: every job, read before anything is written
  // (a record that cannot be parsed stops the upgrade there), then what is
  // derived from each record (end_ms since schema 3, name since 4, its
  // ended attempts' usage since 5) written for each.
  absl::StatusOr<std::vector<JobRecord>> ReadEveryJob()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status FillDerivedColumns(const std::vector<JobRecord>& jobs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The schema of a new store, or the upgrade of one of `version`, in one
  // transaction.
  absl::Status CreateOrUpgradeSchema(bool fresh, int64_t version,
                                     const std::vector<JobRecord>& jobs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const JobStoreOptions options_;
  // Lock order: queue_mu_ is never held while taking mu_ or read_mu_.
  mutable absl::Mutex queue_mu_;
  std::vector<Write*> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool leader_active_ ABSL_GUARDED_BY(queue_mu_) = false;

  mutable absl::Mutex mu_;  // the write connection
  std::unique_ptr<SqliteDb> db_ ABSL_GUARDED_BY(mu_);
  static constexpr int kReadConnections = 4;
  mutable absl::Mutex read_mu_;
  // Idle read connections (the pool); a Reader takes one while it reads.
  mutable std::vector<std::unique_ptr<SqliteDb>> idle_readers_
      ABSL_GUARDED_BY(read_mu_);
  Durability current_durability_ ABSL_GUARDED_BY(mu_) = Durability::kTransition;
  // State changes of the transaction in progress, for on_state_change.
  std::vector<v1::StateChange> uncommitted_changes_ ABSL_GUARDED_BY(mu_);
};

// "j-000042": job ids sort by creation (lexically up to j-999999, and by
// number beyond; ListJobs always orders by creation).
std::string JobIdForNumber(int64_t number);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_JOB_STORE_H_
