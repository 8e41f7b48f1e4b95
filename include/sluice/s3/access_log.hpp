// SPDX-License-Identifier: Apache-2.0
// sluice::s3 access log: one line per request a server answers (or gives up on), as text or
// JSON, to stderr or a file. Formatting is a pure function over a record (unit-tested); the sink
// buffers lines under a mutex and writes whole buffers, so lines never interleave.
#pragma once

#include <sluice/error.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <string_view>

namespace sluice::s3 {

/// How access log lines are written.
enum class access_log_format {
  text,  ///< space-separated fields; strings %XX-escaped (never a space or control character)
  json,  ///< one JSON object per line
};

/// Where access log lines go.
enum class access_log_target {
  off,
  standard_error,
  /// access_log_config::path, opened for appending (created 0640). It must be a regular file
  /// named directly: a symbolic link at the path (the last component) is refused, and so is a
  /// FIFO, socket, device or directory.
  file,
};

/// The access log of a server (server_config::access_log). Off by default.
struct access_log_config {
  access_log_target target = access_log_target::off;
  std::filesystem::path path;  ///< for access_log_target::file
  access_log_format format = access_log_format::text;
};

/// What the log says of one request. Strings are views for the duration of the call.
struct access_record {
  std::chrono::system_clock::time_point time;  ///< when the request's header was read
  std::string_view remote;                     ///< the client's address
  std::string_view user;                       ///< access key id, "anonymous", or empty (written "-")
  std::string_view method;
  std::string_view bucket;
  std::string_view key;
  std::string_view operation;        ///< operation_name(): "GetObject"
  unsigned status = 0;               ///< HTTP status answered; 0: no answer (the client went away)
  std::string_view error;            ///< S3 error code, empty on success
  std::uint64_t bytes_sent = 0;      ///< response body bytes over HTTP
  std::uint64_t bytes_received = 0;  ///< request payload bytes over HTTP
  std::uint64_t bytes_direct = 0;    ///< payload bytes moved by RDMA or a same-host grant
  std::string_view path;             ///< "http", "rdma:<provider>", "grant:<kind>" or "none"
  std::uint64_t duration_us = 0;
  std::string_view request_id;  ///< the reply's x-amz-request-id
};

/// Appends `value` to `out` for the text format: bytes outside printable ASCII, space, '%' and
/// '"' become %XX, so a field never holds a separator or a line break; empty becomes "-".
void append_text_field(std::string& out, std::string_view value);

/// Appends `value` to `out` as a JSON string (quotes included): '"', '\\' and control
/// characters escaped, bytes that are not valid UTF-8 as \u00XX of the byte.
void append_json_string(std::string& out, std::string_view value);

/// One log line of `record`, ending in '\n'. Text fields, in order: time remote user method
/// bucket key operation status error bytes_sent bytes_received bytes_direct path duration_us
/// request_id. JSON: an object with those names.
[[nodiscard]] std::string format_access_line(const access_record& record, access_log_format format);

/// Where a server writes its access log lines. Thread-safe: lines are appended to a buffer under
/// a mutex and the buffer is written out (one write(2) per buffer, in order) when it holds
/// 64 KiB, on flush() (the server calls it every second and when it stops), and at destruction.
/// Only the thread that finds the buffer full waits for the disk; others go on appending.
class access_log {
 public:
  /// Opens the target; errors from open(2) in `ec`, and detail::file_errc::symbolic_link or
  /// ::not_regular_file for a file target that is a symbolic link or not a regular file.
  access_log(const access_log_config& config, error_code& ec);
  access_log(const access_log&) = delete;
  access_log& operator=(const access_log&) = delete;
  ~access_log();

  [[nodiscard]] access_log_format format() const noexcept { return format_; }
  /// Appends one formatted line (format_access_line()).
  void write(std::string_view line);
  /// Writes out what is buffered.
  void flush();
  /// Reopens a file target (after logrotate moved it away); flushes first. The path is checked as
  /// at construction; on an error the file already open stays the log.
  void reopen(error_code& ec);

 private:
  void write_out(std::string& bytes);  // with write_mutex_ held

  access_log_format format_;
  std::filesystem::path path_;
  int fd_ = -1;
  bool owns_fd_ = false;
  std::mutex mutex_;        // guards buffer_
  std::mutex write_mutex_;  // orders buffers on their way to fd_
  std::string buffer_;
  std::string spare_;  // guarded by write_mutex_
};

}  // namespace sluice::s3
