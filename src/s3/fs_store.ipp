// Implementation of include/sluice/s3/fs_store.hpp; included by src/s3/s3.cpp.
#include <sluice/s3/fs_store.hpp>

#include <openssl/evp.h>
#include <simdjson.h>

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <system_error>
#include <tuple>
#include <utility>

namespace sluice::s3 {
// Helpers of this file only. A named namespace, not an anonymous one: fs_store::opened holds
// a unique_fd. (Inside sluice::s3, errc is the S3 enumeration: sluice::errc is spelled out.)
namespace fs_store_impl {

namespace fs = std::filesystem;

constexpr std::string_view header_magic = "SLUICEO1";
constexpr std::size_t header_prefix = 16;  // magic, header length, JSON length
constexpr std::string_view hex_digits = "0123456789abcdef";

error_code sys_error(int value) { return {value, boost::system::generic_category()}; }
error_code last_error() { return sys_error(errno); }
error_code sys_error(const std::error_code& e) { return sys_error(e.value()); }

// An owned file descriptor.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) : fd_(fd) {}
  unique_fd(unique_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }
  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

unique_fd open_fd(const fs::path& path, int flags, error_code& ec, mode_t mode = 0644) {
  int fd = -1;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    ec = last_error();
    return {};
  }
  ec = {};
  return unique_fd(fd);
}

off_t to_off(std::uint64_t v) { return static_cast<off_t>(v); }

// Writes all of [data, data + size) at `offset`.
bool write_all(int fd, const std::byte* data, std::size_t size, std::uint64_t offset, error_code& ec) {
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, data, size, to_off(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      ec = last_error();
      return false;
    }
    if (n == 0) {
      ec = sys_error(EIO);
      return false;
    }
    const auto done = static_cast<std::size_t>(n);
    data += done;
    size -= done;
    offset += done;
  }
  ec = {};
  return true;
}

// Reads up to `size` bytes at `offset`; fewer only at the end of the file.
std::size_t read_all(int fd, std::byte* data, std::size_t size, std::uint64_t offset, error_code& ec) {
  std::size_t total = 0;
  while (total < size) {
    const ssize_t n = ::pread(fd, data + total, size - total, to_off(offset + total));
    if (n < 0) {
      if (errno == EINTR) continue;
      ec = last_error();
      return total;
    }
    if (n == 0) break;
    total += static_cast<std::size_t>(n);
  }
  ec = {};
  return total;
}

// Copies `length` bytes between files: a reflink (FICLONERANGE) where the filesystem shares
// blocks (XFS, btrfs) and the ranges are block-aligned, else pread/pwrite through one reused
// buffer whose writes land on whole store_write_unit boundaries of `out`. Not copy_file_range:
// on ext4 its in-kernel copy fills the page cache with 4 KiB folios, which cudaHostRegister pins
// at a third of the rate of the large folios aligned writes leave (docs/performance.md).
bool copy_range(int in, std::uint64_t in_offset, int out, std::uint64_t out_offset, std::uint64_t length,
                error_code& ec) {
  if (length == 0) {
    ec = {};
    return true;
  }
  constexpr std::uint64_t block = 4096;
  if (in_offset % block == 0 && out_offset % block == 0 && length % block == 0) {
    file_clone_range range{};
    range.src_fd = in;
    range.src_offset = in_offset;
    range.src_length = length;
    range.dest_offset = out_offset;
    if (::ioctl(out, FICLONERANGE, &range) == 0) {
      ec = {};
      return true;
    }
  }
  const std::size_t unit = static_cast<std::size_t>(store_write_unit);
  std::vector<std::byte> buffer(static_cast<std::size_t>(std::min<std::uint64_t>(length, 4 * unit)));
  while (length > 0) {
    // Up to the next unit boundary of `out` first, then whole units.
    const std::uint64_t to_boundary = unit - out_offset % unit;
    const std::uint64_t span =
        to_boundary + (buffer.size() > to_boundary ? (buffer.size() - to_boundary) / unit * unit : 0);
    const auto want = static_cast<std::size_t>(std::min({length, span, static_cast<std::uint64_t>(buffer.size())}));
    const std::size_t got = read_all(in, buffer.data(), want, in_offset, ec);
    if (ec) return false;
    if (got == 0) {  // the source is shorter than it claims
      ec = sys_error(EIO);
      return false;
    }
    if (!write_all(out, buffer.data(), got, out_offset, ec)) return false;
    in_offset += got;
    out_offset += got;
    length -= got;
  }
  ec = {};
  return true;
}

std::string to_hex(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    out.push_back(hex_digits[c >> 4U]);
    out.push_back(hex_digits[c & 0xfU]);
  }
  return out;
}

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // lower case only: one spelling per byte string
}

bool from_hex(std::string_view hex, std::string& out) {
  if (hex.size() % 2 != 0) return false;
  out.clear();
  out.reserve(hex.size() / 2);
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const int hi = hex_value(hex[i]);
    const int lo = hex_value(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out.push_back(static_cast<char>((hi << 4) | lo));
  }
  return true;
}

bool is_lower_hex(std::string_view s, std::size_t length) noexcept {
  return s.size() == length && std::all_of(s.begin(), s.end(), [](char c) { return hex_value(c) >= 0; });
}

bool valid_upload_id(std::string_view id) noexcept { return is_lower_hex(id, 32); }

std::string sha256_hex(std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  if (EVP_Digest(data.data(), data.size(), digest.data(), &length, EVP_sha256(), nullptr) != 1) {
    throw std::bad_alloc();  // the only way a one-shot SHA-256 fails
  }
  return to_hex(std::string_view(reinterpret_cast<const char*>(digest.data()), length));
}

std::int64_t to_ns(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::chrono::system_clock::time_point from_ns(std::int64_t ns) {
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(ns)));
}

std::uint64_t round_up(std::uint64_t n, std::uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

void put_le32(std::byte* out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<std::byte>((v >> (8 * i)) & 0xffU);
}

std::uint32_t get_le32(const std::byte* in) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::to_integer<std::uint32_t>(in[i]) << (8 * i);
  return v;
}

// --- JSON metadata: a small writer, and a strict reader over simdjson -----------------------

// The short escape of a control character, or 0 when it has none.
char short_escape(unsigned char c) noexcept {
  switch (c) {
    case '\b': return 'b';
    case '\f': return 'f';
    case '\n': return 'n';
    case '\r': return 'r';
    case '\t': return 't';
    default: return 0;
  }
}

// Characters `s` takes as a JSON string, quotes included.
std::size_t json_string_size(std::string_view s) noexcept {
  std::size_t n = 2;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\' || short_escape(c) != 0) {
      n += 2;
    } else if (c < 0x20) {
      n += 6;
    } else {
      n += 1;
    }
  }
  return n;
}

void put_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (const char e = short_escape(c); e != 0) {
      out.push_back('\\');
      out.push_back(e);
    } else if (c < 0x20) {
      out += "\\u00";
      out.push_back(hex_digits[c >> 4U]);
      out.push_back(hex_digits[c & 0xfU]);
    } else {
      out.push_back(ch);
    }
  }
  out.push_back('"');
}

// Any byte string, in the shorter of two spellings: a JSON string (only for valid UTF-8, the
// only thing a JSON string can hold) or {"hex":"..."}. Always the shortest spelling the reader
// accepts, so that re-encoding what was read never needs more room than it had.
void put_json_bytes(std::string& out, std::string_view s) {
  constexpr std::size_t hex_overhead = 10;  // {"hex":""}
  if (simdjson::validate_utf8(s.data(), s.size()) && json_string_size(s) <= hex_overhead + 2 * s.size()) {
    put_json_string(out, s);
  } else {
    out += R"({"hex":")";
    out += to_hex(s);
    out += "\"}";
  }
}

