// SPDX-License-Identifier: Apache-2.0
// Implementation of include/sluice/s3/access_log.hpp; included by src/s3/s3.cpp.
#include <sluice/s3/access_log.hpp>

#include <sluice/detail/regular_file.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

namespace sluice::s3 {

namespace access_log_impl {

constexpr char hex_digits[] = "0123456789ABCDEF";

void append_percent(std::string& out, unsigned char c) {
  out += '%';
  out += hex_digits[c >> 4];
  out += hex_digits[c & 0xF];
}

// The length of the valid UTF-8 sequence at the start of `s`, or 0.
std::size_t utf8_sequence(std::string_view s) {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  std::size_t n = 0;
  if (c >= 0xC2 && c <= 0xDF)
    n = 2;
  else if (c >= 0xE0 && c <= 0xEF)
    n = 3;
  else if (c >= 0xF0 && c <= 0xF4)
    n = 4;
  if (n == 0 || s.size() < n) return 0;
  for (std::size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xC0) != 0x80) return 0;
  }
  // Overlong forms, surrogates and code points past U+10FFFF.
  if (c == 0xE0 && b(1) < 0xA0) return 0;
  if (c == 0xED && b(1) > 0x9F) return 0;
  if (c == 0xF0 && b(1) < 0x90) return 0;
  if (c == 0xF4 && b(1) > 0x8F) return 0;
  return n;
}

// "2026-11-25T04:18:00.123Z"
void append_time(std::string& out, std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  ::gmtime_r(&seconds, &tm);
  char buf[40];
  const int n = std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                              tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  out.append(buf, static_cast<std::size_t>(n));
}

}  // namespace access_log_impl

void append_text_field(std::string& out, std::string_view value) {
  if (value.empty()) {
    out += '-';
    return;
  }
  if (value == "-") {  // a key named "-" is not an absent one
    out += "%2D";
    return;
  }
  for (const char ch : value) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7F || c == '%' || c == '"') {
      access_log_impl::append_percent(out, c);
    } else {
      out += ch;
    }
  }
}

void append_json_string(std::string& out, std::string_view value) {
  out += '"';
  while (!value.empty()) {
    const auto c = static_cast<unsigned char>(value.front());
    if (c >= 0x80) {
      const std::size_t n = access_log_impl::utf8_sequence(value);
      if (n > 0) {
        out.append(value.substr(0, n));
        value.remove_prefix(n);
        continue;
      }
      // Not UTF-8: the byte as the code point of the same value (JSON text must be UTF-8).
      out += "\\u00";
      out += access_log_impl::hex_digits[c >> 4];
      out += access_log_impl::hex_digits[c & 0xF];
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\u00";
      out += access_log_impl::hex_digits[c >> 4];
      out += access_log_impl::hex_digits[c & 0xF];
    } else {
      out += static_cast<char>(c);
    }
    value.remove_prefix(1);
  }
  out += '"';
}

std::string format_access_line(const access_record& r, access_log_format format) {
  std::string out;
  out.reserve(256 + r.key.size() + r.bucket.size());
  if (format == access_log_format::text) {
    access_log_impl::append_time(out, r.time);
    for (const std::string_view field : {r.remote, r.user, r.method, r.bucket, r.key, r.operation}) {
      out += ' ';
      append_text_field(out, field);
    }
    out += ' ';
    out += std::to_string(r.status);
    out += ' ';
    append_text_field(out, r.error);
    for (const std::uint64_t n : {r.bytes_sent, r.bytes_received, r.bytes_direct}) {
      out += ' ';
      out += std::to_string(n);
    }
    out += ' ';
    append_text_field(out, r.path);
    out += ' ';
    out += std::to_string(r.duration_us);
    out += ' ';
    append_text_field(out, r.request_id);
    out += '\n';
    return out;
  }
  out += "{\"time\":\"";
  access_log_impl::append_time(out, r.time);
  out += '"';
  const auto string_field = [&](std::string_view name, std::string_view value) {
    out += ",\"";
    out += name;
    out += "\":";
    append_json_string(out, value);
  };
  const auto number_field = [&](std::string_view name, std::uint64_t value) {
    out += ",\"";
    out += name;
    out += "\":";
    out += std::to_string(value);
  };
  string_field("remote", r.remote);
  string_field("user", r.user.empty() ? std::string_view("-") : r.user);
  string_field("method", r.method);
  string_field("bucket", r.bucket);
  string_field("key", r.key);
  string_field("operation", r.operation);
  number_field("status", r.status);
  string_field("error", r.error.empty() ? std::string_view("-") : r.error);
  number_field("bytes_sent", r.bytes_sent);
  number_field("bytes_received", r.bytes_received);
  number_field("bytes_direct", r.bytes_direct);
  string_field("path", r.path);
  number_field("duration_us", r.duration_us);
  string_field("request_id", r.request_id);
  out += "}\n";
  return out;
}

namespace access_log_impl {

// The log file, appended to: a regular file only, never through a symbolic link at the path
// (whoever can write the log's directory could otherwise point the server's appends at a file of
// their choosing), never a FIFO that would block the open (detail::open_regular_file).
int open_log_file(const std::filesystem::path& path, error_code& ec) {
  return sluice::detail::open_regular_file(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0640, ec);
}

}  // namespace access_log_impl

access_log::access_log(const access_log_config& config, error_code& ec) : format_(config.format), path_(config.path) {
  ec = {};
  if (config.target == access_log_target::standard_error) {
    fd_ = STDERR_FILENO;
  } else if (config.target == access_log_target::file) {
    fd_ = access_log_impl::open_log_file(path_, ec);
    owns_fd_ = fd_ >= 0;
  }
}

access_log::~access_log() {
  flush();
  if (owns_fd_) ::close(fd_);
}

void access_log::write(std::string_view line) {
  std::unique_lock lock(mutex_);
  buffer_.append(line);
  if (buffer_.size() < 64 * 1024) return;
  std::unique_lock writing(write_mutex_);  // taken before mutex_ is released: buffers leave in order
  spare_.swap(buffer_);
  lock.unlock();
  write_out(spare_);
}

void access_log::flush() {
  std::unique_lock lock(mutex_);
  std::unique_lock writing(write_mutex_);
  spare_.swap(buffer_);
  lock.unlock();
  write_out(spare_);
}

void access_log::reopen(error_code& ec) {
  flush();
  ec = {};
  if (!owns_fd_) return;
  // The same checks as the first open: a symbolic link or a FIFO put at the path after logrotate
  // moved the file away is refused, and the lines go on to the file already open.
  const int fd = access_log_impl::open_log_file(path_, ec);
  if (fd < 0) return;
  std::lock_guard writing(write_mutex_);
  ::close(fd_);
  fd_ = fd;
}

void access_log::write_out(std::string& bytes) {
  std::size_t done = 0;
  while (fd_ >= 0 && done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // a full disk or a closed stderr: the lines are dropped, serving goes on
    done += static_cast<std::size_t>(n);
  }
  bytes.clear();
}

}  // namespace sluice::s3
