// The safetensors file format (huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON mapping each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data
// section), then the raw little-endian tensor data. We write F32 tensors in
// the order given, back to back, with the header padded by spaces to a
// multiple of 8 bytes so the data stays aligned. Thread-safe functions.
#ifndef TRAINYARD_ENGINE_CORE_SAFETENSORS_H_
#define TRAINYARD_ENGINE_CORE_SAFETENSORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/tensor.h"

namespace trainyard::engine {

struct SafetensorsWriteResult {
  int64_t bytes = 0;
  uint32_t crc32 = 0;
};

// Writes and fsyncs `path`. INVALID_ARGUMENT for duplicate or empty names or
// data whose size does not match its shape.
absl::StatusOr<SafetensorsWriteResult> WriteSafetensors(
    const std::string& path, const std::vector<HostTensor>& tensors);

// Parses a whole safetensors file held in memory. `source` names it in
// errors. DATA_LOSS for anything malformed: short header, header length past
// the end, bad JSON, unknown dtype (only F32 is accepted), negative dims,
// offsets that overlap, leave gaps or disagree with the shape, or a data
// section of the wrong size (truncation).
absl::StatusOr<std::vector<HostTensor>> ParseSafetensors(
    absl::string_view bytes, absl::string_view source);

}  // namespace trainyard::engine

#endif  // TRAINYARD_ENGINE_CORE_SAFETENSORS_H_