void put_json_pairs(std::string& out, const std::map<std::string, std::string>& pairs) {
  out.push_back('[');
  bool first = true;
  for (const auto& [name, value] : pairs) {
    if (!first) out.push_back(',');
    first = false;
    out.push_back('[');
    put_json_bytes(out, name);
    out.push_back(',');
    put_json_bytes(out, value);
    out.push_back(']');
  }
  out.push_back(']');
}

std::string encode_info_json(const object_info& info) {
  const object_attributes& a = info.attributes;
  std::string out;
  out.reserve(256 + 2 * info.key.size());
  out += R"({"v":1,"key_hex":")";
  out += to_hex(info.key);
  out += R"(","size":)";
  out += std::to_string(info.size);
  out += R"(,"last_modified":)";
  out += std::to_string(to_ns(info.last_modified));
  const std::pair<std::string_view, const std::string*> strings[] = {
      {"etag", &a.etag},
      {"content_type", &a.content_type},
      {"content_encoding", &a.content_encoding},
      {"content_disposition", &a.content_disposition},
      {"cache_control", &a.cache_control},
  };
  for (const auto& [name, value] : strings) {
    out += ",\"";
    out += name;
    out += "\":";
    put_json_bytes(out, *value);
  }
  out += R"(,"metadata":)";
  put_json_pairs(out, a.metadata);
  out += R"(,"checksums":)";
  put_json_pairs(out, a.checksums);
  // Later members, written only when set: a header without them reads as before.
  const std::pair<std::string_view, const std::string*> optional_strings[] = {
      {"content_language", &a.content_language},
      {"expires", &a.expires},
      {"upload_id", &a.upload_id},
  };
  for (const auto& [name, value] : optional_strings) {
    if (value->empty()) continue;
    out += ",\"";
    out += name;
    out += "\":";
    put_json_bytes(out, *value);
  }
  if (!a.tags.empty()) {
    out += R"(,"tags":)";
    put_json_pairs(out, a.tags);
  }
  if (!a.part_sizes.empty()) {
    out += R"(,"part_sizes":[)";
    for (std::size_t i = 0; i < a.part_sizes.size(); ++i) {
      if (i != 0) out.push_back(',');
      out += std::to_string(a.part_sizes[i]);
    }
    out.push_back(']');
  }
  out.push_back('}');
  return out;
}

bool get_json_bytes(simdjson::dom::element value, std::string& out) {
  std::string_view text;
  if (value.get_string().get(text) == simdjson::SUCCESS) {
    out.assign(text);
    return true;
  }
  simdjson::dom::object object;
  if (value.get_object().get(object) != simdjson::SUCCESS || object.size() != 1) return false;
  std::string_view hex;
  if (object["hex"].get_string().get(hex) != simdjson::SUCCESS) return false;
  return from_hex(hex, out);
}

bool get_json_pairs(simdjson::dom::element value, std::map<std::string, std::string>& out) {
  simdjson::dom::array pairs;
  if (value.get_array().get(pairs) != simdjson::SUCCESS) return false;
  out.clear();
  for (simdjson::dom::element item : pairs) {
    simdjson::dom::array pair;
    if (item.get_array().get(pair) != simdjson::SUCCESS || pair.size() != 2) return false;
    std::string name;
    std::string text;
    if (!get_json_bytes(pair.at(0).value_unsafe(), name) || !get_json_bytes(pair.at(1).value_unsafe(), text)) {
      return false;
    }
    if (!out.emplace(std::move(name), std::move(text)).second) return false;  // a name twice
  }
  return true;
}

// A part_sizes array: at most max_part_number unsigned sizes.
bool get_json_sizes(simdjson::dom::element value, std::vector<std::uint64_t>& out) {
  simdjson::dom::array sizes;
  if (value.get_array().get(sizes) != simdjson::SUCCESS || sizes.size() > fs_store::max_part_number) return false;
  out.clear();
  for (simdjson::dom::element item : sizes) {
    std::uint64_t size = 0;
    if (item.get_uint64().get(size) != simdjson::SUCCESS) return false;
    out.push_back(size);
  }
  return true;
}

// Reads the metadata JSON strictly: an object with every required member once, optional members
// at most once, nothing unknown.
bool decode_info_json(std::string_view json, object_info& out) {
  constexpr std::size_t required = 11;  // the first 11 members; the rest are optional
  static constexpr std::array<std::string_view, 16> members = {"v",
                                                               "key_hex",
                                                               "size",
                                                               "last_modified",
                                                               "etag",
                                                               "content_type",
                                                               "content_encoding",
                                                               "content_disposition",
                                                               "cache_control",
                                                               "metadata",
                                                               "checksums",
                                                               "content_language",
                                                               "expires",
                                                               "upload_id",
                                                               "tags",
                                                               "part_sizes"};
  simdjson::dom::parser parser;
  const simdjson::padded_string padded(json);
  simdjson::dom::object root;
  if (parser.parse(padded).get_object().get(root) != simdjson::SUCCESS) return false;
  object_info info;
  object_attributes& a = info.attributes;
  unsigned seen = 0;
  for (simdjson::dom::key_value_pair member : root) {
    const auto it = std::find(members.begin(), members.end(), member.key);
    if (it == members.end()) return false;
    const auto index = static_cast<unsigned>(it - members.begin());
    if ((seen & (1U << index)) != 0) return false;
    seen |= 1U << index;
    const simdjson::dom::element value = member.value;
    bool ok = false;
    switch (index) {
      case 0: {
        std::uint64_t version = 0;
        ok = value.get_uint64().get(version) == simdjson::SUCCESS && version == 1;
        break;
      }
      case 1: {
        std::string_view hex;
        ok = value.get_string().get(hex) == simdjson::SUCCESS && from_hex(hex, info.key) &&
             is_valid_object_key(info.key);
        break;
      }
      case 2: ok = value.get_uint64().get(info.size) == simdjson::SUCCESS; break;
      case 3: {
        std::int64_t ns = 0;
        ok = value.get_int64().get(ns) == simdjson::SUCCESS;
        info.last_modified = from_ns(ns);
        break;
      }
      case 4: ok = get_json_bytes(value, a.etag); break;
      case 5: ok = get_json_bytes(value, a.content_type); break;
      case 6: ok = get_json_bytes(value, a.content_encoding); break;
      case 7: ok = get_json_bytes(value, a.content_disposition); break;
      case 8: ok = get_json_bytes(value, a.cache_control); break;
      case 9: ok = get_json_pairs(value, a.metadata); break;
      case 10: ok = get_json_pairs(value, a.checksums); break;
      case 11: ok = get_json_bytes(value, a.content_language); break;
      case 12: ok = get_json_bytes(value, a.expires); break;
      case 13: ok = get_json_bytes(value, a.upload_id); break;
      case 14: ok = get_json_pairs(value, a.tags); break;
      case 15: ok = get_json_sizes(value, a.part_sizes); break;
      default: break;
    }
    if (!ok) return false;
  }
  if ((seen & ((1U << required) - 1)) != (1U << required) - 1) return false;
  out = std::move(info);
  return true;
}

