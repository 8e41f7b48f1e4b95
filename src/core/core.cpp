// SPDX-License-Identifier: Apache-2.0
// Compiled part of sluice::core: configuration validation, the JSON loader (simdjson), and
// reading the files an operator names (detail/regular_file.hpp).
#include <sluice/config.hpp>
#include <sluice/detail/regular_file.hpp>

#include "common/json_fields.hpp"

#include <simdjson.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

namespace sluice {

namespace {

std::optional<config_error> out_of_range(std::string field, std::string reason) {
  return config_error{std::move(field), std::move(reason)};
}

// A field's JSON path relative to its section, made absolute by the caller.
std::optional<config_error> prefixed(std::optional<config_error> error, std::string_view section) {
  if (error) error->field = std::string(section) + "." + error->field;
  return error;
}

}  // namespace

std::optional<config_error> transfer_config::validate() const {
  if (part_size < 4 * kib || part_size > 5 * gib) {
    return out_of_range("part_size", "must be between 4 KiB and 5 GiB");
  }
  if (parts_in_flight < 1 || parts_in_flight > 256) {
    return out_of_range("parts_in_flight", "must be between 1 and 256");
  }
  if (staging_bytes < part_size) {
    return out_of_range("staging_bytes", "must hold at least one part (part_size bytes)");
  }
  return std::nullopt;
}

std::optional<config_error> memory_store_config::validate() const {
  if (max_bytes == 0) return out_of_range("max_bytes", "must be greater than 0");
  if (max_object_bytes == 0) return out_of_range("max_object_bytes", "must be greater than 0");
  if (max_object_bytes > max_bytes) return out_of_range("max_object_bytes", "must not exceed max_bytes");
  return std::nullopt;
}

std::optional<config_error> config::validate() const {
  if (auto e = prefixed(transfer.validate(), "transfer")) return e;
  if (auto e = prefixed(memory_store.validate(), "memory_store")) return e;
  return std::nullopt;
}

std::optional<std::uint64_t> parse_size(std::string_view text) noexcept {
  std::uint64_t value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec != std::errc{} || ptr == first) return std::nullopt;
  std::string_view unit(ptr, static_cast<std::size_t>(last - ptr));
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  std::uint64_t scale = 1;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else {
    const char head = static_cast<char>(std::toupper(static_cast<unsigned char>(unit.front())));
    const std::string_view tail = unit.substr(1);
    if (tail != "" && tail != "iB" && tail != "B") return std::nullopt;
    switch (head) {
      case 'K': scale = kib; break;
      case 'M': scale = mib; break;
      case 'G': scale = gib; break;
      case 'T': scale = 1024 * gib; break;
      default: return std::nullopt;
    }
  }
  if (value > std::numeric_limits<std::uint64_t>::max() / scale) return std::nullopt;
  return value * scale;
}

config parse_config(std::string_view json, error_code& ec, config_error& error) {
  config result;
  auto fail = [&](config_error e) {
    error = std::move(e);
    ec = errc::invalid_config;
    return config{};
  };
  simdjson::dom::parser parser;
  detail::json::element root;
  if (auto e = detail::json::parse(parser, json, root)) return fail(std::move(*e));
  simdjson::dom::object top;
  if (root.get(top) != simdjson::SUCCESS) return fail({"", "the configuration must be a JSON object"});

  using namespace detail::json;
  const std::vector<std::pair<std::string_view, field_table>> sections{
      {"transfer",
       {{"part_size", size_field(result.transfer.part_size)},
        {"parts_in_flight", count_field(result.transfer.parts_in_flight)},
        {"staging_bytes", size_field(result.transfer.staging_bytes)}}},
      {"memory_store",
       {{"max_bytes", size_field(result.memory_store.max_bytes)},
        {"max_object_bytes", size_field(result.memory_store.max_object_bytes)}}},
  };
  for (auto member : top) {
    const std::string_view key = member.key;
    auto it = std::find_if(sections.begin(), sections.end(), [&](const auto& s) { return s.first == key; });
    if (it == sections.end()) return fail({std::string(key), "unknown section"});
    if (auto e = read_fields(member.value, std::string(key) + ".", it->second)) return fail(std::move(*e));
  }
  if (auto e = result.validate()) return fail(std::move(*e));
  ec = {};
  error = {};
  return result;
}

config parse_config(std::string_view json) {
  error_code ec;
  config_error error;
  config result = parse_config(json, ec, error);
  if (ec) throw std::invalid_argument(error.message());
  return result;
}

std::string read_config_file(const std::filesystem::path& file, error_code& ec, config_error& error) {
  std::string text = detail::read_regular_file(file, max_config_file_bytes, ec);
  if (ec) {
    std::string reason = ec == detail::file_errc::too_large
                             ? "larger than " + std::to_string(max_config_file_bytes / mib) +
                                   " MiB, the most a configuration file may hold"
                             : "cannot read the file: " + ec.message();
    error = {file.string(), std::move(reason)};
    ec = errc::invalid_config;
    return {};
  }
  error = {};
  return text;
}

config load_config(const std::filesystem::path& file, error_code& ec, config_error& error) {
  const std::string text = read_config_file(file, ec, error);
  if (ec) return {};
  return parse_config(text, ec, error);
}

namespace detail {

int open_regular_file(const std::filesystem::path& path, int flags, unsigned mode, error_code& ec) noexcept {
  ec = {};
  int fd = -1;
  do {
    fd = ::open(path.c_str(), flags | O_NONBLOCK | O_CLOEXEC, static_cast<mode_t>(mode));
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int open_errno = errno;
    // Say what is at the path when that is why open(2) failed: ELOOP from O_NOFOLLOW on a link,
    // ENXIO from a FIFO without a reader opened for writing, EISDIR from a directory.
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
      if (S_ISLNK(st.st_mode) && (flags & O_NOFOLLOW) != 0) {
        ec = file_errc::symbolic_link;
        return -1;
      }
      if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
        ec = file_errc::not_regular_file;
        return -1;
      }
    }
    ec = error_code(open_errno, boost::system::generic_category());
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ec = error_code(errno, boost::system::generic_category());
    ::close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    ec = file_errc::not_regular_file;
    return -1;
  }
  // Regular files ignore O_NONBLOCK; cleared so the descriptor behaves as an ordinary one.
  const int status = ::fcntl(fd, F_GETFL);
  if (status >= 0) (void)::fcntl(fd, F_SETFL, status & ~O_NONBLOCK);
  return fd;
}

std::string read_regular_file(const std::filesystem::path& path, std::size_t max_bytes, error_code& ec) {
  const int fd = open_regular_file(path, O_RDONLY, 0, ec);
  if (fd < 0) return {};
  std::string text;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    ec = file_errc::too_large;
    return {};
  }
  // One byte past the bound tells a file that grew (or reports no size) from one that fits.
  text.resize(static_cast<std::size_t>(std::min<std::uint64_t>(static_cast<std::uint64_t>(st.st_size), max_bytes)) + 1);
  std::size_t done = 0;
  for (;;) {
    if (done == text.size()) {
      if (text.size() > max_bytes) break;
      text.resize(std::min<std::size_t>(std::max<std::size_t>(text.size() * 2, 4096), max_bytes + 1));
    }
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ec = error_code(errno, boost::system::generic_category());
      ::close(fd);
      return {};
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (done > max_bytes) {
    ec = file_errc::too_large;
    return {};
  }
  text.resize(done);
  return text;
}

}  // namespace detail

}  // namespace sluice
