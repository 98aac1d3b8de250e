// safetensors writer and strict reader. See safetensors.h.
#include "engine/core/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/core/file_io.h"
#include "engine/core/json.h"

namespace trainyard::engine {

// Raw tensor bytes are copied as they sit in memory.
static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; add byte swapping here");

namespace {

// The format allows 100 MB; a GPT-2 header takes tens of KB and one of our
// checkpoints (weights and two AdamW moments of 256 layers) about 1 MB.
constexpr int64_t kMaxHeaderBytes = int64_t{16} << 20;
// Elements of one tensor: 2^40 fp32 values is 4 TiB, and 4 * 2^40 bytes
// cannot overflow an offset.
constexpr int64_t kMaxTensorElements = int64_t{1} << 40;

std::string LittleEndian64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return out;
}

absl::StatusOr<std::string> BuildHeader(
    const std::vector<HostTensor>& tensors) {
  Json header = Json::MakeObject();
  // "format": "pt" is what Hugging Face loaders expect of PyTorch weights.
  header.Set("__metadata__",
             Json::MakeObject({{"format", Json::String("pt")},
                               {"producer", Json::String("trainyard")}}));
  std::set<std::string> names;
  int64_t offset = 0;
  for (const HostTensor& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" ||
        !names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors: bad or duplicate tensor name '", t.name, "'"));
    }
    if (static_cast<int64_t>(t.data.size()) != NumElements(t.shape)) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor ", t.name, " has ", t.data.size(),
                       " values for shape ", ShapeString(t.shape)));
    }
    Json shape = Json::MakeArray();
    for (int64_t d : t.shape) shape.Append(Json::Int(d));
    const int64_t end = offset + static_cast<int64_t>(t.data.size()) * 4;
    header.Set(t.name,
               Json::MakeObject(
                   {{"dtype", Json::String("F32")},
                    {"shape", std::move(shape)},
                    {"data_offsets",
                     Json::MakeArray({Json::Int(offset), Json::Int(end)})}}));
    offset = end;
  }
  std::string text = header.Serialize();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

struct Entry {
  HostTensor tensor;
  int64_t begin = 0;
  int64_t end = 0;
};

absl::StatusOr<Entry> ParseEntry(const std::string& name, const Json& j) {
  Entry e;
  e.tensor.name = name;
  if (!j.is_object()) return absl::DataLossError("entry is not an object");
  ASSIGN_OR_RETURN(const Json* dtype, RequireField(j, "dtype"));
  ASSIGN_OR_RETURN(std::string dtype_name, dtype->AsString("dtype"));
  if (dtype_name != "F32") {
    return absl::DataLossError(
        absl::StrCat("dtype ", dtype_name, " (only F32 is supported)"));
  }
  ASSIGN_OR_RETURN(const Json* shape, RequireField(j, "shape"));
  if (!shape->is_array() || shape->array().size() > 8) {
    return absl::DataLossError("shape must be an array of at most 8 dims");
  }
  int64_t numel = 1;
  for (const Json& d : shape->array()) {
    ASSIGN_OR_RETURN(int64_t dim, d.AsInt("shape"));
    if (dim < 0 || (dim > 0 && numel > kMaxTensorElements / dim)) {
      return absl::DataLossError(absl::StrCat("bad dimension ", dim));
    }
    numel *= dim;
    e.tensor.shape.push_back(dim);
  }
  ASSIGN_OR_RETURN(const Json* offsets, RequireField(j, "data_offsets"));
  if (!offsets->is_array() || offsets->array().size() != 2) {
    return absl::DataLossError("data_offsets must be [begin, end]");
  }
  ASSIGN_OR_RETURN(e.begin, offsets->array()[0].AsInt("data_offsets"));
  ASSIGN_OR_RETURN(e.end, offsets->array()[1].AsInt("data_offsets"));
  // end < begin first: end - begin must not overflow.
  if (e.begin < 0 || e.end < e.begin || e.end - e.begin != numel * 4) {
    return absl::DataLossError(absl::StrCat(
        "data_offsets [", e.begin, ", ", e.end, "] do not hold shape ",
        ShapeString(e.tensor.shape), " of F32"));
  }
  return e;
}

