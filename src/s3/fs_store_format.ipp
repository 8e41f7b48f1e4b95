// SPDX-License-Identifier: Apache-2.0
// The on-disk format: file descriptors and whole-buffer I/O, the JSON metadata (a small writer, a
// strict reader over simdjson), small files and directories, and the object header.
// Part of fs_store's implementation (include/sluice/s3/fs_store.hpp), included by src/s3/fs_store.ipp
// in the order written there.

namespace sluice::s3 {

// Helpers of this file only. A named namespace, not an anonymous one: fs_store::opened holds
// a unique_fd. (Inside sluice::s3, errc is the S3 enumeration: sluice::errc is spelled out.)
namespace fs_store_impl {

namespace fs = std::filesystem;

constexpr std::string_view header_magic = "SLUICEO1";
constexpr std::size_t header_prefix = 16;  // magic, header length, JSON length

error_code sys_error(int value) { return {value, boost::system::generic_category()}; }
error_code last_error() { return sys_error(errno); }
error_code sys_error(const std::error_code& e) { return sys_error(e.value()); }

using ::sluice::detail::hex_digits;
using ::sluice::detail::lower_hex_value;  // lower case only: one spelling per byte string
using ::sluice::detail::unique_fd;

unique_fd open_fd(const char* path, int flags, error_code& ec, mode_t mode = 0644) {
  int fd = -1;
  do {
    fd = ::open(path, flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    ec = last_error();
    return {};
  }
  ec = {};
  return unique_fd(fd);
}
unique_fd open_fd(const fs::path& path, int flags, error_code& ec, mode_t mode = 0644) {
  return open_fd(path.c_str(), flags, ec, mode);
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
// at a third of the rate of the large folios aligned writes leave (docs/history/performance-2026-11.md).
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
  ::sluice::detail::append_hex(out, std::as_bytes(std::span(bytes.data(), bytes.size())));
  return out;
}

bool from_hex(std::string_view hex, std::string& out) {
  if (hex.size() % 2 != 0) return false;
  out.clear();
  out.reserve(hex.size() / 2);
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const int hi = lower_hex_value(hex[i]);
    const int lo = lower_hex_value(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out.push_back(static_cast<char>((hi << 4) | lo));
  }
  return true;
}

bool is_lower_hex(std::string_view s, std::size_t length) noexcept {
  return s.size() == length && std::all_of(s.begin(), s.end(), [](char c) { return lower_hex_value(c) >= 0; });
}

bool valid_upload_id(std::string_view id) noexcept { return is_lower_hex(id, 32); }

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
  if (!a.part_checksums.empty()) {
    out += R"(,"part_checksums":[)";
    for (std::size_t i = 0; i < a.part_checksums.size(); ++i) {
      if (i != 0) out.push_back(',');
      put_json_bytes(out, a.part_checksums[i]);
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

// A part_checksums array: at most max_part_number byte strings.
bool get_json_strings(simdjson::dom::element value, std::vector<std::string>& out) {
  simdjson::dom::array items;
  if (value.get_array().get(items) != simdjson::SUCCESS || items.size() > fs_store::max_part_number) return false;
  out.clear();
  for (simdjson::dom::element item : items) {
    if (!get_json_bytes(item, out.emplace_back())) return false;
  }
  return true;
}

// Reads the metadata JSON strictly: an object with every required member once, optional members
// at most once, nothing unknown.
bool decode_info_json(std::string_view json, object_info& out) {
  constexpr std::size_t required = 11;  // the first 11 members; the rest are optional
  static constexpr std::array<std::string_view, 17> members = {"v",
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
                                                               "part_sizes",
                                                               "part_checksums"};
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
      case 16: ok = get_json_strings(value, a.part_checksums); break;
      default: break;
    }
    if (!ok) return false;
  }
  if ((seen & ((1U << required) - 1)) != (1U << required) - 1) return false;
  out = std::move(info);
  return true;
}

// bucket.json: {"v":1,"created":<ns>} and, for a bucket the server made for a user,
// "owner":"<access key id>" (a JSON string; files written before it existed have none); then,
// each only when set, "location":S (CreateBucket's LocationConstraint) and "tags":[[S,S],...].
std::string encode_bucket_json(std::chrono::system_clock::time_point created,
                               const std::optional<std::string>& owner = std::nullopt,
                               const bucket_settings& settings = {}) {
  std::string out = R"({"v":1,"created":)" + std::to_string(to_ns(created));
  if (owner) {
    out += R"(,"owner":)";
    put_json_string(out, *owner);
  }
  if (!settings.location.empty()) {
    out += R"(,"location":)";
    put_json_bytes(out, settings.location);
  }
  if (!settings.tags.empty()) {
    out += R"(,"tags":)";
    put_json_pairs(out, settings.tags);
  }
  return out + "}";
}

bool decode_bucket_json(std::string_view json, std::chrono::system_clock::time_point& created,
                        std::optional<std::string>& owner, bucket_settings* settings = nullptr) {
  simdjson::dom::parser parser;
  const simdjson::padded_string padded(json);
  simdjson::dom::object root;
  if (parser.parse(padded).get_object().get(root) != simdjson::SUCCESS) return false;
  std::uint64_t version = 0;
  std::int64_t ns = 0;
  if (root["v"].get_uint64().get(version) != simdjson::SUCCESS || version != 1) return false;
  if (root["created"].get_int64().get(ns) != simdjson::SUCCESS) return false;
  std::size_t members = 2;
  std::string_view who;
  const auto owner_error = root["owner"].get_string().get(who);
  if (owner_error == simdjson::SUCCESS) {
    owner = std::string(who);
    ++members;
  } else if (owner_error != simdjson::NO_SUCH_FIELD) {
    return false;
  }
  bucket_settings read;
  simdjson::dom::element element;
  if (root["location"].get(element) == simdjson::SUCCESS) {
    if (!get_json_bytes(element, read.location)) return false;
    ++members;
  }
  if (root["tags"].get(element) == simdjson::SUCCESS) {
    if (!get_json_pairs(element, read.tags)) return false;
    ++members;
  }
  if (root.size() != members) return false;
  created = from_ns(ns);
  if (settings != nullptr) *settings = std::move(read);
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

}  // namespace sluice::s3
