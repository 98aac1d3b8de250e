#include "server/checkpoint_paths.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/job_store.h"

namespace trainyard::server {
namespace {

namespace fs = std::filesystem;

// `path` moved from `old_dir` to `new_dir` when it lies in it; as it was
// otherwise.
std::string Rebased(const std::string& path, const std::string& old_dir,
                    const std::string& new_dir) {
  if (old_dir.empty() || old_dir == new_dir) return path;
  if (path == old_dir) return new_dir;
  if (path.starts_with(old_dir) && path.size() > old_dir.size() &&
      path[old_dir.size()] == '/') {
    return absl::StrCat(new_dir, path.substr(old_dir.size()));
  }
  return path;
}

}  // namespace

std::string CheckpointDirOf(const std::string& root,
                            const std::string& job_id) {
  return absl::StrCat(root, "/", job_id);
}

std::optional<int64_t> JobNumberOf(const std::string& name) {
  if (!name.starts_with("j-")) return std::nullopt;
  const std::string digits = name.substr(2);
  // Any number the store could reach; more digits could overflow a next
  // number (a job may make a directory of any name in the shared root).
  if (digits.size() > 18) return std::nullopt;
  int64_t number = 0;
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return std::nullopt;
    }
  }
  if (!absl::SimpleAtoi(digits, &number) || number <= 0 ||
      JobIdForNumber(number) != name) {
    return std::nullopt;
  }
  return number;
}

void PlaceCheckpointsUnder(const std::string& root, v1::Job& job) {
  if (root.empty()) return;
  if (!job.checkpoint_dir().empty()) {
    const std::string old_dir = job.checkpoint_dir();
    const std::string new_dir = CheckpointDirOf(root, job.id());
    if (old_dir != new_dir) {
      job.set_checkpoint_dir(new_dir);
      if (job.has_last_checkpoint()) {
        job.mutable_last_checkpoint()->set_path(
            Rebased(job.last_checkpoint().path(), old_dir, new_dir));
      }
      if (job.has_result()) {
        v1::TrainFinished* r = job.mutable_result();
        r->set_checkpoint_path(Rebased(r->checkpoint_path(), old_dir, new_dir));
        r->set_best_checkpoint_path(
            Rebased(r->best_checkpoint_path(), old_dir, new_dir));
      }
    }
  }
  // Picked as SOURCE_DIR/step-N: the source's directory follows the root
  // as the source's own checkpoint_dir does.
  if (!job.warm_start_checkpoint().empty() && job.spec().has_warm_start()) {
    const fs::path picked(job.warm_start_checkpoint());
    const std::string& source = job.spec().warm_start().job();
    if (!source.empty() && picked.parent_path().filename() == source) {
      job.set_warm_start_checkpoint(absl::StrCat(
          CheckpointDirOf(root, source), "/", picked.filename().string()));
    }
  }
}

absl::StatusOr<JobDirs> FindJobDirs(const std::string& root) {
  JobDirs found;
  std::error_code ec;
  fs::directory_iterator it(root, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::optional<int64_t> number =
        JobNumberOf(it->path().filename().string());
    if (!number.has_value()) continue;
    ++found.count;
    found.highest = std::max(found.highest, *number);
  }
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot list the checkpoint root ", root, ": ", ec.message()));
  }
  return found;
}

absl::StatusOr<std::string> SetAsideStaleCheckpoints(
    const std::string& root, const std::string& job_id) {
  const fs::path dir = CheckpointDirOf(root, job_id);
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(dir, ec);
  if (!fs::exists(status)) return std::string();
  if (fs::is_directory(status) && fs::is_empty(dir, ec) && !ec) {
    return std::string();
  }
  for (int n = 1; n < 1000; ++n) {
    const fs::path aside = absl::StrCat(dir.string(), ".stale-", n);
    if (fs::exists(fs::symlink_status(aside, ec))) continue;
    fs::rename(dir, aside, ec);
    if (ec) break;
    return aside.string();
  }
  return absl::InternalError(absl::StrCat(
      "job ", job_id, ": ", dir.string(),
      " holds checkpoints this job did not write, and they cannot be moved "
      "aside",
      ec ? absl::StrCat(": ", ec.message()) : std::string()));
}

}  // namespace trainyard::server
