// POSIX implementation of replace_file.h.
#include "common/replace_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/read_file.h"

namespace trainyard {
namespace {

// The temporary file's error, after closing and removing it.
absl::Status Abandon(int fd, const std::string& temp, absl::string_view what,
                     int err) {
  if (fd >= 0) ::close(fd);
  ::unlink(temp.c_str());
  return ErrnoStatus(what, temp, err);
}

}  // namespace

absl::Status ReplaceFileDurably(const std::string& path, absl::string_view data,
                                mode_t mode) {
  const std::string temp = path + ".tmp";
  ::unlink(temp.c_str());
  const int fd = ::open(
      temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoStatus("cannot create", temp, errno);
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Abandon(fd, temp, "cannot write", errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  if (::fsync(fd) != 0) return Abandon(fd, temp, "fsync failed", errno);
  if (::close(fd) != 0) return Abandon(-1, temp, "cannot write", errno);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return ErrnoStatus(absl::StrCat("cannot rename ", temp, " over it"), path,
                       err);
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const std::string at = dir.empty() ? "." : dir;
  const int dfd = ::open(at.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return ErrnoStatus("cannot open directory", at, errno);
  const int synced = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (synced != 0) return ErrnoStatus("fsync failed", at, err);
  return absl::OkStatus();
}

}  // namespace trainyard
