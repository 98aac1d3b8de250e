#include "server/checkpoint_paths.h"

#include <filesystem>

#include "absl/strings/str_cat.h"

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

}  // namespace trainyard::server
