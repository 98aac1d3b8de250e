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
#include "common/status_macros.h"

namespace trainyard::engine {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& path,
                        int err) {
  std::string msg = absl::StrCat(path, ": ", what, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

}  // namespace

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
    const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", path, errno);
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
      return ErrnoError("write failed", path_, errno);
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
    return ErrnoError("fsync failed", path_, err);
  }
  if (::close(fd) != 0) return ErrnoError("close failed", path_, errno);
  return absl::OkStatus();
}

absl::Status WriteFileDurably(const std::string& path, absl::string_view data) {
  ASSIGN_OR_RETURN(DurableFileWriter writer, DurableFileWriter::Create(path));
  RETURN_IF_ERROR(writer.Append(data));
  return writer.Close();
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path,
                                          int64_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open", path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoError("cannot stat", path, err);
  }
  if (st.st_size > max_bytes) {
    ::close(fd);
    return absl::ResourceExhaustedError(absl::StrCat(
        path, ": ", st.st_size, " bytes, more than the limit of ", max_bytes));
  }
  std::string data(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < data.size()) {
    ssize_t n = ::read(fd, data.data() + got, data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return ErrnoError("read failed", path, err);
    }
    if (n == 0) break;  // shrank while reading
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  data.resize(got);
  return data;
}

absl::Status SyncDirectory(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open directory", path, errno);
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoError("fsync failed", path, err);
  }
  ::close(fd);
  return absl::OkStatus();
}

absl::Status MakeDirectories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return ErrnoError("cannot create directory", path, ec.value());
  return absl::OkStatus();
}

absl::Status RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return ErrnoError("cannot remove", path, ec.value());
  return absl::OkStatus();
}

}  // namespace trainyard::engine