// bucket.json: {"v":1,"created":<ns>} and, for a bucket the server made for a user,
// "owner":"<access key id>" (a JSON string; files written before it existed have none).
std::string encode_bucket_json(std::chrono::system_clock::time_point created,
                               const std::optional<std::string>& owner = std::nullopt) {
  std::string out = R"({"v":1,"created":)" + std::to_string(to_ns(created));
  if (owner) {
    out += R"(,"owner":)";
    put_json_string(out, *owner);
  }
  return out + "}";
}

bool decode_bucket_json(std::string_view json, std::chrono::system_clock::time_point& created,
                        std::optional<std::string>& owner) {
  simdjson::dom::parser parser;
  const simdjson::padded_string padded(json);
  simdjson::dom::object root;
  if (parser.parse(padded).get_object().get(root) != simdjson::SUCCESS) return false;
  std::uint64_t version = 0;
  std::int64_t ns = 0;
  if (root["v"].get_uint64().get(version) != simdjson::SUCCESS || version != 1) return false;
  if (root["created"].get_int64().get(ns) != simdjson::SUCCESS) return false;
  std::string_view who;
  const auto owner_error = root["owner"].get_string().get(who);
  if (owner_error == simdjson::SUCCESS) {
    owner = std::string(who);
  } else if (owner_error != simdjson::NO_SUCH_FIELD) {
    return false;
  }
  if (root.size() != (owner ? 3U : 2U)) return false;
  created = from_ns(ns);
  return true;
}

// --- files -----------------------------------------------------------------------------------

// A whole small file (at most `limit` bytes; more is sluice::errc::protocol_violation).
std::string read_small_file(const fs::path& path, std::size_t limit, error_code& ec) {
  unique_fd fd = open_fd(path, O_RDONLY, ec);
  if (ec) return {};
  std::string out(limit + 1, '\0');
  const std::size_t n = read_all(fd.get(), reinterpret_cast<std::byte*>(out.data()), out.size(), 0, ec);
  if (ec) return {};
  if (n > limit) {
    ec = sluice::errc::protocol_violation;
    return {};
  }
  out.resize(n);
  return out;
}

// Creates `path` (which must not exist) with `content`, fsynced when asked.
bool write_new_file(const fs::path& path, std::string_view content, bool sync, error_code& ec) {
  unique_fd fd = open_fd(path, O_WRONLY | O_CREAT | O_EXCL, ec);
  if (ec) return false;
  if (!write_all(fd.get(), reinterpret_cast<const std::byte*>(content.data()), content.size(), 0, ec)) return false;
  if (sync && ::fsync(fd.get()) != 0) {
    ec = last_error();
    return false;
  }
  return true;
}

// The header of an open object or part file.
object_info read_header(int fd, std::uint64_t& data_offset, error_code& ec) {
  std::vector<std::byte> bytes(object_header_alignment);
  std::size_t n = read_all(fd, bytes.data(), bytes.size(), 0, ec);
  if (ec) return {};
  if (n >= header_prefix) {
    const std::uint64_t need = header_prefix + get_le32(bytes.data() + 12);
    if (need > n && need <= max_object_header_bytes) {
      bytes.resize(need);
      n += read_all(fd, bytes.data() + n, need - n, n, ec);
      if (ec) return {};
    }
  }
  return parse_object_header(std::span(bytes.data(), n), data_offset, ec);
}

// The entries of a directory, by name.
std::vector<fs::path> list_directory(const fs::path& dir, error_code& ec) {
  std::vector<fs::path> out;
  std::error_code e;
  fs::directory_iterator it(dir, e);
  for (; !e && it != fs::directory_iterator(); it.increment(e)) out.push_back(it->path());
  ec = e ? sys_error(e) : error_code{};
  return out;
}

bool is_directory(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool make_directory(const fs::path& p, error_code& ec) {
  if (::mkdir(p.c_str(), 0755) != 0) {
    ec = last_error();
    return false;
  }
  ec = {};
  return true;
}

bool rename_path(const fs::path& from, const fs::path& to, error_code& ec) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    ec = last_error();
    return false;
  }
  ec = {};
  return true;
}

void remove_quietly(const fs::path& p) {
  // Cleanup of files already out of the store's name space (in <root>/tmp); a failure only
  // leaves them for the next open to remove.
  std::error_code ignored;
  fs::remove_all(p, ignored);
}

std::string part_file_name(std::uint32_t number) {
  std::array<char, 16> name{};
  std::snprintf(name.data(), name.size(), "part-%05u", static_cast<unsigned>(number));
  return name.data();
}

// The part number of a "part-NNNNN" name; 0 when it is not one.
std::uint32_t part_number_of(std::string_view name) {
  if (name.size() != 10 || !name.starts_with("part-")) return 0;
  std::uint32_t n = 0;
  for (char c : name.substr(5)) {
    if (c < '0' || c > '9') return 0;
    n = n * 10 + static_cast<std::uint32_t>(c - '0');
  }
  return n <= fs_store::max_part_number ? n : 0;
}

// Room left for the header before the data of a new file: the key's hex plus 2.5 KiB for
// attributes, rounded to the alignment. Larger attributes move the data at commit.
std::uint64_t initial_header_bytes(std::string_view key) {
  return round_up(header_prefix + 2 * key.size() + 2560, object_header_alignment);
}

bool ascending(std::span<const part_info> parts) {
  return std::adjacent_find(parts.begin(), parts.end(),
                            [](const part_info& a, const part_info& b) { return a.number >= b.number; }) == parts.end();
}

}  // namespace fs_store_impl

// --- header format ---------------------------------------------------------------------------

std::optional<config_error> fs_store_config::validate() const {
  if (root.empty()) return config_error{"root", "must not be empty"};
  if (max_object_bytes == 0) return config_error{"max_object_bytes", "must be at least 1"};
  if (max_object_bytes > (std::uint64_t{1} << 62)) return config_error{"max_object_bytes", "must not exceed 2^62"};
  return std::nullopt;
}

object_info parse_object_header(std::span<const std::byte> bytes, std::uint64_t& data_offset, error_code& ec) {
  namespace impl = fs_store_impl;
  data_offset = 0;
  ec = sluice::errc::protocol_violation;
  if (bytes.size() < impl::header_prefix) return {};
  if (std::memcmp(bytes.data(), impl::header_magic.data(), impl::header_magic.size()) != 0) return {};
  const std::uint64_t header_length = impl::get_le32(bytes.data() + 8);
  const std::uint64_t json_length = impl::get_le32(bytes.data() + 12);
  if (header_length == 0 || header_length % object_header_alignment != 0 || header_length > max_object_header_bytes) {
    return {};
  }
  if (json_length > header_length - impl::header_prefix) return {};
  const std::uint64_t json_end = impl::header_prefix + json_length;
  if (bytes.size() < json_end) return {};  // truncated
  const auto padding = bytes.subspan(json_end, std::min<std::uint64_t>(bytes.size(), header_length) - json_end);
  if (std::any_of(padding.begin(), padding.end(), [](std::byte b) { return b != std::byte{0}; })) return {};
  object_info info;
  const std::string_view json(reinterpret_cast<const char*>(bytes.data()) + impl::header_prefix, json_length);
  if (!impl::decode_info_json(json, info)) return {};
  data_offset = header_length;
  ec = {};
  return info;
}

