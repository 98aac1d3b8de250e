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
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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

// The files of one checkpoint, open, read out in CheckpointChunks of at
// most kCheckpointChunkBytes (meta.json first) from a StreamFrom on, one
// chunk a call: a stream sends each before it reads the next. Not
// thread-safe; one reader per stream.
class CheckpointReader {
 public:
  // Opens both files of the checkpoint of `step`. ABORTED when the
  // checkpoint was removed before its files were open; INVALID_ARGUMENT
  // for a `from` that is not in the checkpoint; FAILED_PRECONDITION for a
  // file that is a symlink or not a regular file.
  static absl::StatusOr<std::unique_ptr<CheckpointReader>> Open(
      const v1::Job& job, int64_t step, const StreamFrom& from = {});
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  enum class Got {
    kChunk,     // the next chunk is in `chunk`
    kDone,      // every chunk has been read
    kWouldWait  // (kCachedOnly) the rest of the chunk is not in memory
  };
  enum class Read {
    kMayWait,    // block on the disk as long as it takes
    kCachedOnly  // read only what the page cache holds (RWF_NOWAIT)
  };
  // Reads the next chunk into `chunk`. Its data's buffer is reused, so a
  // stream that reads into one message allocates nothing per chunk. With
  // kCachedOnly a thread that must not block (gRPC's) reads what is in
  // memory; kWouldWait keeps what it read in `chunk`, for the next call
  // (kMayWait, on a thread that may block) to finish. A file the client
  // has whole gives nothing; an empty file one chunk without data.
  // INTERNAL when a file cannot be read or got shorter since it was
  // opened.
  absl::StatusOr<Got> Next(v1::CheckpointChunk& chunk,
                           Read how = Read::kMayWait);

 private:
  struct File {
    int fd;
    int64_t size;
    const char* name;
  };
  CheckpointReader(std::string job_id, int64_t step, size_t first_file,
                   int64_t offset)
      : job_id_(std::move(job_id)),
        step_(step),
        file_(first_file),
        offset_(offset) {}

  const std::string job_id_;
  const int64_t step_;
  std::vector<File> files_;  // every file of the checkpoint, in order
  size_t file_;              // the one being read
  int64_t offset_;           // in it
  bool file_started_ = false;
  int64_t partial_ = 0;  // bytes of the chunk at offset_ read (kWouldWait)
};

}  // namespace trainyard::server

#endif  // TRAINYARD_SERVER_CHECKPOINT_ACCESS_H_
