// JobStore: group commit (see job_store.h). The leader of a batch runs the
// queued writes on the write connection, one SAVEPOINT each, and commits
// them with one COMMIT (one fsync of the WAL at synchronous=FULL).
#include <algorithm>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/job_store.h"

namespace trainyard::server {
namespace {

// The payload that marks a failed commit (IsStoreWriteFailure).
constexpr char kStoreWriteFailure[] = "type.trainyard/store-write-failure";

}  // namespace

bool IsStoreWriteFailure(const absl::Status& status) {
  return status.GetPayload(kStoreWriteFailure).has_value();
}

absl::Status AsStoreWriteFailure(absl::Status status) {
  status.SetPayload(kStoreWriteFailure, absl::Cord("1"));
  return status;
}

absl::Status JobStore::Commit(Durability durability, std::string_view operation,
                              const std::function<absl::Status()>& body,
                              std::string_view job_id) {
  Write write{durability, operation, &body, job_id};
  absl::MutexLock lock(&queue_mu_);
  queue_.push_back(&write);
  if (!leader_active_) {  // then the queue held only this write
    leader_active_ = true;
    write.lead = true;
  }
  // absl evaluates the condition for us, so a waiter wakes only when its
  // batch is done or it has been handed the lead (no thundering herd).
  queue_mu_.Await(absl::Condition(
      +[](Write* w) { return w->done || w->lead; }, &write));
  if (write.done) return write.result;
  // Lead one batch: the oldest queued writes, ours first.
  const size_t n = std::min(
      queue_.size(), static_cast<size_t>(std::max(1, options_.max_batch)));
  std::vector<Write*> batch(queue_.begin(), queue_.begin() + n);
  queue_.erase(queue_.begin(), queue_.begin() + n);
  queue_mu_.Unlock();
  CommitBatch(batch);
  queue_mu_.Lock();
  for (Write* w : batch) w->done = true;
  // Hand the lead to the oldest write that queued meanwhile.
  if (queue_.empty()) {
    leader_active_ = false;
  } else {
    queue_.front()->lead = true;
  }
  return write.result;
}

int32_t JobStore::QueuedWrites() const {
  absl::MutexLock lock(&queue_mu_);
  int32_t n = 0;
  for (const Write* w : queue_) n += w->lead ? 0 : 1;
  return n;
}

void JobStore::CommitBatch(const std::vector<Write*>& batch) {
  absl::MutexLock lock(&mu_);
  std::vector<v1::StateChange> changes;
  absl::Status s = CommitBatchLocked(batch, changes);
  if (!s.ok()) {
    // After some failures SQLite has already rolled back; that is fine.
    db_->Exec("ROLLBACK").IgnoreError();
    const absl::Status failed = AsStoreWriteFailure(absl::Status(
        s.code(), absl::StrCat("store: commit failed, nothing was written: ",
                               s.message())));
    for (Write* w : batch) {
      if (w->result.ok()) w->result = failed;
    }
    if (options_.on_commit_failure) options_.on_commit_failure(failed);
    return;
  }
  if (options_.on_state_change) {
    for (const v1::StateChange& c : changes) options_.on_state_change(c);
  }
  if (options_.on_commit) {
    std::vector<std::string> job_ids;
    for (const Write* w : batch) {
      if (!w->job_id.empty()) job_ids.emplace_back(w->job_id);
    }
    options_.on_commit(job_ids);
  }
}

absl::Status JobStore::CommitBatchLocked(
    const std::vector<Write*>& batch, std::vector<v1::StateChange>& changes) {
  Durability durability = Durability::kTelemetry;
  for (const Write* w : batch) {
    if (w->durability == Durability::kTransition) {
      durability = Durability::kTransition;
    }
  }
  if (durability != current_durability_) {
    RETURN_IF_ERROR(db_->Exec(durability == Durability::kTransition
                                  ? "PRAGMA synchronous=FULL"
                                  : "PRAGMA synchronous=NORMAL"));
    current_durability_ = durability;
  }
  RETURN_IF_ERROR(db_->Exec("BEGIN IMMEDIATE"));
  for (Write* w : batch) {
    uncommitted_changes_.clear();
    RETURN_IF_ERROR(db_->Exec("SAVEPOINT w"));
    absl::Status s = (*w->body)();
    if (s.ok() && options_.fault_injector) {
      s = options_.fault_injector(w->operation);
    }
    if (s.ok()) {
      RETURN_IF_ERROR(db_->Exec("RELEASE w"));
      changes.insert(changes.end(), uncommitted_changes_.begin(),
                     uncommitted_changes_.end());
    } else {
      // This write alone is undone; the batch goes on.
      w->result = s;
      RETURN_IF_ERROR(db_->Exec("ROLLBACK TO w"));
      RETURN_IF_ERROR(db_->Exec("RELEASE w"));
    }
  }
  uncommitted_changes_.clear();
  if (options_.commit_fault) RETURN_IF_ERROR(options_.commit_fault());
  return db_->Exec("COMMIT");
}

}  // namespace trainyard::server
