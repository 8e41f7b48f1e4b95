// SPDX-License-Identifier: Apache-2.0
// Corpus replay for compilers without libFuzzer: runs LLVMFuzzerTestOneInput once over every
// file named on the command line or found (recursively) under a directory named there, so that
// the fuzz targets' invariants are checked on the seed corpus in every build. Arguments that
// start with '-' (libFuzzer flags) are ignored. Fails when no input ran.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string_view>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

// Runs one input; false when the file cannot be read.
bool run_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::cerr << "replay: cannot read " << file << '\n';
    return false;
  }
  const std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::uint8_t> bytes(chars.begin(), chars.end());
  // A null pointer for an empty input, as libFuzzer may pass; size is all that counts.
  LLVMFuzzerTestOneInput(bytes.empty() ? nullptr : bytes.data(), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t ran = 0;
  bool failed = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view arg = argv[i];
      if (arg.starts_with("-")) continue;
      const std::filesystem::path path(arg);
      std::error_code ec;
      if (std::filesystem::is_directory(path, ec)) {
        for (const auto& entry : std::filesystem::recursive_directory_iterator(path)) {
          if (!entry.is_regular_file()) continue;
          if (run_file(entry.path())) {
            ++ran;
          } else {
            failed = true;
          }
        }
      } else if (std::filesystem::is_regular_file(path, ec)) {
        if (run_file(path)) {
          ++ran;
        } else {
          failed = true;
        }
      } else {
        std::cerr << "replay: no such file or directory: " << path << '\n';
        failed = true;
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "replay: " << e.what() << '\n';
    return 1;
  }
  std::cout << "replay: ran " << ran << " input" << (ran == 1 ? "" : "s") << '\n';
  if (ran == 0) {
    std::cerr << "replay: no inputs ran\n";
    return 1;
  }
  return failed ? 1 : 0;
}
