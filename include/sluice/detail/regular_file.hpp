// SPDX-License-Identifier: Apache-2.0
// Opening files an operator names (the configuration, the access log) so that whatever sits at
// the path cannot hang or exhaust the server: regular files only, opened without blocking, and
// read with a bound. A FIFO would block open(2) until a writer came (a SIGHUP reload stuck there
// never returns to sigwait, so SIGTERM goes unanswered), /dev/zero never ends, and a symbolic link
// planted at a log path turns the server's appends into writes to a file of the link's choosing.
#pragma once

#include <sluice/error.hpp>

#include <cstddef>
#include <filesystem>
#include <string>
#include <type_traits>

namespace sluice::detail {

/// Why a file an operator named was refused.
enum class file_errc : int {
  not_regular_file = 1,  ///< a FIFO, socket, device or directory where a regular file is expected
  symbolic_link,         ///< a symbolic link where one is refused (O_NOFOLLOW: the access log)
  too_large,             ///< more bytes than the reader's bound
};

class file_category_impl final : public boost::system::error_category {
 public:
  [[nodiscard]] const char* name() const noexcept override { return "sluice.file"; }
  [[nodiscard]] std::string message(int value) const override {
    switch (static_cast<file_errc>(value)) {
      case file_errc::not_regular_file: return "not a regular file (a FIFO, socket, device or directory is refused)";
      case file_errc::symbolic_link: return "is a symbolic link (refused: name the file itself)";
      case file_errc::too_large: return "file larger than its size limit";
    }
    return "unknown file error";
  }
};

/// The category of file_errc values; its name() is "sluice.file".
inline const boost::system::error_category& file_category() noexcept {
  static const file_category_impl category;
  return category;
}

/// Makes `file_errc` values usable wherever an error_code is expected.
inline error_code make_error_code(file_errc e) noexcept { return {static_cast<int>(e), file_category()}; }

/// Opens `path` with open(2) `flags` (O_RDONLY, or O_WRONLY | O_CREAT | O_APPEND, and O_NOFOLLOW
/// where a symbolic link is refused) plus O_NONBLOCK and O_CLOEXEC, so that a FIFO cannot block
/// the open; then fstat(2) refuses anything but a regular file (file_errc::not_regular_file), and
/// O_NONBLOCK is cleared again. A symbolic link refused by O_NOFOLLOW is file_errc::symbolic_link;
/// a FIFO without a reader, opened for writing, is file_errc::not_regular_file too (not ENXIO).
/// Other failures are open(2)'s errno in the generic category. Returns the descriptor (the
/// caller closes it), or -1 with `ec` set.
[[nodiscard]] int open_regular_file(const std::filesystem::path& path, int flags, unsigned mode,
                                    error_code& ec) noexcept;

/// The whole of `path`, opened with open_regular_file (symbolic links followed; what they name
/// must be a regular file). More than `max_bytes` is file_errc::too_large, found from fstat or,
/// for a file that grows or reports no size (procfs), after reading at most max_bytes + 1 bytes.
/// Memory is bounded by `max_bytes` whatever the file is.
[[nodiscard]] std::string read_regular_file(const std::filesystem::path& path, std::size_t max_bytes, error_code& ec);

}  // namespace sluice::detail

template <>
struct boost::system::is_error_code_enum<sluice::detail::file_errc> : std::true_type {};
