#include "client/checkpoint_download.h"

#include <sys/stat.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/read_file.h"
#include "common/status_macros.h"
#include "engine/core/checkpoint.h"

namespace trainyard::client {
namespace {

namespace v1 = ::trainyard::v1;

// A checkpoint holds a few files, none larger than the engine reads.
constexpr size_t kMaxFiles = 16;

bool PlainFileName(const std::string& name) {
  return !name.empty() && name.size() <= 255 && name != "." && name != ".." &&
         name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

}  // namespace

CheckpointDownload::CheckpointDownload(std::string job_id, std::string dir)
    : job_id_(std::move(job_id)), dir_(std::move(dir)) {}

CheckpointDownload::~CheckpointDownload() {
  file_.reset();
  // The directory was made by this download: all of it goes.
  if (!finished_ && made_dir_) engine::RemoveTree(dir_).IgnoreError();
}

absl::Status CheckpointDownload::Start(const v1::CheckpointChunk& chunk) {
  step_ = chunk.step();
  if (step_ < 0) {
    return absl::DataLossError(
        absl::StrCat("the server sent a negative step (", step_, ")"));
  }
  if (dir_.empty()) dir_ = absl::StrCat(job_id_, "-step-", step_);
  if (mkdir(dir_.c_str(), 0755) != 0) {
    if (errno == EEXIST) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir_, " already exists: name a new directory with --dir"));
    }
    const absl::Status s = ErrnoStatus("cannot make", dir_, errno);
    return absl::FailedPreconditionError(s.message());
  }
  made_dir_ = true;
  return absl::OkStatus();
}

absl::Status CheckpointDownload::CloseFile() {
  if (!file_.has_value()) return absl::OkStatus();
  const std::string& name = files_.back();
  const int64_t written = file_->bytes_written();
  if (written != size_) {
    return absl::DataLossError(absl::StrCat(name, ": the server sent ", written,
                                            " of its ", size_, " bytes"));
  }
  if (name == engine::kCheckpointTensorsFile) {
    tensors_bytes_ = written;
    tensors_crc_ = file_->crc32();
  }
  const absl::Status closed = file_->Close();
  file_.reset();
  return closed;
}

absl::Status CheckpointDownload::Add(const v1::CheckpointChunk& chunk) {
  if (step_ < 0) RETURN_IF_ERROR(Start(chunk));
  if (chunk.step() != step_) {
    return absl::DataLossError(absl::StrCat("the server switched from step ",
                                            step_, " to ", chunk.step()));
  }
  const std::string& name = chunk.file();
  if (files_.empty() || name != files_.back()) {
    RETURN_IF_ERROR(CloseFile());
    if (!PlainFileName(name)) {
      return absl::DataLossError(absl::StrCat("the server sent a file named \"",
                                              name,
                                              "\": not a plain file name"));
    }
    if (files_.size() >= kMaxFiles) {
      return absl::DataLossError(
          absl::StrCat("the server sent more than ", kMaxFiles, " files"));
    }
    const int64_t limit = name == engine::kCheckpointMetaFile
                              ? engine::kMaxCheckpointMetaBytes
                              : engine::kMaxCheckpointTensorsBytes;
    if (chunk.file_size() < 0 || chunk.file_size() > limit) {
      return absl::DataLossError(absl::StrCat(name, ": a size of ",
                                              chunk.file_size(),
                                              " bytes (at most ", limit, ")"));
    }
    for (const std::string& f : files_) {
      if (f == name)
        return absl::DataLossError(absl::StrCat(name, ": sent twice"));
    }
    ASSIGN_OR_RETURN(engine::DurableFileWriter writer,
                     engine::DurableFileWriter::Create(
                         absl::StrCat(dir_, "/", name), /*must_be_new=*/true));
    file_.emplace(std::move(writer));
    files_.push_back(name);
    size_ = chunk.file_size();
  }
  const std::string& data = chunk.data();
  const int64_t n = static_cast<int64_t>(data.size());
  const int64_t written = file_->bytes_written();
  if (chunk.file_size() != size_ || chunk.offset() != written ||
      n > size_ - written || (n == 0 && size_ > 0)) {
    return absl::DataLossError(absl::StrCat(
        name, ": a chunk of ", n, " bytes at offset ", chunk.offset(), " of ",
        chunk.file_size(), " does not follow the ", written,
        " bytes received of ", size_));
  }
  RETURN_IF_ERROR(file_->Append(data));
  if (name == engine::kCheckpointMetaFile) meta_.append(data);
  total_ += n;
  return absl::OkStatus();
}

absl::StatusOr<DownloadedCheckpoint> CheckpointDownload::Finish() {
  if (step_ < 0) {
    return absl::DataLossError("the server sent no checkpoint file");
  }
  RETURN_IF_ERROR(CloseFile());
  if (meta_.empty() || tensors_bytes_ < 0) {
    return absl::DataLossError(absl::StrCat(
        "the server did not send both ", engine::kCheckpointMetaFile, " and ",
        engine::kCheckpointTensorsFile));
  }
  ASSIGN_OR_RETURN(engine::TensorsFileRecord record,
                   engine::ReadTensorsFileRecord(meta_));
  if (record.step != step_) {
    return absl::DataLossError(absl::StrCat(
        "meta.json is of step ", record.step, ", the server said ", step_));
  }
  if (record.bytes != tensors_bytes_ || record.crc32 != tensors_crc_) {
    return absl::DataLossError(absl::StrFormat(
        "%s: %d bytes with CRC-32 %08x, meta.json says %d bytes with %08x",
        engine::kCheckpointTensorsFile, tensors_bytes_, tensors_crc_,
        record.bytes, record.crc32));
  }
  RETURN_IF_ERROR(engine::SyncDirectory(dir_));
  finished_ = true;
  return DownloadedCheckpoint{dir_, step_, files_, total_};
}

}  // namespace trainyard::client
