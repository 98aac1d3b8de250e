// Replacing a small file whole, so that a reader (or a crash) sees the old
// contents or the new, never a part: address files, tokens, the worker's
// id and a job's spec, the rendezvous file, gemm choices. Plain function;
// thread-safe for distinct paths (two writers of one path share its
// temporary file).
#ifndef TRAINYARD_COMMON_REPLACE_FILE_H_
#define TRAINYARD_COMMON_REPLACE_FILE_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace trainyard {

// `data` written to path + ".tmp" (created anew with `mode`, so a leftover
// temporary file's mode or owner is not kept), fsynced, renamed over
// `path`, and the directory fsynced. Errors as ErrnoStatus (read_file.h)
// gives them, naming the file and the step ("cannot create", "cannot
// write", "cannot rename ... over it"); the temporary file is removed on
// failure and `path` left as it was.
absl::Status ReplaceFileDurably(const std::string& path, absl::string_view data,
                                mode_t mode = 0644);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_REPLACE_FILE_H_