std::vector<std::byte> encode_object_header(const object_info& info, std::uint64_t min_header_bytes, error_code& ec) {
  namespace impl = fs_store_impl;
  if (!is_valid_object_key(info.key) || min_header_bytes > max_object_header_bytes) {
    ec = sluice::errc::invalid_argument;
    return {};
  }
  const std::string json = impl::encode_info_json(info);
  const std::uint64_t length = impl::round_up(
      std::max<std::uint64_t>(impl::header_prefix + json.size(), min_header_bytes), object_header_alignment);
  if (length > max_object_header_bytes) {
    ec = sluice::errc::invalid_argument;
    return {};
  }
  std::vector<std::byte> out(length);
  std::memcpy(out.data(), impl::header_magic.data(), impl::header_magic.size());
  impl::put_le32(out.data() + 8, static_cast<std::uint32_t>(length));
  impl::put_le32(out.data() + 12, static_cast<std::uint32_t>(json.size()));
  std::memcpy(out.data() + impl::header_prefix, json.data(), json.size());
  ec = {};
  return out;
}

// --- writer and mapping ----------------------------------------------------------------------

fs_store::writer::writer(writer&& other) noexcept
    : store_(std::exchange(other.store_, nullptr)),
      fd_(std::exchange(other.fd_, -1)),
      temp_(std::exchange(other.temp_, {})),
      object_(std::move(other.object_)),
      data_offset_(std::exchange(other.data_offset_, 0)),
      written_(std::exchange(other.written_, 0)),
      pending_(std::move(other.pending_)),
      upload_id_(std::move(other.upload_id_)),
      part_number_(std::exchange(other.part_number_, 0)),
      precondition_(std::exchange(other.precondition_, {})) {}

fs_store::writer& fs_store::writer::operator=(writer&& other) noexcept {
  if (this != &other) {
    reset();
    store_ = std::exchange(other.store_, nullptr);
    fd_ = std::exchange(other.fd_, -1);
    temp_ = std::exchange(other.temp_, {});
    object_ = std::move(other.object_);
    data_offset_ = std::exchange(other.data_offset_, 0);
    written_ = std::exchange(other.written_, 0);
    pending_ = std::move(other.pending_);
    upload_id_ = std::move(other.upload_id_);
    part_number_ = std::exchange(other.part_number_, 0);
    precondition_ = std::exchange(other.precondition_, {});
  }
  return *this;
}

fs_store::writer::~writer() { reset(); }

void fs_store::writer::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  // Not published: the temporary file goes (ENOENT when an abort took its directory).
  if (!temp_.empty()) ::unlink(temp_.c_str());
  store_ = nullptr;
  fd_ = -1;
  temp_.clear();
  data_offset_ = 0;
  written_ = 0;
  pending_.clear();
  pending_.shrink_to_fit();
  part_number_ = 0;
  precondition_ = {};
}

void fs_store::writer::write(std::span<const std::byte> data, error_code& ec) {
  if (store_ == nullptr) {
    ec = sluice::errc::invalid_argument;
    return;
  }
  if (data.size() > store_->config_.max_object_bytes - written_) {
    ec = sluice::errc::capacity_exceeded;
    return;
  }
  // The file is written in whole, aligned store_write_unit pieces (small writes gather in
  // pending_ up to the next boundary): the page cache then holds the object in large folios.
  const std::uint64_t unit = store_write_unit;
  const std::uint64_t written_before = written_;
  const std::size_t pending_before = pending_.size();
  bool flushed = false;
  const auto undo = [&] {  // nothing of `data` counts; bytes already in the file stay there
    written_ = written_before;
    if (flushed) {
      pending_.clear();
    } else {
      pending_.resize(pending_before);
    }
  };
  while (!data.empty()) {
    const std::uint64_t at = data_offset_ + written_;  // the file offset of data's first byte
    if (pending_.empty() && at % unit == 0 && data.size() >= unit) {
      const auto n = static_cast<std::size_t>(data.size() / unit * unit);
      if (!fs_store_impl::write_all(fd_, data.data(), n, at, ec)) return undo();
      written_ += n;
      data = data.subspan(n);
      continue;
    }
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(data.size(), unit - at % unit));
    if (pending_.capacity() < unit) pending_.reserve(static_cast<std::size_t>(unit));
    pending_.insert(pending_.end(), data.begin(), data.begin() + static_cast<std::ptrdiff_t>(n));
    written_ += n;
    data = data.subspan(n);
    if ((data_offset_ + written_) % unit == 0) {
      if (!flush(ec)) return undo();
      flushed = true;
    }
  }
  ec = {};
}

void fs_store::writer::wrote(std::uint64_t n, error_code& ec) {
  ec = {};
  if (store_ == nullptr || !pending_.empty()) {
    ec = sluice::errc::invalid_argument;
    return;
  }
  if (n > store_->config_.max_object_bytes - written_) {
    ec = sluice::errc::capacity_exceeded;
    return;
  }
  written_ += n;
}

bool fs_store::writer::flush(error_code& ec) {
  if (pending_.empty()) {
    ec = {};
    return true;
  }
  if (!fs_store_impl::write_all(fd_, pending_.data(), pending_.size(), data_offset_ + written_ - pending_.size(), ec)) {
    return false;
  }
  pending_.clear();
  return true;
}

object_info fs_store::writer::commit(const object_attributes& attributes, error_code& ec) {
  if (store_ == nullptr) {
    ec = sluice::errc::invalid_argument;
    return {};
  }
  object_info info = store_->publish(*this, attributes, ec);
  reset();
  return ec ? object_info{} : info;
}

