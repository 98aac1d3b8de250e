// Where jobs' checkpoints live on the checkpoint root.
//
// Job J's checkpoints are always in CHECKPOINT_ROOT/J, under the root the
// server runs with now: a job's stored paths are never trusted to name
// them, so moving the whole state dir (or restarting with another
// --checkpoint-root holding the same directories) keeps every job's
// checkpoints.
//
// The functions are safe to call from any thread.
#ifndef TRAINYARD_SERVER_CHECKPOINT_PATHS_H_
#define TRAINYARD_SERVER_CHECKPOINT_PATHS_H_

#include <string>

#include "trainyard/v1/jobs.pb.h"

namespace trainyard::server {

// ROOT/<job_id>.
std::string CheckpointDirOf(const std::string& root, const std::string& job_id);

// Moves `job`'s checkpoint paths under `root`. A job that has been
// assigned (its checkpoint_dir is set) gets ROOT/<id>; the paths of its
// checkpoints that lay in its old directory (last_checkpoint, the
// result's) follow it, and its warm start's checkpoint moves to the source
// job's directory under `root`. Nothing changes for an empty `root`.
void PlaceCheckpointsUnder(const std::string& root, v1::Job& job);

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_CHECKPOINT_PATHS_H_
