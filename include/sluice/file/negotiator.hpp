// SPDX-License-Identifier: Apache-2.0
// The file negotiator: the other end is a local file (or block device). It opens the file a
// request names, resolves the range against the file's size, measures the range's page-cache
// residency when asked (the file → device transport chooses its method by it), and closes the
// file when the last of the session and the transports' reads lets go of it. Reads only.
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/detail/completion.hpp>
#include <sluice/file/residency.hpp>

#include <boost/asio/async_result.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

namespace sluice::file {

/// A file opened read-only (O_CLOEXEC) for one transfer; the descriptor closes on destruction.
class open_file {
 public:
  /// Opens `path` and takes the size of a regular file or block device. Errors: the errno of
  /// open or fstat (system_category), errc::invalid_argument for anything else (a directory, a
  /// FIFO: nothing to range-check against).
  [[nodiscard]] static std::shared_ptr<const open_file> open(const std::filesystem::path& path, error_code& ec);

  open_file(const open_file&) = delete;
  open_file& operator=(const open_file&) = delete;
  ~open_file();

  [[nodiscard]] int fd() const noexcept { return fd_; }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// The size when it was opened: the range a session agreed was checked against it.
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }

 private:
  open_file(int fd, std::filesystem::path path, std::uint64_t size) : fd_(fd), path_(std::move(path)), size_(size) {}
  int fd_;
  std::filesystem::path path_;
  std::uint64_t size_;
};

/// What a file transport reads from: the open file, and the negotiated range's page-cache
/// residency when the negotiator measured it.
struct file_remote {
  std::shared_ptr<const open_file> file;
  std::optional<page_residency> residency;
  /// The file's size; 0 for an empty descriptor.
  [[nodiscard]] std::uint64_t size() const noexcept { return file ? file->size() : 0; }
};

/// Checks a read of `span` between `local` and a file remote in the transports' order:
/// errc::region_too_small, errc::bad_range (overflow-safe), then errc::unsupported_memory when
/// `device_memory` differs from whether `local` is device memory.
[[nodiscard]] error_code check_read(const region& local, const file_remote& remote, transfer_span span,
                                    bool device_memory) noexcept;

/// Negotiates reads of local files: the request's key is the file's path (absolute, or relative
/// to the working directory) and its bucket must be empty. A negotiation opens the file, so it
/// blocks the initiating thread for an open and an fstat (and the residency probe when asked:
/// cachestat, or mincore over a mapping where the kernel has no cachestat). It opens whatever
/// path the process may read: the key is trusted, never a name from the network. Stateless apart
/// from its options; thread-safe.
class negotiator {
 public:
  using remote_type = file_remote;
  static constexpr std::string_view name = "file";

  struct options {
    /// Measure the negotiated range's page-cache residency (file_remote::residency).
    bool probe_residency = false;
  };

  /// One agreed read: the open file and the range. The file stays open while the session or a
  /// copy of its remote lives.
  class session {
   public:
    [[nodiscard]] const file_remote& remote() const noexcept { return remote_; }
    [[nodiscard]] transfer_span span() const noexcept { return span_; }

   private:
    friend class negotiator;
    file_remote remote_;
    transfer_span span_{};
  };
  using session_type = session;

  negotiator() = default;
  explicit negotiator(options o) noexcept : options_(o) {}

  /// Opens the file and resolves the range. Completion: `void(error_code, session_type)`.
  /// Errors: errc::invalid_argument (a put: files are read only; a non-empty bucket; an empty
  /// key; not a regular file or block device), errc::bad_range (the range is not inside the
  /// file), the errno of open, fstat or the residency probe.
  template <class CompletionToken>
  auto async_negotiate(const transfer_request& request, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, session_type)>(
        [this](auto handler, const transfer_request& req) {
          error_code ec;
          session_type s = negotiate(req, ec);
          sluice::detail::post_completion(std::move(handler), ec, std::move(s));
        },
        token, request);
  }

  /// Ends `s`: a read that moved fewer bytes than agreed is errc::protocol_violation. The file
  /// closes once the transports' reads let go of it too. Completion: `void(error_code,
  /// transfer_result)`.
  template <class CompletionToken>
  auto async_complete(session_type&& s, error_code transport_error, std::uint64_t bytes, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, transfer_result)>(
        [](auto handler, session_type owned, error_code ec, std::uint64_t n) {
          if (!ec && n != owned.span_.length) ec = errc::protocol_violation;
          owned.remote_.file.reset();
          transfer_result result;
          result.bytes = n;
          result.negotiator = name;
          sluice::detail::post_completion(std::move(handler), ec, std::move(result));
        },
        token, std::move(s), transport_error, bytes);
  }

  /// The negotiation itself, blocking; what async_negotiate runs.
  [[nodiscard]] session_type negotiate(const transfer_request& request, error_code& ec) const;

 private:
  options options_{};
};

}  // namespace sluice::file