// The format requires the tensors to tile the data section exactly: no
// overlap, no gap, nothing left over (a short file is truncation).
absl::Status CheckTiling(const std::vector<Entry>& entries, size_t data_size) {
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  int64_t expected = 0;
  for (const Entry* e : by_offset) {
    if (e->begin != expected) {
      return absl::DataLossError(
          absl::StrCat("tensor ", e->tensor.name,
                       " data overlaps or leaves a gap at byte ", e->begin));
    }
    expected = e->end;
  }
  const int64_t have = static_cast<int64_t>(data_size);
  if (expected != have) {
    return absl::DataLossError(absl::StrCat(
        expected > have ? "truncated" : "corrupt", ": tensors need ", expected,
        " data bytes, the file has ", have));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SafetensorsWriteResult> WriteSafetensors(
    const std::string& path, const std::vector<HostTensor>& tensors) {
  ASSIGN_OR_RETURN(std::string header, BuildHeader(tensors));
  ASSIGN_OR_RETURN(DurableFileWriter out, DurableFileWriter::Create(path));
  RETURN_IF_ERROR(out.Append(LittleEndian64(header.size())));
  RETURN_IF_ERROR(out.Append(header));
  for (const HostTensor& t : tensors) {
    RETURN_IF_ERROR(out.Append(absl::string_view(
        reinterpret_cast<const char*>(t.data.data()), t.data.size() * 4)));
  }
  SafetensorsWriteResult result{out.bytes_written(), out.crc32()};
  RETURN_IF_ERROR(out.Close());
  return result;
}

absl::StatusOr<std::vector<HostTensor>> ParseSafetensors(
    absl::string_view bytes, absl::string_view source) {
  auto fail = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(source, ": ", what));
  };
  if (bytes.size() < 8)
    return fail("truncated: shorter than the 8-byte header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = (header_len << 8) | static_cast<unsigned char>(bytes[i]);
  }
  if (header_len > static_cast<uint64_t>(kMaxHeaderBytes) ||
      header_len > bytes.size() - 8) {
    return fail(absl::StrCat("truncated or corrupt: header length ", header_len,
                             " but the file has ", bytes.size(), " bytes"));
  }
  absl::StatusOr<Json> header = ParseJson(bytes.substr(8, header_len));
  if (!header.ok())
    return fail(absl::StrCat("header: ", header.status().message()));
  if (!header->is_object()) return fail("header is not a JSON object");
  const absl::string_view data = bytes.substr(8 + header_len);

  std::vector<Entry> entries;
  std::set<std::string> names;
  for (const auto& [name, value] : header->object()) {
    if (name == "__metadata__") continue;
    if (!names.insert(name).second)
      return fail(absl::StrCat("duplicate tensor ", name));
    absl::StatusOr<Entry> e = ParseEntry(name, value);
    if (!e.ok())
      return fail(absl::StrCat("tensor ", name, ": ", e.status().message()));
    entries.push_back(*std::move(e));
  }
  if (absl::Status st = CheckTiling(entries, data.size()); !st.ok()) {
    return fail(st.message());
  }
  std::vector<HostTensor> out;
  for (Entry& e : entries) {
    e.tensor.data.resize(static_cast<size_t>((e.end - e.begin) / 4));
    // An empty tensor's data() may be null, and memcpy(null, p, 0) is
    // undefined behaviour all the same.
    if (e.end > e.begin) {
      std::memcpy(e.tensor.data.data(), data.data() + e.begin, e.end - e.begin);
    }
    out.push_back(std::move(e.tensor));
  }
  return out;
}

}  // namespace trainyard::engine
