// IDX parsing and gzip reading. See idx.h.
#include "engine/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/core/file_io.h"

namespace trainyard::engine {
namespace {

uint32_t BigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

constexpr int kMaxDims = 4;

bool IsGzip(absl::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

// Inflates every gzip member of `in` (gzip -c a b > c makes several), the
// output never growing past max_bytes: a small file must not expand into
// all of memory.
absl::StatusOr<std::string> Gunzip(absl::string_view in,
                                   absl::string_view source,
                                   int64_t max_bytes) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) {
    return absl::ResourceExhaustedError(
        absl::StrCat(source, ": cannot start gzip decompression"));
  }
  std::string out;
  char buf[1 << 16];
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  // zlib counts input in uInt; the file size is bounded well below 4 GiB by
  // the callers' max_bytes, but feed it in slices regardless.
  size_t left = in.size();
  absl::Status status;
  while (true) {
    if (z.avail_in == 0 && left > 0) {
      z.avail_in = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
      left -= z.avail_in;
    }
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    const int rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof(buf) - z.avail_out);
    if (static_cast<int64_t>(out.size()) > max_bytes) {
      status = absl::InvalidArgumentError(absl::StrCat(
          source, ": decompresses to more than ", max_bytes, " bytes"));
      break;
    }
    if (rc == Z_STREAM_END) {
      const size_t rest = z.avail_in + left;
      if (rest == 0) break;
      if (!IsGzip(in.substr(in.size() - rest))) {
        status = absl::InvalidArgumentError(
            absl::StrCat(source, ": corrupt gzip stream (", rest,
                         " bytes after the end of the compressed data)"));
        break;
      }
      inflateReset(&z);
      continue;
    }
    // No progress with all input consumed: the stream ends early. (Output
    // space is always fresh, so that is the only way to make none.)
    if (rc == Z_BUF_ERROR && z.avail_in == 0 && left == 0) {
      status = absl::InvalidArgumentError(
          absl::StrCat(source, ": truncated gzip stream"));
      break;
    }
    if (rc != Z_OK && !(rc == Z_BUF_ERROR && z.avail_in == 0)) {
      status = absl::InvalidArgumentError(
          absl::StrCat(source, ": corrupt gzip stream (",
                       z.msg != nullptr ? z.msg : "bad data", ")"));
      break;
    }
  }
  inflateEnd(&z);
  if (!status.ok()) return status;
  return out;
}

}  // namespace

absl::StatusOr<IdxArray> ParseIdx(absl::string_view bytes,
                                  absl::string_view source) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a valid IDX file: ", what));
  };
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 4) {
    return bad(absl::StrCat("truncated: ", bytes.size(),
                            " bytes, shorter than the 4-byte magic"));
  }
  const uint32_t magic = BigEndian32(p);
  if ((magic >> 16) != 0) {
    return bad(
        absl::StrFormat("bad magic 0x%08x (expected 0x000008NN)", magic));
  }
  const int type = static_cast<int>((magic >> 8) & 0xFF);
  const int ndims = static_cast<int>(magic & 0xFF);
  if (type != 0x08) {
    return bad(absl::StrFormat(
        "element type 0x%02x is not supported (only unsigned byte, 0x08)",
        type));
  }
  if (ndims < 1 || ndims > kMaxDims) {
    return bad(
        absl::StrCat(ndims, " dimensions (expected 1 to ", kMaxDims, ")"));
  }
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  if (bytes.size() < header) {
    return bad(absl::StrCat("truncated: ", bytes.size(),
                            " bytes, the header needs ", header));
  }
  IdxArray out;
  uint64_t count = 1;
  for (int d = 0; d < ndims; ++d) {
    const uint32_t dim = BigEndian32(p + 4 + 4 * d);
    out.dims.push_back(dim);
    if (dim != 0 && count > (uint64_t{1} << 40) / dim) {
      return bad("dimensions are absurdly large");
    }
    count *= dim;
  }
  const uint64_t have = bytes.size() - header;
  if (have != count) {
    return bad(absl::StrCat(have < count ? "truncated" : "trailing bytes",
                            ": dimensions need ", count, " data bytes, found ",
                            have));
  }
  out.data.assign(p + header, p + header + count);
  return out;
}

absl::StatusOr<IdxArray> DecodeIdx(absl::string_view file_bytes,
                                   absl::string_view source,
                                   int64_t max_bytes) {
  if (!IsGzip(file_bytes)) {
    if (static_cast<int64_t>(file_bytes.size()) > max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": more than ", max_bytes, " bytes"));
    }
    return ParseIdx(file_bytes, source);
  }
  absl::StatusOr<std::string> bytes = Gunzip(file_bytes, source, max_bytes);
  if (!bytes.ok()) return bytes.status();
  return ParseIdx(*bytes, source);
}

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path,
                                     int64_t max_bytes) {
  absl::StatusOr<std::string> bytes = ReadWholeFile(path, max_bytes);
  if (!bytes.ok()) {
    if (bytes.status().code() == absl::StatusCode::kNotFound) {
      return bytes.status();
    }
    return absl::InvalidArgumentError(bytes.status().message());
  }
  return DecodeIdx(*bytes, path, max_bytes);
}

}  // namespace trainyard::engine
