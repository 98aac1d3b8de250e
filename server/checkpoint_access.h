// Clients' read access to a job's checkpoints on the server's checkpoint
// root (ListCheckpoints, DownloadCheckpoint): list them, pick one, stream its
// files.
//
// The directories are written by jobs, which a server must not trust: every
// path is opened relative to the one before with O_NOFOLLOW (the job's
// directory, the step-* directory, each file), so a symlink planted by a
// job cannot make the server read anything outside its checkpoints. Only
// the engine's two checkpoint files are sent, each opened before the first
// byte goes out: a checkpoint the trainer prunes (checkpoint.keep_last)
// while it streams is still sent whole, from the open files.
#ifndef TRAINYARD_SERVER_CHECKPOINT_ACCESS_H_
#define TRAINYARD_SERVER_CHECKPOINT_ACCESS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/stream_check.h"
#include "trainyard/v1/jobs.pb.h"

namespace trainyard::server {

// The most bytes one CheckpointChunk carries.
inline constexpr int64_t kCheckpointChunkBytes = int64_t{1} << 20;

// The job's checkpoints, newest first; the best marked: the one a finished
// run named (job.result().best_step), or, for a job with
// checkpoint.keep_best that ended otherwise (cancelled, time limit,
// failed), the best evaluation's step its newest checkpoint records.
// Empty when it has none yet.
absl::StatusOr<std::vector<v1::CheckpointInfo>> ListJobCheckpoints(
    const v1::Job& job);

// The step of the checkpoint `request` asks for (the newest, a step, or
// the best). INVALID_ARGUMENT for a negative step or step with best;
// NOT_FOUND naming the steps there are; FAILED_PRECONDITION for best when
// the job has named none.
absl::StatusOr<int64_t> PickCheckpoint(
    const v1::Job& job, const v1::DownloadCheckpointRequest& request);

// Where a resumed download goes on: the file and the offset in it (empty
// file: from the beginning).
struct StreamFrom {
  std::string file;
  int64_t offset = 0;
};

// Sends the checkpoint of `step` through `write` in CheckpointChunks
// (meta.json first), from `from` on. `write` returning false (the client
// went away) ends it with CANCELLED, `check` not OK with its status. ABORTED
// when the checkpoint was removed before its files were open;
// INVALID_ARGUMENT for a `from` that is not in the checkpoint.
absl::Status StreamCheckpoint(
    const v1::Job& job, int64_t step,
    const std::function<bool(const v1::CheckpointChunk&)>& write,
    const StreamCheck& check, const StreamFrom& from = {});

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_CHECKPOINT_ACCESS_H_
