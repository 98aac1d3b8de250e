#include "client/checkpoint_download.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "engine/core/checkpoint.h"
#include "engine/core/file_io.h"

namespace trainyard::client {
namespace {

namespace v1 = ::trainyard::v1;

// What a checkpoint may hold: a few files, meta.json small (as the engine
// reads it), the tensors at most what the engine reads.
constexpr size_t kMaxFiles = 16;
constexpr int64_t kMaxMetaBytes = int64_t{16} << 20;
constexpr int64_t kMaxFileBytes = int64_t{64} << 30;

bool PlainFileName(const std::string& name) {
  return !name.empty() && name.size() <= 255 && name != "." && name != ".." &&
         name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

std::string Errno() { return std::strerror(errno); }

}  // namespace

CheckpointDownload::CheckpointDownload(std::string job_id, std::string dir)
    : job_id_(std::move(job_id)), dir_(std::move(dir)) {}

CheckpointDownload::~CheckpointDownload() {
  if (!finished_) Remove();
}

void CheckpointDownload::Remove() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (!made_dir_) return;
  for (const std::string& f : files_) unlink((dir_ + "/" + f).c_str());
  rmdir(dir_.c_str());
  made_dir_ = false;
}

absl::Status CheckpointDownload::Start(const v1::CheckpointChunk& chunk) {
  step_ = chunk.step();
  if (step_ < 0) {
    return absl::DataLossError(
        absl::StrCat("the server sent a negative step (", step_, ")"));
  }
  if (dir_.empty()) dir_ = absl::StrCat(job_id_, "-step-", step_);
  if (mkdir(dir_.c_str(), 0755) != 0) {
    return absl::FailedPreconditionError(
        errno == EEXIST ? absl::StrCat(dir_,
                                       " already exists: name a new directory "
                                       "with --dir")
                        : absl::StrCat("cannot make ", dir_, ": ", Errno()));
  }
  made_dir_ = true;
  return absl::OkStatus();
}

absl::Status CheckpointDownload::CloseFile() {
  if (fd_ < 0) return absl::OkStatus();
  const std::string name = files_.back();
  if (written_ != size_) {
    return absl::DataLossError(absl::StrCat(
        name, ": the server sent ", written_, " of its ", size_, " bytes"));
  }
  const bool synced = fsync(fd_) == 0;
  const bool closed = close(fd_) == 0;
  fd_ = -1;
  if (!synced || !closed) {
    return absl::InternalError(
        absl::StrCat("writing ", dir_, "/", name, ": ", Errno()));
  }
  return absl::OkStatus();
}

absl::Status CheckpointDownload::Add(const v1::CheckpointChunk& chunk) {
  if (step_ < 0) RETURN_IF_ERROR(Start(chunk));
  if (chunk.step() != step_) {
    return absl::DataLossError(absl::StrCat("the server switched from step ",
                                            step_, " to ", chunk.step()));
  }
  const std::string& name = chunk.file();
  const bool next_file = files_.empty() || name != files_.back();
  if (next_file) {
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
    const int64_t limit =
        name == engine::kCheckpointMetaFile ? kMaxMetaBytes : kMaxFileBytes;
    if (chunk.file_size() < 0 || chunk.file_size() > limit) {
      return absl::DataLossError(absl::StrCat(name, ": a size of ",
                                              chunk.file_size(),
                                              " bytes (at most ", limit, ")"));
    }
    for (const std::string& f : files_) {
      if (f == name) {
        return absl::DataLossError(absl::StrCat(name, ": sent twice"));
      }
    }
    const std::string path = absl::StrCat(dir_, "/", name);
    fd_ = open(path.c_str(),
               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      return absl::InternalError(
          absl::StrCat("cannot create ", path, ": ", Errno()));
    }
    files_.push_back(name);
    size_ = chunk.file_size();
    written_ = 0;
  }
  const std::string& data = chunk.data();
  const int64_t n = static_cast<int64_t>(data.size());
  if (chunk.file_size() != size_ || chunk.offset() != written_ ||
      n > size_ - written_ || (n == 0 && size_ > 0)) {
    return absl::DataLossError(absl::StrCat(
        name, ": a chunk of ", n, " bytes at offset ", chunk.offset(), " of ",
        chunk.file_size(), " does not follow the ", written_,
        " bytes received of ", size_));
  }
  for (int64_t done = 0; done < n;) {
    const ssize_t w =
        write(fd_, data.data() + done, static_cast<size_t>(n - done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      return absl::InternalError(
          absl::StrCat("writing ", dir_, "/", name, ": ", Errno()));
    }
    done += w;
  }
  if (name == engine::kCheckpointMetaFile) {
    meta_.append(data);
  } else if (name == engine::kCheckpointTensorsFile) {
    tensors_crc_ = engine::Crc32(tensors_crc_, data);
    tensors_bytes_ = written_ + n;
  }
  written_ += n;
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
  const int dir_fd = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0 || fsync(dir_fd) != 0) {
    if (dir_fd >= 0) close(dir_fd);
    return absl::InternalError(absl::StrCat("syncing ", dir_, ": ", Errno()));
  }
  close(dir_fd);
  finished_ = true;
  return DownloadedCheckpoint{dir_, step_, files_, total_};
}

}  // namespace trainyard::client
