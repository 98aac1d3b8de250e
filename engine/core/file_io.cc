// POSIX implementation of file_io.h.
#include "engine/core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/read_file.h"
#include "common/status_macros.h"

namespace trainyard::engine {

uint32_t Crc32(uint32_t crc, absl::string_view data) {
  // zlib's crc32 takes a uInt length; feed large buffers in slices.
  const unsigned char* p = reinterpret_cast<const unsigned char*>(data.data());
  size_t left = data.size();
  while (left > 0) {
    const uInt n = static_cast<uInt>(left > (1u << 30) ? (1u << 30) : left);
    crc = static_cast<uint32_t>(::crc32(crc, p, n));
    p += n;
    left -= n;
  }
  return crc;
}

absl::StatusOr<DurableFileWriter> DurableFileWriter::Create(
    const std::string& path, bool must_be_new) {
  const int mode = must_be_new ? O_EXCL | O_NOFOLLOW : O_TRUNC;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | mode | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("cannot create", path, errno);
  return DurableFileWriter(path, fd);
}

DurableFileWriter::DurableFileWriter(DurableFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(other.fd_),
      crc_(other.crc_),
      bytes_(other.bytes_) {
  other.fd_ = -1;
}

DurableFileWriter::~DurableFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status DurableFileWriter::Append(absl::string_view data) {
  if (fd_ < 0) return absl::FailedPreconditionError(path_ + ": closed");
  crc_ = Crc32(crc_, data);
  bytes_ += static_cast<int64_t>(data.size());
  while (!data.empty()) {
    ssize_t n = ::write(fd_, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write failed", path_, errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status DurableFileWriter::Close() {
  if (fd_ < 0) return absl::FailedPreconditionError(path_ + ": closed");
  int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus("fsync failed", path_, err);
  }
  if (::close(fd) != 0) return ErrnoStatus("close failed", path_, errno);
  return absl::OkStatus();
}

absl::Status WriteFileDurably(const std::string& path, absl::string_view data) {
  ASSIGN_OR_RETURN(DurableFileWriter writer, DurableFileWriter::Create(path));
  RETURN_IF_ERROR(writer.Append(data));
  return writer.Close();
}

absl::Status SyncDirectory(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("cannot open directory", path, errno);
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus("fsync failed", path, err);
  }
  ::close(fd);
  return absl::OkStatus();
}

absl::Status MakeDirectories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return ErrnoStatus("cannot create directory", path, ec.value());
  return absl::OkStatus();
}

absl::Status RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return ErrnoStatus("cannot remove", path, ec.value());
  return absl::OkStatus();
}

}  // namespace trainyard::engine
