// Resolving spec data paths inside the data root. The check is done on the
// real path (symlinks followed), so a link inside the root that points
// outside it is refused like a "../" path. Thread-safe (no shared state).
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "spec/spec.h"

namespace trainyard::spec {
namespace {

namespace fs = std::filesystem;

absl::Status PathError(absl::string_view field, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", msg));
}

// realpath(3); on failure the errno is kept in *error.
absl::StatusOr<std::string> RealPath(const std::string& path, int* error) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) {
    *error = errno;
    return absl::NotFoundError(std::strerror(*error));
  }
  return std::string(buf);
}

bool Inside(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  return path == root ||
         (path.size() > root.size() &&
          path.compare(0, root.size(), root) == 0 && path[root.size()] == '/');
}

// The real path of `joined`, resolving only as far as the path exists (for
// outputs that are created later).
absl::StatusOr<std::string> ResolveExisting(absl::string_view field,
                                            const std::string& joined,
                                            const std::string& relative,
                                            bool must_exist) {
  if (must_exist) {
    int error = 0;
    absl::StatusOr<std::string> real = RealPath(joined, &error);
    if (!real.ok()) {
      if (error == ENOENT || error == ENOTDIR) {
        return PathError(field, absl::StrCat("file not found: ", relative));
      }
      return PathError(field, absl::StrCat("cannot resolve ", relative, ": ",
                                           real.status().message()));
    }
    return real;
  }
  std::error_code ec;
  fs::path weak = fs::weakly_canonical(fs::path(joined), ec);
  if (ec) {
    return PathError(
        field, absl::StrCat("cannot resolve ", relative, ": ", ec.message()));
  }
  return weak.string();
}

}  // namespace

absl::StatusOr<std::string> ResolveDataPath(std::string_view field_name,
                                            const std::string& data_root,
                                            const std::string& relative,
                                            bool must_exist) {
  absl::string_view field(field_name.data(), field_name.size());
  if (relative.empty()) {
    return PathError(field, "required (a path relative to the data root)");
  }
  if (relative.find('\0') != std::string::npos) {
    return PathError(field, "contains a NUL byte");
  }
  if (relative[0] == '/') {
    return PathError(field, absl::StrCat("must be relative to the data root, "
                                         "got the absolute path ",
                                         relative));
  }
  fs::path normal = fs::path(relative).lexically_normal();
  if (!normal.empty() && *normal.begin() == "..") {
    return PathError(field, "path escapes the data root");
  }
  int error = 0;
  absl::StatusOr<std::string> root =
      RealPath(data_root.empty() ? "." : data_root, &error);
  if (!root.ok()) {
    return PathError(
        field, absl::StrCat("data root ", data_root,
                            " is not accessible: ", root.status().message()));
  }
  absl::StatusOr<std::string> resolved =
      ResolveExisting(field, *root + "/" + relative, relative, must_exist);
  if (!resolved.ok()) return resolved.status();
  if (!Inside(*resolved, *root)) {
    return PathError(field, "path escapes the data root");
  }
  if (must_exist) {
    struct stat st;
    if (::stat(resolved->c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return PathError(field, absl::StrCat("not a regular file: ", relative));
    }
    if (::access(resolved->c_str(), R_OK) != 0) {
      return PathError(field, absl::StrCat("not readable: ", relative));
    }
  }
  return resolved;
}

}  // namespace trainyard::spec