fs_store::mapping::mapping(mapping&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      base_(std::exchange(other.base_, nullptr)),
      length_(std::exchange(other.length_, 0)),
      copy_(std::move(other.copy_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      data_offset_(std::exchange(other.data_offset_, 0)),
      info_(std::move(other.info_)) {}

fs_store::mapping& fs_store::mapping::operator=(mapping&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
    base_ = std::exchange(other.base_, nullptr);
    length_ = std::exchange(other.length_, 0);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    data_offset_ = std::exchange(other.data_offset_, 0);
    copy_ = std::move(other.copy_);
    info_ = std::move(other.info_);
  }
  return *this;
}

fs_store::mapping::~mapping() { reset(); }

void fs_store::mapping::reset() noexcept {
  if (base_ != nullptr) ::munmap(base_, length_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  base_ = nullptr;
  length_ = 0;
  data_ = nullptr;
  size_ = 0;
  copy_.reset();
}

// --- the store -------------------------------------------------------------------------------

struct fs_store::opened {
  fs_store_impl::unique_fd fd;
  entry object;
};

fs_store::fs_store(unopened, fs_store_config config) : config_(std::move(config)) {}

fs_store::fs_store(fs_store_config config) : config_(std::move(config)) {
  if (auto error = config_.validate()) throw std::invalid_argument(error->message());
  error_code ec;
  open_root(ec);
  if (ec) {
    if (lock_fd_ >= 0) ::close(lock_fd_);
    detail::throw_on_error(ec, "fs_store: cannot open the root");
  }
}

std::unique_ptr<fs_store> fs_store::open(fs_store_config config, error_code& ec) {
  if (config.validate()) {
    ec = sluice::errc::invalid_config;
    return nullptr;
  }
  std::unique_ptr<fs_store> store(new fs_store(unopened{}, std::move(config)));
  store->open_root(ec);
  if (ec) return nullptr;
  return store;
}

fs_store::~fs_store() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

std::filesystem::path fs_store::bucket_dir(std::string_view bucket) const {
  return config_.root / "buckets" / std::string(bucket);
}

std::filesystem::path fs_store::object_path(const object_ref& object) const {
  const std::string hash = fs_store_impl::sha256_hex(object.key);
  return bucket_dir(object.bucket) / "objects" / hash.substr(0, 2) / hash;
}

std::filesystem::path fs_store::upload_dir(std::string_view bucket, std::string_view upload_id) const {
  return bucket_dir(bucket) / "uploads" / std::string(upload_id);
}

std::string fs_store::random_hex(std::size_t digits) {
  std::string out;
  out.reserve(digits + 8);
  std::lock_guard lock(random_mutex_);
  while (out.size() < digits) {
    const std::uint32_t word = random_();
    for (int shift = 28; shift >= 0; shift -= 4) out.push_back(fs_store_impl::hex_digits[(word >> shift) & 0xfU]);
  }
  out.resize(digits);
  return out;
}

std::filesystem::path fs_store::temp_path(std::string_view prefix) {
  return config_.root / "tmp" / (std::string(prefix) + random_hex(32));
}

bool fs_store::has_bucket(std::string_view name) const {
  std::shared_lock lock(mutex_);
  return buckets_.find(name) != buckets_.end();
}

void fs_store::sync_directory(const std::filesystem::path& dir, error_code& ec) const {
  ec = {};
  if (!config_.fsync) return;
  fs_store_impl::unique_fd fd = fs_store_impl::open_fd(dir, O_RDONLY | O_DIRECTORY, ec);
  if (ec) return;
  if (::fsync(fd.get()) != 0) ec = fs_store_impl::last_error();
}

void fs_store::open_root(error_code& ec) {
  namespace impl = fs_store_impl;
  namespace fs = std::filesystem;
  std::error_code e;
  fs::create_directories(config_.root / "buckets", e);
  if (!e) fs::create_directories(config_.root / "tmp", e);
  if (e) {
    ec = impl::sys_error(e);
    return;
  }
  impl::unique_fd lock = impl::open_fd(config_.root / "lock", O_RDWR | O_CREAT, ec);
  if (ec) return;
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    ec = impl::last_error();
    return;
  }
  lock_fd_ = lock.release();

  // Crash leftovers: temporary files, buckets being created or removed, discarded uploads.
  for (const auto& leftover : impl::list_directory(config_.root / "tmp", ec)) {
    fs::remove_all(leftover, e);
    if (e) {
      ec = impl::sys_error(e);
      return;
    }
  }
  if (ec) return;

  const auto entries = impl::list_directory(config_.root / "buckets", ec);
  if (ec) return;
  for (const auto& dir : entries) {
    const std::string name = dir.filename().string();
    if (!is_valid_bucket_name(name) || !impl::is_directory(dir)) {
      ++skipped_;
      continue;
    }
    scan_bucket(dir, name, ec);
    if (ec) return;
  }
  ec = {};
}

void fs_store::scan_bucket(const std::filesystem::path& dir, std::string_view name, error_code& ec) {
  namespace impl = fs_store_impl;
  error_code file_ec;
  const std::string json = impl::read_small_file(dir / "bucket.json", 4096, file_ec);
  bucket_state state;
  state.info.name = std::string(name);
  if (file_ec || !impl::decode_bucket_json(json, state.info.created, state.owner)) {
    ++skipped_;
    ec = {};
    return;
  }
  for (const char* sub : {"objects", "uploads"}) {
    if (!impl::is_directory(dir / sub) && !impl::make_directory(dir / sub, ec)) return;
  }

  const auto shards = impl::list_directory(dir / "objects", ec);
  if (ec) return;
  for (const auto& shard : shards) {
    const std::string shard_name = shard.filename().string();
    if (!impl::is_lower_hex(shard_name, 2) || !impl::is_directory(shard)) {
      ++skipped_;
      continue;
    }
    const auto files = impl::list_directory(shard, ec);
    if (ec) return;
    for (const auto& file : files) {
      const std::string file_name = file.filename().string();
      bool good = impl::is_lower_hex(file_name, 64) && file_name.starts_with(shard_name);
      impl::unique_fd fd;
      if (good) {
        fd = impl::open_fd(file, O_RDONLY | O_NOFOLLOW, file_ec);
        good = !file_ec;
      }
      entry found;
      struct stat st {};
      if (good) {
        found.info = impl::read_header(fd.get(), found.data_offset, file_ec);
        good = !file_ec && ::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) &&
               impl::sha256_hex(found.info.key) == file_name &&
               static_cast<std::uint64_t>(st.st_size) >= found.data_offset &&
               static_cast<std::uint64_t>(st.st_size) - found.data_offset == found.info.size;
      }
      if (!good) {
        ++skipped_;
        continue;
      }
      std::string key = found.info.key;
      state.objects.emplace(std::move(key), std::move(found));
    }
  }
  clean_uploads(dir / "uploads");
  buckets_.emplace(std::string(name), std::move(state));
  ec = {};
}

void fs_store::clean_uploads(const std::filesystem::path& dir) {
  namespace impl = fs_store_impl;
  error_code ec;
  for (const auto& upload : impl::list_directory(dir, ec)) {
    const std::string id = upload.filename().string();
    if (!impl::valid_upload_id(id) || !impl::is_directory(upload)) {
      ++skipped_;
      continue;
    }
    object_info info;
    const std::string json = impl::read_small_file(upload / "upload.json", max_object_header_bytes, ec);
    if (ec || !impl::decode_info_json(json, info)) {
      impl::remove_quietly(upload);  // cannot be an upload anyone can name: discard it
      continue;
    }
    for (const auto& file : impl::list_directory(upload, ec)) {
      const std::string name = file.filename().string();
      if (name == "upload.json") continue;
      bool good = impl::part_number_of(name) != 0;
      if (good) {
        error_code file_ec;
        impl::unique_fd fd = impl::open_fd(file, O_RDONLY | O_NOFOLLOW, file_ec);
        std::uint64_t offset = 0;
        if (!file_ec) (void)impl::read_header(fd.get(), offset, file_ec);
        good = !file_ec;
      }
      // Partial part files ("tmp-..." of a writer that crashed) and damaged parts go.
      if (!good) impl::remove_quietly(file);
    }
  }
}

void fs_store::create_bucket(std::string_view name, error_code& ec) { create_bucket(name, {}, ec); }

std::optional<std::string> fs_store::bucket_owner(std::string_view name) const {
  std::shared_lock lock(mutex_);
  const auto it = buckets_.find(name);
  return it == buckets_.end() ? std::nullopt : it->second.owner;
}

void fs_store::create_bucket(std::string_view name, std::string_view owner, error_code& ec) {
  namespace impl = fs_store_impl;
  std::optional<std::string> recorded;
  if (!owner.empty()) recorded = std::string(owner);
  if (!is_valid_bucket_name(name)) {
    ec = sluice::errc::invalid_name;
    return;
  }
  if (has_bucket(name)) {
    ec = sluice::errc::bucket_exists;
    return;
  }
  // Built complete in tmp, then renamed into place: a crash leaves no half-made bucket.
  const auto created = std::chrono::system_clock::now();
  const auto staging = temp_path("bucket-");
  auto fail = [&](error_code e) {
    impl::remove_quietly(staging);
    ec = e;
  };
  if (!impl::make_directory(staging, ec) || !impl::make_directory(staging / "objects", ec) ||
      !impl::make_directory(staging / "uploads", ec) ||
      !impl::write_new_file(staging / "bucket.json", impl::encode_bucket_json(created, recorded), config_.fsync, ec)) {
    return fail(ec);
  }
  sync_directory(staging, ec);
  if (ec) return fail(ec);
  {
    std::unique_lock lock(mutex_);
    if (buckets_.find(name) != buckets_.end()) return fail(sluice::errc::bucket_exists);
    if (!impl::rename_path(staging, bucket_dir(name), ec)) return fail(ec);
    bucket_state state;
    state.info = {std::string(name), created};
    state.owner = std::move(recorded);
    buckets_.emplace(std::string(name), std::move(state));
  }
  sync_directory(config_.root / "buckets", ec);
}

void fs_store::remove_bucket(std::string_view name, error_code& ec) {
  namespace impl = fs_store_impl;
  const auto trash = temp_path("trash-");
  {
    std::unique_lock lock(mutex_);
    auto it = buckets_.find(name);
    if (it == buckets_.end()) {
      ec = sluice::errc::no_such_bucket;
      return;
    }
    if (!it->second.objects.empty()) {
      ec = sluice::errc::bucket_not_empty;
      return;
    }
    const auto uploads = impl::list_directory(bucket_dir(name) / "uploads", ec);
    if (ec) return;
    if (!uploads.empty()) {
      ec = sluice::errc::bucket_not_empty;  // uploads in progress count as content
      return;
    }
    if (!impl::rename_path(bucket_dir(name), trash, ec)) return;
    buckets_.erase(it);
  }
  sync_directory(config_.root / "buckets", ec);
  impl::remove_quietly(trash);
}

std::vector<bucket_info> fs_store::list_buckets(error_code& ec) const {
  std::shared_lock lock(mutex_);
  std::vector<bucket_info> out;
  out.reserve(buckets_.size());
  for (const auto& [name, state] : buckets_) out.push_back(state.info);
  ec = {};
  return out;
}

object_info fs_store::head(const object_ref& object, error_code& ec) const {
  std::shared_lock lock(mutex_);
  auto b = buckets_.find(object.bucket);
  if (b == buckets_.end()) {
    ec = sluice::errc::no_such_bucket;
    return {};
  }
  auto it = b->second.objects.find(object.key);
  if (it == b->second.objects.end()) {
    ec = sluice::errc::no_such_object;
    return {};
  }
  ec = {};
  return it->second.info;
}

fs_store::opened fs_store::open_object(const object_ref& object, error_code& ec) const {
  const auto path = object_path(object);
  // Opened under the lock: renames and unlinks take it exclusively, so the file opened is the
  // version the index describes.
  std::shared_lock lock(mutex_);
  auto b = buckets_.find(object.bucket);
  if (b == buckets_.end()) {
    ec = sluice::errc::no_such_bucket;
    return {};
  }
  auto it = b->second.objects.find(object.key);
  if (it == b->second.objects.end()) {
    ec = sluice::errc::no_such_object;
    return {};
  }
  opened out{fs_store_impl::open_fd(path, O_RDONLY, ec), {}};
  if (ec) return {};
  out.object = it->second;
  return out;
}

std::size_t fs_store::read(const object_ref& object, std::uint64_t offset, std::span<std::byte> out,
                           error_code& ec) const {
  const opened found = open_object(object, ec);
  if (ec) return 0;
  const std::uint64_t size = found.object.info.size;
  if (offset >= size || out.empty()) return 0;
  const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(out.size(), size - offset));
  const std::size_t got = fs_store_impl::read_all(found.fd.get(), out.data(), n, found.object.data_offset + offset, ec);
  if (ec) return 0;
  if (got != n) {  // the file is shorter than its header says: damaged behind our back
    ec = fs_store_impl::sys_error(EIO);
    return 0;
  }
  return n;
}

