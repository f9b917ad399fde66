// A stand-in for libFuzzer's main, for builds without clang: runs LLVMFuzzerTestOneInput once on
// every file named on the command line, and on every file (recursively) under each directory so
// named. The target is compiled and linked exactly as for fuzzing, only the input generator is
// missing, so a corpus that passes here passes under libFuzzer and the other way round. With
// ASan/UBSan in -fno-sanitize-recover mode a bad input aborts the process: that is the failure
// a ctest case reports.
//
//   fuzz_hostlist_replay fuzz/corpus/hostlist/ crash-1234   → "replayed 38 inputs"

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

// libFuzzer hands a target exactly the input's bytes in a buffer of that size; so do we (a
// heap copy of exactly `size` bytes, not a std::string with spare capacity), so ASan catches a
// read one past the end here as it would there.
int run_one(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read '%s'\n", path.c_str());
    return 1;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto* buffer = new uint8_t[std::max<size_t>(bytes.size(), 1)];
  std::copy(bytes.begin(), bytes.end(), buffer);
  std::fprintf(stderr, "replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
  LLVMFuzzerTestOneInput(buffer, bytes.size());
  delete[] buffer;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  int inputs = 0;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path path(argv[i]);
    std::error_code error;
    if (std::filesystem::is_directory(path, error)) {
      // Sorted, so that two runs replay in the same order and a failure is reproducible.
      std::vector<std::filesystem::path> files;
      for (const auto& entry : std::filesystem::recursive_directory_iterator(path, error)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());
      for (const auto& file : files) {
        if (run_one(file) != 0) return 1;
        ++inputs;
      }
    } else {
      if (run_one(path) != 0) return 1;
      ++inputs;
    }
  }
  std::fprintf(stderr, "replay: replayed %d input%s\n", inputs, inputs == 1 ? "" : "s");
  return 0;
}
