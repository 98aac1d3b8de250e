// Durable file primitives for checkpoints: a writer that fsyncs before it
// reports success, directory fsync, bounded whole-file reads and recursive
// removal. Errors carry the path and strerror. Stateless functions are
// thread-safe; a DurableFileWriter is used by one thread.
#ifndef TRAINYARD_ENGINE_CORE_FILE_IO_H_
#define TRAINYARD_ENGINE_CORE_FILE_IO_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/read_file.h"  // ReadWholeFile, for the engine's readers

namespace trainyard::engine {

// Writes a new file (replacing any, unless `must_be_new`: then a file or
// symlink already at `path` is an error) and keeps a running CRC-32 of
// what was written. Close() fsyncs; a writer destroyed without Close()
// leaves a file that must not be trusted (its directory is a temp dir in
// practice).
class DurableFileWriter {
 public:
  static absl::StatusOr<DurableFileWriter> Create(const std::string& path,
                                                  bool must_be_new = false);
  DurableFileWriter(DurableFileWriter&& other) noexcept;
  DurableFileWriter& operator=(DurableFileWriter&&) = delete;
  ~DurableFileWriter();

  absl::Status Append(absl::string_view data);
  absl::Status Close();
  uint32_t crc32() const { return crc_; }
  int64_t bytes_written() const { return bytes_; }

 private:
  DurableFileWriter(std::string path, int fd)
      : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
  uint32_t crc_ = 0;
  int64_t bytes_ = 0;
};

// Whole-file write + fsync.
absl::Status WriteFileDurably(const std::string& path, absl::string_view data);

// fsync on a directory, so renames and new entries inside it are durable.
absl::Status SyncDirectory(const std::string& path);

// mkdir -p.
absl::Status MakeDirectories(const std::string& path);

// rm -rf; OK when the path does not exist.
absl::Status RemoveTree(const std::string& path);

// CRC-32 (zlib's polynomial) of `data`, continuing from `crc`.
uint32_t Crc32(uint32_t crc, absl::string_view data);

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_FILE_IO_H_