fs_store::mapping fs_store::map(const object_ref& object, error_code& ec) const {
  opened found = open_object(object, ec);
  if (ec) return {};
  mapping m;
  m.fd_ = found.fd.release();
  m.info_ = std::move(found.object.info);
  if (m.info_.size == 0) return m;
  const std::uint64_t offset = found.object.data_offset;
  if (m.info_.size <= small_object_bytes) {  // read, not mapped (see mapping)
    const auto size = static_cast<std::size_t>(m.info_.size);
    m.copy_ = std::make_unique_for_overwrite<std::byte[]>(size);
    if (fs_store_impl::read_all(m.fd_, m.copy_.get(), size, offset, ec) != size) {
      if (!ec) ec = sluice::errc::protocol_violation;  // shorter than its header says
      return {};
    }
    m.data_ = m.copy_.get();
    m.data_offset_ = offset;
    m.size_ = size;
    return m;
  }
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t aligned = offset - offset % page;
  const auto length = static_cast<std::size_t>(offset - aligned + m.info_.size);
  void* base = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, m.fd_, fs_store_impl::to_off(aligned));
  if (base == MAP_FAILED) {
    ec = fs_store_impl::last_error();
    return {};
  }
  m.base_ = base;
  m.length_ = length;
  m.data_ = static_cast<std::byte*>(base) + (offset - aligned);
  m.data_offset_ = offset;
  m.size_ = static_cast<std::size_t>(m.info_.size);
  return m;
}

fs_store::writer fs_store::make_writer(const object_ref& object, const std::filesystem::path& temp, error_code& ec) {
  fs_store_impl::unique_fd fd = fs_store_impl::open_fd(temp, O_RDWR | O_CREAT | O_EXCL, ec);
  if (ec) return {};
  writer w;
  w.store_ = this;
  w.fd_ = fd.release();
  w.temp_ = temp;
  w.object_ = object;
  w.data_offset_ = fs_store_impl::initial_header_bytes(object.key);
  return w;
}

fs_store::writer fs_store::begin_put(const object_ref& object, error_code& ec) {
  if (!is_valid_object_key(object.key)) {
    ec = sluice::errc::invalid_name;
    return {};
  }
  if (!has_bucket(object.bucket)) {
    ec = sluice::errc::no_such_bucket;
    return {};
  }
  return make_writer(object, temp_path("object-"), ec);
}

