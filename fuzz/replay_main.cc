// A main() for the fuzz targets in ordinary builds: it runs
// LLVMFuzzerTestOneInput once on every file named on the command line or
// found in a directory named there (not recursively), in name order, so
// `ctest -L fuzz` replays each seed corpus under gcc, without libFuzzer.
// A crash, sanitizer report or abort fails the test; so does an empty
// corpus, which would mean the test checks nothing. Single-threaded.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

std::vector<fs::path> InputsOf(const fs::path& arg) {
  std::error_code ec;
  if (!fs::is_directory(arg, ec)) return {arg};
  std::vector<fs::path> out;
  for (const fs::directory_entry& e : fs::directory_iterator(arg, ec)) {
    if (e.is_regular_file(ec)) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int replayed = 0;
  for (int i = 1; i < argc; ++i) {
    for (const fs::path& path : InputsOf(argv[i])) {
      std::ifstream in(path, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "%s: cannot open\n", path.c_str());
        return 1;
      }
      const std::string bytes((std::istreambuf_iterator<char>(in)), {});
      std::printf("%s (%zu bytes)\n", path.c_str(), bytes.size());
      std::fflush(stdout);  // so a crash shows which input caused it
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()),
                             bytes.size());
      ++replayed;
    }
  }
  if (replayed == 0) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR|FILE...: no inputs found\n",
                 argv[0]);
    return 1;
  }
  std::printf("replayed %d inputs\n", replayed);
  return 0;
}
