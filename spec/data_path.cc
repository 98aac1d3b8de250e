// Resolving spec data paths inside the data root. The check is done on the
// real path (symlinks followed), so a link inside the root that points
// outside it is refused like a "../" path, wherever it sits on the path. A
// path that need not exist yet is resolved as far as it exists; a dangling
// symlink on the way is refused, since creating the file would follow it
// wherever it points. Thread-safe (no shared state).
//
// The check and the later open are separate steps: whoever can rewrite the
// data root between them can still swap a file for a link. The root is the
// operator's; the check keeps spec authors, not root owners, inside it.
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/field_errors.h"
#include "spec/limits.h"
#include "spec/spec.h"

namespace trainyard::spec {
namespace {

namespace fs = std::filesystem;

// The files of a Hugging Face GPT-2 folder (engine/core/hf_gpt2.h).
constexpr const char* kModelFolderFiles[] = {"config.json",
                                             "model.safetensors"};
constexpr char kModelFolderTokenizer[] = "trainyard_tokenizer.json";

enum class Kind { kFile, kDirectory };

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

// What can be said about `relative` before touching the file system.
absl::Status CheckSyntax(absl::string_view field, const std::string& relative) {
  if (relative.empty()) {
    return InvalidFieldError(field,
                             "required (a path relative to the data root)");
  }
  if (static_cast<int64_t>(relative.size()) > kMaxPathLength) {
    return InvalidFieldError(
        field, absl::StrCat("at most ", kMaxPathLength, " bytes"));
  }
  if (relative.find('\0') != std::string::npos) {
    return InvalidFieldError(field, "contains a NUL byte");
  }
  for (unsigned char c : relative) {
    if (c < 0x20 || c == 0x7f) {
      return InvalidFieldError(field, "must not contain control characters");
    }
  }
  if (relative[0] == '/') {
    return InvalidFieldError(field,
                             absl::StrCat("must be relative to the data root, "
                                          "got the absolute path ",
                                          relative));
  }
  fs::path normal = fs::path(relative).lexically_normal();
  if (!normal.empty() && *normal.begin() == "..") {
    return InvalidFieldError(field, "path escapes the data root");
  }
  return absl::OkStatus();
}

// The real path of root/relative when it must exist.
absl::StatusOr<std::string> ResolveExisting(absl::string_view field,
                                            const std::string& root,
                                            const std::string& relative) {
  int error = 0;
  absl::StatusOr<std::string> real = RealPath(root + "/" + relative, &error);
  if (real.ok()) return real;
  if (error == ENOENT || error == ENOTDIR) {
    return InvalidFieldError(field, absl::StrCat("file not found: ", relative));
  }
  return InvalidFieldError(field, absl::StrCat("cannot resolve ", relative,
                                               ": ", real.status().message()));
}

// The real path of root/relative when its tail may not exist yet: the
// longest existing prefix through realpath, the rest appended lexically.
absl::StatusOr<std::string> ResolvePartial(absl::string_view field,
                                           const std::string& root,
                                           const std::string& relative) {
  fs::path existing(root);
  fs::path rest;
  for (const fs::path& part : fs::path(relative)) {
    if (part.empty() || part == ".") continue;
    if (!rest.empty()) {
      rest /= part;
      continue;
    }
    const fs::path next = existing / part;
    struct stat st;
    if (::lstat(next.c_str(), &st) != 0) {
      if (errno != ENOENT) {
        return InvalidFieldError(field,
                                 absl::StrCat("cannot resolve ", relative, ": ",
                                              std::strerror(errno)));
      }
      rest = part;
      continue;
    }
    if (S_ISLNK(st.st_mode) && ::stat(next.c_str(), &st) != 0) {
      return InvalidFieldError(
          field, absl::StrCat("cannot resolve ", relative,
                              ": a symlink on the way is dangling or "
                              "loops"));
    }
    existing = next;
  }
  int error = 0;
  absl::StatusOr<std::string> real = RealPath(existing.string(), &error);
  if (!real.ok()) {
    return InvalidFieldError(field,
                             absl::StrCat("cannot resolve ", relative, ": ",
                                          real.status().message()));
  }
  if (rest.empty()) return real;
  return (fs::path(*real) / rest).lexically_normal().string();
}

absl::StatusOr<std::string> Resolve(absl::string_view field,
                                    const std::string& data_root,
                                    const std::string& relative,
                                    bool must_exist, Kind kind) {
  if (absl::Status s = CheckSyntax(field, relative); !s.ok()) return s;
  int error = 0;
  absl::StatusOr<std::string> root =
      RealPath(data_root.empty() ? "." : data_root, &error);
  if (!root.ok()) {
    return InvalidFieldError(
        field, absl::StrCat("data root ", data_root,
                            " is not accessible: ", root.status().message()));
  }
  absl::StatusOr<std::string> resolved =
      must_exist ? ResolveExisting(field, *root, relative)
                 : ResolvePartial(field, *root, relative);
  if (!resolved.ok()) return resolved.status();
  if (!Inside(*resolved, *root)) {
    return InvalidFieldError(field, "path escapes the data root");
  }
  if (must_exist) {
    struct stat st;
    const bool is_dir = kind == Kind::kDirectory;
    if (::stat(resolved->c_str(), &st) != 0 ||
        (is_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))) {
      return InvalidFieldError(
          field,
          absl::StrCat(is_dir ? "not a directory: " : "not a regular file: ",
                       relative));
    }
    if (::access(resolved->c_str(), is_dir ? R_OK | X_OK : R_OK) != 0) {
      return InvalidFieldError(field, absl::StrCat("not readable: ", relative));
    }
  }
  return resolved;
}

}  // namespace

absl::StatusOr<std::string> ResolveDataPath(std::string_view field_name,
                                            const std::string& data_root,
                                            const std::string& relative,
                                            bool must_exist) {
  absl::string_view field(field_name.data(), field_name.size());
  return Resolve(field, data_root, relative, must_exist, Kind::kFile);
}

absl::StatusOr<std::string> ResolveModelFolder(std::string_view field_name,
                                               const std::string& data_root,
                                               const std::string& relative,
                                               bool must_exist) {
  absl::string_view field(field_name.data(), field_name.size());
  absl::StatusOr<std::string> dir =
      Resolve(field, data_root, relative, must_exist, Kind::kDirectory);
  if (!dir.ok() || !must_exist) return dir;
  const std::string prefix = relative.back() == '/' ? relative : relative + "/";
  for (const char* file : kModelFolderFiles) {
    absl::StatusOr<std::string> path =
        Resolve(field, data_root, prefix + file, true, Kind::kFile);
    if (!path.ok()) return path.status();
  }
  struct stat st;
  const std::string tokenizer = *dir + "/" + kModelFolderTokenizer;
  if (::lstat(tokenizer.c_str(), &st) == 0) {
    absl::StatusOr<std::string> path = Resolve(
        field, data_root, prefix + kModelFolderTokenizer, true, Kind::kFile);
    if (!path.ok()) return path.status();
  }
  return dir;
}

}  // namespace trainyard::spec
