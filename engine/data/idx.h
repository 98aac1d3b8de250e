// The IDX file format of MNIST (yann.lecun.com/exdb/mnist): a big-endian
// magic 0x0000TTDD (TT the element type, DD the number of dimensions), DD
// big-endian uint32 dimensions, then the elements. We read unsigned-byte
// arrays (type 0x08), from a gzip-compressed file or a raw one. Everything is
// validated; a bad file is an error naming the file and what is wrong.
// Thread-safe functions.
#ifndef TRAINYARD_ENGINE_DATA_IDX_H_
#define TRAINYARD_ENGINE_DATA_IDX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainyard::engine {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // row-major, prod(dims) bytes
};

// Parses an IDX image held in memory. INVALID_ARGUMENT (prefixed with
// `source`) for a short header, a bad magic, an unsupported element type,
// zero or more than 4 dimensions, or a data length other than prod(dims)
// (truncated or trailing bytes).
absl::StatusOr<IdxArray> ParseIdx(absl::string_view bytes,
                                  absl::string_view source);

// Reads and parses `path` (.gz or raw). NOT_FOUND when missing; gzip errors
// (truncated or corrupt stream, trailing bytes) and a file or decompressed
// size above `max_bytes` are INVALID_ARGUMENT naming the file.
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path,
                                     int64_t max_bytes = int64_t{1} << 30);

// The same on a file's bytes held in memory: gzip (one or more members) is
// recognized by its magic and decompressed, never past `max_bytes`; other
// bytes are taken as raw IDX. `source` names the file in errors.
absl::StatusOr<IdxArray> DecodeIdx(absl::string_view file_bytes,
                                   absl::string_view source,
                                   int64_t max_bytes = int64_t{1} << 30);

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_DATA_IDX_H_
