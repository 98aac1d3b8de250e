#include "worker/attempt_dirs.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/log.h"

namespace trainyard::worker {
namespace {

namespace fs = std::filesystem;

struct EndedAttempt {
  fs::path dir;
  fs::file_time_type used;
};

// The later of the directory's and its log's modification time: the log is
// written for as long as the attempt runs, the directory only as it starts.
fs::file_time_type LastUsed(const fs::path& dir) {
  std::error_code ec;
  fs::file_time_type used = fs::last_write_time(dir, ec);
  if (ec) used = fs::file_time_type::min();
  const fs::file_time_type log = fs::last_write_time(dir / "log", ec);
  return ec ? used : std::max(used, log);
}

// Every attempt directory under `jobs_dir` not in `active`.
std::vector<EndedAttempt> EndedAttempts(const fs::path& jobs_dir,
                                        const std::set<AttemptKey>& active) {
  std::vector<EndedAttempt> ended;
  std::error_code ec;
  for (fs::directory_iterator job(jobs_dir, ec), end; !ec && job != end;
       job.increment(ec)) {
    std::error_code type_ec;
    if (!job->is_directory(type_ec) || job->is_symlink(type_ec)) continue;
    const std::string job_id = job->path().filename().string();
    std::error_code inner_ec;
    for (fs::directory_iterator a(job->path(), inner_ec), a_end;
         !inner_ec && a != a_end; a.increment(inner_ec)) {
      int32_t attempt = 0;
      if (!absl::SimpleAtoi(a->path().filename().string(), &attempt) ||
          !a->is_directory(type_ec) || a->is_symlink(type_ec) ||
          active.contains({job_id, attempt})) {
        continue;
      }
      ended.push_back({a->path(), LastUsed(a->path())});
    }
  }
  return ended;
}

}  // namespace

int PruneAttemptDirs(const std::string& jobs_dir,
                     const std::set<AttemptKey>& active, int keep) {
  std::vector<EndedAttempt> ended = EndedAttempts(jobs_dir, active);
  if (static_cast<int>(ended.size()) <= keep) return 0;
  // Newest first; the ones past `keep` go.
  std::sort(ended.begin(), ended.end(),
            [](const EndedAttempt& a, const EndedAttempt& b) {
              return a.used > b.used;
            });
  int removed = 0;
  for (size_t i = static_cast<size_t>(std::max(keep, 0)); i < ended.size();
       ++i) {
    std::error_code ec;
    fs::remove_all(ended[i].dir, ec);
    if (ec) {
      YARD_LOG(WARNING) << "cannot remove " << ended[i].dir.string() << ": "
                        << ec.message();
      continue;
    }
    ++removed;
    std::error_code parent_ec;
    const fs::path job_dir = ended[i].dir.parent_path();
    if (fs::is_empty(job_dir, parent_ec) && !parent_ec) {
      fs::remove(job_dir, parent_ec);
    }
  }
  return removed;
}

}  // namespace trainyard::worker
