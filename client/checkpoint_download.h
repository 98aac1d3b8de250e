// `yard download`: writes a checkpoint streamed by DownloadCheckpoint into a
// directory, checking it as it arrives: every chunk in order, every file
// whole, plain file names only, and model.safetensors against the size and
// CRC-32 its meta.json records. The directory is a checkpoint directory as
// yard-train writes one (`yard-train sample DIR`, `yard-train export DIR
// OUT`). Anything wrong removes what was written.
#ifndef TRAINYARD_CLIENT_CHECKPOINT_DOWNLOAD_H_
#define TRAINYARD_CLIENT_CHECKPOINT_DOWNLOAD_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/file_io.h"
#include "trainyard/v1/jobs.pb.h"

namespace trainyard::client {

struct DownloadedCheckpoint {
  std::string dir;
  int64_t step = 0;
  std::vector<std::string> files;  // in the order they came
  int64_t bytes = 0;
};

class CheckpointDownload {
 public:
  // Writes into `dir`, which must not exist yet (its parent must); empty:
  // "<job_id>-step-<step>" in the working directory, named at the first
  // chunk.
  CheckpointDownload(std::string job_id, std::string dir);
  // Removes a download that did not Finish.
  ~CheckpointDownload();
  CheckpointDownload(const CheckpointDownload&) = delete;
  CheckpointDownload& operator=(const CheckpointDownload&) = delete;

  // FAILED_PRECONDITION when the directory exists or cannot be made;
  // DATA_LOSS naming the problem for a chunk out of order or that does not
  // fit; a failed write as ErrnoStatus says (common/read_file.h).
  absl::Status Add(const trainyard::v1::CheckpointChunk& chunk);
  // After the last chunk: DATA_LOSS when a file is missing or incomplete, or
  // model.safetensors does not match meta.json. The files are synced.
  absl::StatusOr<DownloadedCheckpoint> Finish();

 private:
  absl::Status Start(const trainyard::v1::CheckpointChunk& chunk);
  absl::Status CloseFile();

  const std::string job_id_;
  std::string dir_;
  bool made_dir_ = false;
  bool finished_ = false;
  int64_t step_ = -1;
  std::vector<std::string> files_;
  std::optional<engine::DurableFileWriter> file_;  // the one being written
  int64_t size_ = 0;                               // its whole size
  int64_t total_ = 0;
  std::string meta_;  // meta.json, kept to check the tensors against
  // model.safetensors once written whole: its size (-1: not yet) and CRC.
  int64_t tensors_bytes_ = -1;
  uint32_t tensors_crc_ = 0;
};

}  // namespace trainyard::client

#endif  // TRAINYARD_CLIENT_CHECKPOINT_DOWNLOAD_H_
