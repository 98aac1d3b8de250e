// Where jobs' checkpoints live on the checkpoint root, and the rules that
// keep each job to its own directory.
//
// Job J's checkpoints are always in CHECKPOINT_ROOT/J, under the root the
// server runs with now: a job's stored paths are never trusted to name
// them, so moving the whole state dir (or restarting with another
// --checkpoint-root holding the same directories) keeps every job's
// checkpoints. A directory named after a job that the job did not write
// (the store is older than the checkpoint root, or was started anew beside
// it) is never handed to that job.
//
// The functions are safe to call from any thread; the ones that touch the
// file system expect the caller to be the only one changing `root`'s
// job directories (the server holds the root's lock).
#ifndef TRAINYARD_SERVER_CHECKPOINT_PATHS_H_
#define TRAINYARD_SERVER_CHECKPOINT_PATHS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "trainyard/v1/jobs.pb.h"

namespace trainyard::server {

// ROOT/<job_id>.
std::string CheckpointDirOf(const std::string& root, const std::string& job_id);

// The number of job id `name` ("j-000042" -> 42); nullopt for any other
// name (".deleting-j-000042", "j-000042.stale-1", "j-42").
std::optional<int64_t> JobNumberOf(const std::string& name);

// Moves `job`'s checkpoint paths under `root`. A job that has been
// assigned (its checkpoint_dir is set) gets ROOT/<id>; the paths of its
// checkpoints that lay in its old directory (last_checkpoint, the
// result's) follow it, and its warm start's checkpoint moves to the source
// job's directory under `root`. Nothing changes for an empty `root`.
void PlaceCheckpointsUnder(const std::string& root, v1::Job& job);

// The directories in `root` named as job ids.
struct JobDirs {
  int64_t count = 0;
  int64_t highest = 0;  // the highest job number among them; 0 when none
};
absl::StatusOr<JobDirs> FindJobDirs(const std::string& root);

// A job's first attempt is about to start: a ROOT/<job_id> that exists and
// is not an empty directory was written by someone else (an earlier job of
// the same id) and would be resumed from. It is renamed to
// ROOT/<job_id>.stale-N (the first N free), kept for the operator; returns
// that path, or "" when there was nothing to move.
absl::StatusOr<std::string> SetAsideStaleCheckpoints(const std::string& root,
                                                     const std::string& job_id);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_CHECKPOINT_PATHS_H_
