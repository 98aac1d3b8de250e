// IDX parsing and gzip reading. See idx.h.
#include "engine/data/idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trainyard::engine {
namespace {

uint32_t BigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

constexpr int kMaxDims = 4;

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

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path,
                                     int64_t max_bytes) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int err = errno;
    std::string msg = absl::StrCat(
        path,
        ": cannot open: ", err != 0 ? std::strerror(err) : "out of memory");
    return err == ENOENT ? absl::NotFoundError(msg)
                         : absl::InvalidArgumentError(msg);
  }
  std::string bytes;
  char buf[1 << 16];
  while (true) {
    const int n = gzread(file, buf, sizeof(buf));
    if (n > 0) {
      bytes.append(buf, static_cast<size_t>(n));
      if (static_cast<int64_t>(bytes.size()) > max_bytes) {
        gzclose(file);
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": decompresses to more than ", max_bytes, " bytes"));
      }
      continue;
    }
    int errnum = Z_OK;
    const char* msg = gzerror(file, &errnum);
    if (n < 0 || (errnum != Z_OK && errnum != Z_STREAM_END)) {
      std::string what =
          absl::StrCat(path, ": ",
                       errnum == Z_BUF_ERROR ? "truncated gzip stream"
                                             : "corrupt gzip stream",
                       " (", msg != nullptr ? msg : "", ")");
      gzclose(file);
      return absl::InvalidArgumentError(what);
    }
    break;
  }
  gzclose(file);
  return ParseIdx(bytes, path);
}

}  // namespace trainyard::engine
