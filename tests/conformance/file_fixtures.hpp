// SPDX-License-Identifier: Apache-2.0
// File pieces for conformance fixtures: a remote that is a file on the local file system, opened
// as the file negotiator opens it.
#pragma once

#include <sluice/file/negotiator.hpp>

#include <doctest/doctest.h>

#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace sluice::testing {

/// A file of `initial` bytes in the temporary directory, removed on destruction.
class file_on_disk {
 public:
  explicit file_on_disk(std::span<const std::byte> initial) {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("sluice-file-remote-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(initial.data()), static_cast<std::streamsize>(initial.size()));
    REQUIRE(out.good());
  }
  file_on_disk(const file_on_disk&) = delete;
  file_on_disk& operator=(const file_on_disk&) = delete;
  ~file_on_disk() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }

  /// The file opened as the negotiator opens it (no residency measured).
  [[nodiscard]] file::file_remote descriptor() const {
    error_code ec;
    file::file_remote remote{file::open_file::open(path_, ec), {}};
    REQUIRE_MESSAGE(!ec, ec.message());
    return remote;
  }
  [[nodiscard]] std::vector<std::byte> contents() const {
    std::ifstream in(path_, std::ios::binary);
    std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    std::vector<std::byte> out(bytes.size());
    for (std::size_t i = 0; i < bytes.size(); ++i) out[i] = static_cast<std::byte>(bytes[i]);
    return out;
  }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace sluice::testing
