// SPDX-License-Identifier: Apache-2.0
// A scratch directory for unit tests that need real files (FIFOs, symbolic links, devices).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace sluice::testing {

/// A fresh directory in the temporary directory, named `name` and the process id (test
/// processes may run at once), removed with what it holds when the test ends.
class temp_dir {
 public:
  explicit temp_dir(std::string_view name)
      : path_(std::filesystem::temp_directory_path() / (std::string(name) + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directory(path_);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace sluice::testing
