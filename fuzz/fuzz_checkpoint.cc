// Fuzz target: the readers of model files — a checkpoint (meta.json and
// model.safetensors) and a Hugging Face GPT-2 folder (config.json,
// model.safetensors, trainyard_tokenizer.json), which arrives from users as
// a spec's init_from — and what is read out of their metadata (the model
// description and the tokenizer). One input holds the files:
//   byte 0      flags: bit 0 rewrites meta.json's "bytes" and "crc32" to
//               match the tensor part, so mutated tensors get past the
//               checksum to the safetensors parser; bit 1 passes the JSON
//               part as the folder's tokenizer file too
//   then        the JSON part (meta.json, also read as config.json), a NUL
//               byte (JSON text never holds one), and the tensor part
//               (model.safetensors) to the end.
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "engine/core/checkpoint.h"
#include "engine/core/file_io.h"
#include "engine/core/gpt.h"
#include "engine/core/hf_gpt2.h"
#include "engine/core/json.h"
#include "engine/core/safetensors.h"
#include "engine/data/tokenizer.h"
#include "fuzz/fuzz_report.h"

namespace {

using namespace trainyard::engine;  // NOLINT: a fuzz target of one module

// Replaces the value after `key`, up to the next of `ends`, by `value`,
// when the key is there.
void Rewrite(std::string* json, const std::string& key, const char* ends,
             const std::string& value) {
  const size_t at = json->find(key);
  if (at == std::string::npos) return;
  const size_t begin = at + key.size();
  const size_t stop = json->find_first_of(ends, begin);
  if (stop == std::string::npos) return;
  json->replace(begin, stop - begin, value);
}

// What a reader does with metadata it has parsed.
void UseMetadata(const Json& model, const Json& tokenizer) {
  if (model.is_object()) {
    trainyard::fuzz::Report("model", GptConfigFromDescription(model).status());
  }
  if (tokenizer.is_object()) {
    absl::StatusOr<Tokenizer> t = Tokenizer::FromJson(tokenizer);
    trainyard::fuzz::Report("tokenizer", t.status());
    if (t.ok()) (void)t->Decode(std::vector<int32_t>{0, 1, -1, 1 << 30});
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const absl::string_view rest(reinterpret_cast<const char*>(data) + 1,
                               size - 1);
  const size_t nul = rest.find('\0');
  std::string json(rest.substr(0, nul));
  const absl::string_view tensors = nul == absl::string_view::npos
                                        ? absl::string_view()
                                        : rest.substr(nul + 1);
  if (flags & 1) {
    Rewrite(&json, "\"bytes\":", ",}", absl::StrCat(tensors.size()));
    Rewrite(&json, "\"crc32\":\"", "\"",
            absl::StrFormat("%08x", Crc32(0, tensors)));
  }

  trainyard::fuzz::Report(
      "safetensors", ParseSafetensors(tensors, "model.safetensors").status());
  absl::StatusOr<Checkpoint> ckpt = ParseCheckpoint(json, tensors, "ckpt");
  trainyard::fuzz::Report("checkpoint", ckpt.status());
  if (ckpt.ok()) UseMetadata(ckpt->meta.model, ckpt->meta.tokenizer);

  absl::StatusOr<HfGpt2> hf =
      ParseHfGpt2(json, tensors, (flags & 2) ? &json : nullptr, "hf");
  trainyard::fuzz::Report("hf_gpt2", hf.status());
  if (hf.ok()) UseMetadata(Json(), hf->tokenizer);

  // The JSON part as any metadata object on its own.
  absl::StatusOr<Json> parsed = ParseJson(json);
  if (parsed.ok()) UseMetadata(*parsed, *parsed);
  return 0;
}
