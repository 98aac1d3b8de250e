// JobStore: the entries of halving groups at their rungs (RungBoard), read
// and written in the transaction of the job update that ranks them.
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "common/status_macros.h"
#include "server/job_store.h"

namespace trainyard::server {

absl::StatusOr<std::optional<std::vector<double>>> RungBoard::Enter(
    const JobRecord& record, int64_t rung, double loss) {
  ASSIGN_OR_RETURN(SqliteStatement entered,
                   db_->Prepare("SELECT 1 FROM halving_entries WHERE "
                                "job_seq = ? AND rung >= ? LIMIT 1"));
  entered.Bind(1, record.create_seq).Bind(2, rung);
  ASSIGN_OR_RETURN(bool already, entered.Step());
  if (already) return std::nullopt;
  const std::string& group = record.job.spec().halving().group();
  ASSIGN_OR_RETURN(SqliteStatement others,
                   db_->Prepare("SELECT loss FROM halving_entries WHERE "
                                "tenant = ? AND grp = ? AND rung = ?"));
  others.BindText(1, record.job.tenant()).BindText(2, group).Bind(3, rung);
  std::vector<double> losses;
  for (;;) {
    ASSIGN_OR_RETURN(bool row, others.Step());
    if (!row) break;
    losses.push_back(others.ColumnDouble(0));
  }
  ASSIGN_OR_RETURN(SqliteStatement ins,
                   db_->Prepare("INSERT INTO halving_entries (tenant, grp, "
                                "rung, job_seq, loss) VALUES (?, ?, ?, ?, ?)"));
  ins.BindText(1, record.job.tenant())
      .BindText(2, group)
      .Bind(3, rung)
      .Bind(4, record.create_seq)
      .BindDouble(
          5, std::isnan(loss) ? std::numeric_limits<double>::infinity() : loss);
  RETURN_IF_ERROR(ins.Run());
  return losses;
}

}  // namespace trainyard::server
