// Fuzz target: llm.c token shards (a 1024-byte header of int32 {magic,
// version, token count} then uint16 tokens) through the shard parser, and
// the windows a language-model job then cuts from the tokens.
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/core/batch.h"
#include "engine/data/token_data.h"
#include "fuzz/fuzz_report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainyard::engine;  // NOLINT: a fuzz target of one module
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto tokens = std::make_shared<std::vector<int32_t>>();
  const absl::Status parsed = ParseTokenShard(bytes, "shard.bin", tokens.get());
  trainyard::fuzz::Report("shard", parsed);
  if (!parsed.ok()) return 0;
  if (FirstTokenOutside(*tokens, 65536) != -1) __builtin_trap();
  // Training windows (stride 1) and evaluation windows (stride seq_len): the
  // first and the last of each.
  for (int64_t stride : {1, 8}) {
    TokenWindows windows(tokens, 8, stride, 65536);
    if (windows.size() == 0) continue;
    const std::vector<int64_t> indices = {0, windows.size() - 1};
    Batch batch;
    windows.Gather(indices, &batch);
  }
  return 0;
}