object_info fs_store::publish(writer& w, const object_attributes& attributes, error_code& ec) {
  namespace impl = fs_store_impl;
  object_info info{w.object_.key, w.written_, std::chrono::system_clock::now(), attributes};
  if (!w.flush(ec)) return {};
  // Drop whatever a failed write left past the data.
  if (::ftruncate(w.fd_, impl::to_off(w.data_offset_ + w.written_)) != 0) {
    ec = impl::last_error();
    return {};
  }
  const auto header = encode_object_header(info, w.data_offset_, ec);
  if (ec) return {};
  if (header.size() != w.data_offset_) {
    // The attributes outgrew the room left for them: move the data into a new file.
    const auto moved = w.part_number_ == 0 ? temp_path("object-")
                                           : upload_dir(w.object_.bucket, w.upload_id_) / ("tmp-" + random_hex(32));
    impl::unique_fd fd = impl::open_fd(moved, O_RDWR | O_CREAT | O_EXCL, ec);
    if (w.part_number_ != 0 && ec == boost::system::errc::no_such_file_or_directory) ec = sluice::errc::no_such_upload;
    if (ec) return {};
    const bool copied = impl::copy_range(w.fd_, w.data_offset_, fd.get(), header.size(), w.written_, ec);
    ::close(w.fd_);
    ::unlink(w.temp_.c_str());
    w.fd_ = fd.release();
    w.temp_ = moved;
    w.data_offset_ = header.size();
    if (!copied) return {};
  }
  if (!impl::write_all(w.fd_, header.data(), header.size(), 0, ec)) return {};
  if (config_.fsync && ::fsync(w.fd_) != 0) {
    ec = impl::last_error();
    return {};
  }

  if (w.part_number_ != 0) {
    const auto dir = upload_dir(w.object_.bucket, w.upload_id_);
    {
      std::shared_lock lock(mutex_);  // excludes abort, complete and remove_bucket
      if (buckets_.find(w.object_.bucket) == buckets_.end()) {
        ec = sluice::errc::no_such_bucket;
        return {};
      }
      if (!impl::rename_path(w.temp_, dir / impl::part_file_name(w.part_number_), ec)) {
        if (ec == boost::system::errc::no_such_file_or_directory) ec = sluice::errc::no_such_upload;
        return {};
      }
      w.temp_.clear();
    }
    sync_directory(dir, ec);
    return info;
  }

  const auto path = object_path(w.object_);
  const auto shard = path.parent_path();
  bool new_shard = false;
  {
    std::unique_lock lock(mutex_);
    auto b = buckets_.find(w.object_.bucket);
    if (b == buckets_.end()) {
      ec = sluice::errc::no_such_bucket;
      return {};
    }
    if (!w.precondition_.none()) {
      const auto current = b->second.objects.find(w.object_.key);
      if (!w.precondition_.met_by(current == b->second.objects.end() ? nullptr
                                                                     : &current->second.info.attributes.etag)) {
        ec = sluice::errc::precondition_failed;
        return {};
      }
    }
    new_shard = ::mkdir(shard.c_str(), 0755) == 0;
    if (!new_shard && errno != EEXIST) {
      ec = impl::last_error();
      return {};
    }
    if (!impl::rename_path(w.temp_, path, ec)) return {};
    w.temp_.clear();
    b->second.objects.insert_or_assign(w.object_.key, entry{info, w.data_offset_});
  }
  if (new_shard) sync_directory(shard.parent_path(), ec);
  if (!ec) sync_directory(shard, ec);
  return info;  // the caller reports an fsync error (the object is visible, its durability unknown)
}

void fs_store::remove(const object_ref& object, error_code& ec) {
  const auto path = object_path(object);
  {
    std::unique_lock lock(mutex_);
    auto b = buckets_.find(object.bucket);
    if (b == buckets_.end()) {
      ec = sluice::errc::no_such_bucket;
      return;
    }
    auto it = b->second.objects.find(object.key);
    if (it == b->second.objects.end()) {
      ec = sluice::errc::no_such_object;
      return;
    }
    if (::unlink(path.c_str()) != 0) {
      ec = fs_store_impl::last_error();
      return;
    }
    b->second.objects.erase(it);
  }
  sync_directory(path.parent_path(), ec);
}

list_result fs_store::list(const list_request& request, error_code& ec) const {
  std::shared_lock lock(mutex_);
  list_result out;
  auto b = buckets_.find(request.bucket);
  if (b == buckets_.end()) {
    ec = sluice::errc::no_such_bucket;
    return out;
  }
  const auto& objects = b->second.objects;
  // First key: after start_after when that lies inside or past the prefix, else the prefix itself.
  auto it = request.start_after < request.prefix ? objects.lower_bound(request.prefix)
                                                 : objects.upper_bound(request.start_after);
  for (; it != objects.end() && it->first.starts_with(request.prefix); ++it) {
    if (out.objects.size() == request.max_keys) {
      out.truncated = true;
      break;
    }
    out.objects.push_back(it->second.info);
  }
  ec = {};
  return out;
}

// --- multipart -------------------------------------------------------------------------------

upload_info fs_store::read_upload(const object_ref& object, std::string_view upload_id, error_code& ec) const {
  namespace impl = fs_store_impl;
  if (!impl::valid_upload_id(upload_id)) {
    ec = sluice::errc::no_such_upload;
    return {};
  }
  const std::string json =
      impl::read_small_file(upload_dir(object.bucket, upload_id) / "upload.json", max_object_header_bytes, ec);
  if (ec == boost::system::errc::no_such_file_or_directory) ec = sluice::errc::no_such_upload;
  if (ec) return {};
  object_info info;
  if (!impl::decode_info_json(json, info)) {
    ec = sluice::errc::protocol_violation;
    return {};
  }
  if (info.key != object.key) {
    ec = sluice::errc::no_such_upload;
    return {};
  }
  ec = {};
  return {std::move(info.key), std::string(upload_id), info.last_modified, std::move(info.attributes)};
}

std::string fs_store::create_upload(const object_ref& object, const object_attributes& attributes, error_code& ec) {
  namespace impl = fs_store_impl;
  if (!is_valid_object_key(object.key)) {
    ec = sluice::errc::invalid_name;
    return {};
  }
  if (!has_bucket(object.bucket)) {
    ec = sluice::errc::no_such_bucket;
    return {};
  }
  const std::string json = impl::encode_info_json({object.key, 0, std::chrono::system_clock::now(), attributes});
  if (json.size() > max_object_header_bytes) {
    ec = sluice::errc::invalid_argument;
    return {};
  }
  std::string id = random_hex(32);
  const auto staging = temp_path("upload-");
  auto fail = [&](error_code e) {
    impl::remove_quietly(staging);
    ec = e;
    return std::string();
  };
  if (!impl::make_directory(staging, ec) || !impl::write_new_file(staging / "upload.json", json, config_.fsync, ec)) {
    return fail(ec);
  }
  sync_directory(staging, ec);
  if (ec) return fail(ec);
  const auto dir = upload_dir(object.bucket, id);
  {
    std::shared_lock lock(mutex_);  // excludes remove_bucket
    if (buckets_.find(object.bucket) == buckets_.end()) return fail(sluice::errc::no_such_bucket);
    if (!impl::rename_path(staging, dir, ec)) return fail(ec);
  }
  sync_directory(dir.parent_path(), ec);
  if (ec) return {};
  return id;
}

fs_store::writer fs_store::begin_part(const object_ref& object, std::string_view upload_id, std::uint32_t part_number,
                                      error_code& ec) {
  if (!is_valid_object_key(object.key)) {
    ec = sluice::errc::invalid_name;
    return {};
  }
  if (part_number == 0 || part_number > max_part_number) {
    ec = sluice::errc::invalid_argument;
    return {};
  }
  if (!has_bucket(object.bucket)) {
    ec = sluice::errc::no_such_bucket;
    return {};
  }
  (void)read_upload(object, upload_id, ec);
  if (ec) return {};
  writer w = make_writer(object, upload_dir(object.bucket, upload_id) / ("tmp-" + random_hex(32)), ec);
  if (ec == boost::system::errc::no_such_file_or_directory) ec = sluice::errc::no_such_upload;  // aborted meanwhile
  if (ec) return {};
  w.upload_id_ = std::string(upload_id);
  w.part_number_ = part_number;
  return w;
}

std::vector<part_info> fs_store::list_parts(const object_ref& object, std::string_view upload_id,
                                            error_code& ec) const {
  namespace impl = fs_store_impl;
  if (!has_bucket(object.bucket)) {
    ec = sluice::errc::no_such_bucket;
    return {};
  }
  (void)read_upload(object, upload_id, ec);
  if (ec) return {};
  const auto files = impl::list_directory(upload_dir(object.bucket, upload_id), ec);
  if (ec == boost::system::errc::no_such_file_or_directory) ec = sluice::errc::no_such_upload;
  if (ec) return {};
  std::vector<part_info> out;
  for (const auto& file : files) {
    const std::uint32_t number = impl::part_number_of(file.filename().string());
    if (number == 0) continue;
    impl::unique_fd fd = impl::open_fd(file, O_RDONLY, ec);
    if (ec == boost::system::errc::no_such_file_or_directory) continue;  // aborted meanwhile
    if (ec) return {};
    std::uint64_t offset = 0;
    object_info info = impl::read_header(fd.get(), offset, ec);
    if (ec) return {};
    out.push_back(
        {number, info.size, std::move(info.attributes.etag), info.last_modified, std::move(info.attributes.checksums)});
  }
  std::sort(out.begin(), out.end(), [](const part_info& a, const part_info& b) { return a.number < b.number; });
  ec = {};
  return out;
}

std::vector<upload_info> fs_store::list_uploads(std::string_view bucket, std::string_view prefix,
                                                error_code& ec) const {
  namespace impl = fs_store_impl;
  if (!has_bucket(bucket)) {
    ec = sluice::errc::no_such_bucket;
    return {};
  }
  const auto dirs = impl::list_directory(bucket_dir(bucket) / "uploads", ec);
  if (ec) return {};
  std::vector<upload_info> out;
  for (const auto& dir : dirs) {
    const std::string id = dir.filename().string();
    if (!impl::valid_upload_id(id)) continue;
    const std::string json = impl::read_small_file(dir / "upload.json", max_object_header_bytes, ec);
    if (ec == boost::system::errc::no_such_file_or_directory) continue;  // completed or aborted meanwhile
    if (ec) return {};
    object_info info;
    if (!impl::decode_info_json(json, info)) {
      ec = sluice::errc::protocol_violation;
      return {};
    }
    if (!info.key.starts_with(prefix)) continue;
    out.push_back({std::move(info.key), id, info.last_modified, std::move(info.attributes)});
  }
  std::sort(out.begin(), out.end(), [](const upload_info& a, const upload_info& b) {
    return std::tie(a.key, a.initiated, a.upload_id) < std::tie(b.key, b.initiated, b.upload_id);
  });
  ec = {};
  return out;
}

object_info fs_store::complete_upload(const object_ref& object, std::string_view upload_id,
                                      std::span<const part_info> chosen, const object_attributes& attributes,
                                      error_code& ec, const write_precondition& precondition) {
  namespace impl = fs_store_impl;
  if (!impl::ascending(chosen)) {
    ec = sluice::errc::invalid_part_order;
    return {};
  }
  if (!has_bucket(object.bucket)) {
    ec = sluice::errc::no_such_bucket;
    return {};
  }
  (void)read_upload(object, upload_id, ec);
  if (ec) return {};
  if (chosen.empty()) {
    ec = sluice::errc::invalid_part;
    return {};
  }

  // Open every chosen part and check it; the open files are what gets copied, whatever
  // happens to the names meanwhile.
  const auto dir = upload_dir(object.bucket, upload_id);
  struct source {
    impl::unique_fd fd;
    std::uint64_t offset = 0;
    std::uint64_t size = 0;
  };
  std::vector<source> sources;
  sources.reserve(chosen.size());
  std::uint64_t total = 0;
  for (const part_info& want : chosen) {
    if (want.number == 0 || want.number > max_part_number) {
      ec = sluice::errc::invalid_part;
      return {};
    }
    source s;
    s.fd = impl::open_fd(dir / impl::part_file_name(want.number), O_RDONLY, ec);
    if (ec == boost::system::errc::no_such_file_or_directory) ec = sluice::errc::invalid_part;
    if (ec) return {};
    const object_info part = impl::read_header(s.fd.get(), s.offset, ec);
    if (ec) return {};
    if (part.attributes.etag != want.etag) {
      ec = sluice::errc::invalid_part;
      return {};
    }
    s.size = part.size;
    if (s.size > config_.max_object_bytes - total) {
      ec = sluice::errc::capacity_exceeded;
      return {};
    }
    total += s.size;
    sources.push_back(std::move(s));
  }

  object_info info{object.key, total, std::chrono::system_clock::now(), attributes};
  const auto header = encode_object_header(info, object_header_alignment, ec);
  if (ec) return {};
  const auto temp = temp_path("object-");
  impl::unique_fd out = impl::open_fd(temp, O_RDWR | O_CREAT | O_EXCL, ec);
  if (ec) return {};
  auto fail = [&](error_code e) {
    ::unlink(temp.c_str());
    ec = e;
    return object_info{};
  };
  if (!impl::write_all(out.get(), header.data(), header.size(), 0, ec)) return fail(ec);
  std::uint64_t at = header.size();
  for (const source& s : sources) {
    if (!impl::copy_range(s.fd.get(), s.offset, out.get(), at, s.size, ec)) return fail(ec);
    at += s.size;
  }
  if (config_.fsync && ::fsync(out.get()) != 0) return fail(impl::last_error());

  const auto path = object_path(object);
  const auto shard = path.parent_path();
  const auto trash = temp_path("trash-");
  bool new_shard = false;
  {
    std::unique_lock lock(mutex_);  // excludes part commits, abort and other completions
    auto b = buckets_.find(object.bucket);
    if (b == buckets_.end()) return fail(sluice::errc::no_such_bucket);
    if (::access((dir / "upload.json").c_str(), F_OK) != 0) {
      return fail(errno == ENOENT ? error_code(sluice::errc::no_such_upload) : impl::last_error());
    }
    if (!precondition.none()) {
      const auto current = b->second.objects.find(object.key);
      if (!precondition.met_by(current == b->second.objects.end() ? nullptr : &current->second.info.attributes.etag)) {
        return fail(sluice::errc::precondition_failed);
      }
    }
    new_shard = ::mkdir(shard.c_str(), 0755) == 0;
    if (!new_shard && errno != EEXIST) return fail(impl::last_error());
    // Publish first, then retire the upload: a crash in between leaves the object published
    // and the upload still there to complete again or abort, never neither.
    if (!impl::rename_path(temp, path, ec)) return fail(ec);
    b->second.objects.insert_or_assign(object.key, entry{info, header.size()});
    // Should this fail, the object is published but the upload stays: reported as an error.
    if (!impl::rename_path(dir, trash, ec)) return {};
  }
  if (new_shard) sync_directory(shard.parent_path(), ec);
  if (!ec) sync_directory(shard, ec);
  error_code upload_ec;
  sync_directory(dir.parent_path(), upload_ec);
  if (!ec) ec = upload_ec;
  impl::remove_quietly(trash);
  return ec ? object_info{} : info;
}

void fs_store::abort_upload(const object_ref& object, std::string_view upload_id, error_code& ec) {
  if (!has_bucket(object.bucket)) {
    ec = sluice::errc::no_such_bucket;
    return;
  }
  (void)read_upload(object, upload_id, ec);
  if (ec) return;
  const auto dir = upload_dir(object.bucket, upload_id);
  const auto trash = temp_path("trash-");
  {
    std::unique_lock lock(mutex_);  // excludes part commits and completions
    if (buckets_.find(object.bucket) == buckets_.end()) {
      ec = sluice::errc::no_such_bucket;
      return;
    }
    if (!fs_store_impl::rename_path(dir, trash, ec)) {
      if (ec == boost::system::errc::no_such_file_or_directory) ec = sluice::errc::no_such_upload;
      return;
    }
  }
  sync_directory(dir.parent_path(), ec);
  fs_store_impl::remove_quietly(trash);
}

}  // namespace sluice::s3
