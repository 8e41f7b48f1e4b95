// SPDX-License-Identifier: Apache-2.0
// Request helpers of the server: header values, payload digests, ranges, copy sources, writers.
// Part of the S3 server (src/s3/server/; docs/architecture.md lists the files).
#pragma once

#include "common/text.hpp"
#include "state.hpp"

namespace sluice::s3::detail {

/// Case-insensitive ASCII comparison for header values such as "100-continue".
using ::sluice::detail::iequals;

/// An S3 error to answer with.
struct answer_error {
  s3::errc code;
  std::string message;
};

/// The digests a received payload is checked against and described by, whichever path carried
/// it (HTTP body, aws-chunked body, RDMA): MD5 for the ETag and Content-MD5, SHA-256 when the
/// payload is signed, and each flexible checksum the request names.
class payload_digests {
 public:
  /// Reads what the request promises. `header` looks up a request header (empty when absent).
  template <class HeaderLookup>
  std::optional<answer_error> start(std::string_view content_md5, std::string_view payload_hash,
                                    const HeaderLookup& header) {
    if (!content_md5.empty()) {
      content_md5_ = base64_decode(content_md5);
      if (!content_md5_ || content_md5_->size() != 16) return answer_error{s3::errc::invalid_digest, {}};
    }
    if (payload_hash.size() == 64) {
      sha256_.emplace(digest_kind::sha256);
      payload_hash_ = std::string(payload_hash);
    }
    for (auto algorithm : {checksum_algorithm::crc32, checksum_algorithm::crc32c, checksum_algorithm::sha1,
                           checksum_algorithm::sha256}) {
      if (auto value = header(header_name(algorithm)); !value.empty()) {
        checksums_.emplace_back(algorithm, std::string(value), digest(digest_kind_of(algorithm)));
      }
    }
    return std::nullopt;
  }
  /// A checksum that arrives in the aws-chunked trailer rather than a header.
  void expect_trailer(checksum_algorithm algorithm) {
    if (std::none_of(checksums_.begin(), checksums_.end(),
                     [&](const auto& c) { return std::get<0>(c) == algorithm; })) {
      checksums_.emplace_back(algorithm, std::string(), digest(digest_kind_of(algorithm)));
    }
  }
  /// Whether the request named a flexible checksum (header or trailer).
  [[nodiscard]] bool has_checksum() const noexcept { return !checksums_.empty(); }
  /// No MD5: the ETag becomes an opaque random value (not a digest, as S3 Express One Zone's)
  /// and a CRC32C of the payload is computed and kept. For RDMA PUTs without Content-MD5: MD5
  /// runs at ~0.5 GB/s on one core, a third of a disk's durable write rate.
  void skip_md5() {
    md5_.reset();
    expect_trailer(checksum_algorithm::crc32c);
  }
  void update(std::span<const std::byte> data) {
    if (md5_) md5_->update(data);
    if (sha256_) sha256_->update(data);
    for (auto& c : checksums_) std::get<2>(c).update(data);
  }
  /// Checks every promise and sets the ETag and checksums of `attributes`.
  std::optional<answer_error> finish(object_attributes& attributes,
                                     const std::map<std::string, std::string>* trailers) {
    if (sha256_ && !constant_time_equal(to_hex(sha256_->finish()), payload_hash_)) {
      return answer_error{s3::errc::x_amz_content_sha256_mismatch, {}};
    }
    if (md5_) {
      const std::vector<std::byte> md5_bytes = md5_->finish();
      if (content_md5_ && *content_md5_ != md5_bytes) {
        return answer_error{s3::errc::bad_digest, "The Content-MD5 you specified did not match what we received."};
      }
      attributes.etag = to_hex(md5_bytes);
    } else {
      attributes.etag = opaque_etag();
    }
    for (auto& [algorithm, want, running] : checksums_) {
      std::string got = base64_encode(running.finish());
      if (want.empty() && trailers != nullptr) {
        auto it = trailers->find(std::string(header_name(algorithm)));
        if (it != trailers->end()) want = it->second;
      }
      if (!want.empty() && want != got) {
        return answer_error{s3::errc::bad_digest, "The " + std::string(algorithm_name(algorithm)) +
                                                      " you specified did not match the calculated checksum."};
      }
      std::string name(algorithm_name(algorithm));
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      attributes.checksums[name] = got;
    }
    return std::nullopt;
  }

 private:
  /// 26 characters of base32 (a-z, 2-7) over 128 random bits: never mistaken for a hex MD5.
  static std::string opaque_etag() {
    std::random_device device;  // getrandom(2) on Linux; an ETag needs uniqueness, not secrecy
    std::array<unsigned char, 17> bits{};
    for (auto& b : bits) b = static_cast<unsigned char>(device());
    constexpr std::string_view alphabet = "abcdefghijklmnopqrstuvwxyz234567";
    std::string out;
    unsigned buffer = 0;
    int held = 0;
    for (unsigned char b : bits) {
      buffer = (buffer << 8U) | b;
      held += 8;
      while (held >= 5 && out.size() < 26) {
        out.push_back(alphabet[(buffer >> static_cast<unsigned>(held - 5)) & 31U]);
        held -= 5;
      }
    }
    return out;
  }

  std::optional<std::vector<std::byte>> content_md5_;
  std::optional<digest> md5_{std::in_place, digest_kind::md5};
  std::optional<digest> sha256_;
  std::string payload_hash_;
  std::vector<std::tuple<checksum_algorithm, std::string, digest>> checksums_;  // algorithm, expected (base64), running
};

/// A checksum's name as object_attributes::checksums spells it: "crc32", "crc32c", "sha1", "sha256".
inline std::string lower_name(checksum_algorithm algorithm) {
  std::string name(algorithm_name(algorithm));
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return name;
}

/// The composite checksum of a multipart upload created with x-amz-checksum-algorithm (kept in
/// its attributes as that checksum without a value): the checksum, by the same algorithm, of
/// the concatenated binary checksums of its parts, in base64 with "-N" (N parts), as S3 makes it.
/// Each part must have been uploaded with that checksum, and one the completion names must equal it.
class composite_checksum {
 public:
  explicit composite_checksum(const object_attributes& upload) {
    for (const auto& [name, value] : upload.checksums) {
      const auto algorithm = parse_checksum_algorithm(name);
      if (value.empty() && algorithm) {
        name_ = name;
        running_.emplace(digest_kind_of(*algorithm));
      }
    }
  }
  /// Adds the next chosen part; the error to answer when it lacks the checksum or the completion
  /// names another value (`named`: the part's Checksum* elements of the completion body).
  std::optional<answer_error> add(const part_info& part, const std::map<std::string, std::string>& named) {
    if (!running_) return std::nullopt;
    const auto kept = part.checksums.find(name_);
    const auto bytes = kept == part.checksums.end() ? std::nullopt : base64_decode(kept->second);
    if (!bytes) {
      return answer_error{s3::errc::invalid_request, "The upload was created using a " + name_ + " checksum; part " +
                                                         std::to_string(part.number) + " was uploaded without it."};
    }
    if (const auto given = named.find(name_); given != named.end() && given->second != kept->second) {
      return answer_error{s3::errc::invalid_part, "The " + name_ + " checksum given for part " +
                                                      std::to_string(part.number) + " does not match the part's."};
    }
    running_->update(*bytes);
    parts_.push_back(kept->second);
    return std::nullopt;
  }
  /// Sets the object's checksums: the composite and each part's (none without an algorithm).
  void finish(object_attributes& attributes) {
    attributes.checksums.clear();
    attributes.part_checksums.clear();
    if (!running_) return;
    attributes.checksums[name_] = base64_encode(running_->finish()) + "-" + std::to_string(parts_.size());
    attributes.part_checksums = std::move(parts_);
  }

 private:
  std::string name_;
  std::optional<digest> running_;
  std::vector<std::string> parts_;
};

/// The identity of a mapped object version, for registration caches: the file's device and
/// inode when the store's mapping has a descriptor (fs_store), else none.
template <class Mapping>
object_version_id version_of(const Mapping& mapping) {
  if constexpr (file_backed_mapping<Mapping>) {
    struct stat st {};
    if (mapping.native_handle() >= 0 && ::fstat(mapping.native_handle(), &st) == 0) {
      return {static_cast<std::uint64_t>(st.st_dev) + 1, static_cast<std::uint64_t>(st.st_ino)};
    }
  }
  return {};
}

/// sendfile(2) without SIGPIPE. sendfile has no MSG_NOSIGNAL: to a peer that closed, it raises
/// SIGPIPE in the calling thread, which ends a process that does not ignore it (an embedding host
/// need not), and may do so while still returning the bytes it moved before the peer went. The
/// signal is blocked in this thread around the call, and one the call raised is taken off the
/// thread's pending set before the mask is restored. As sendfile, errno included.
inline ssize_t sendfile_nosignal(int socket, int file, off_t* at, std::size_t count) noexcept {
  sigset_t pipe;
  sigset_t old;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, &old);
  sigset_t pending;
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  const ssize_t n = ::sendfile(socket, file, at, count);
  const int error = errno;
  if (!was_pending && (n < 0 ? error == EPIPE : sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1)) {
    const timespec now{};
    while (sigtimedwait(&pipe, nullptr, &now) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = error;
  return n;
}

/// Whether a token's endpoint lies on `host` (the HTTP peer): for sockaddr_in/sockaddr_in6
/// names (tcp, verbs over IP) the address must be the peer's; shm needs a loopback peer; other
/// formats are not checked.
inline bool token_names_host(const rdma_token& token, const asio::ip::address& host) {
  const auto& name = token.endpoint;
  if (token.provider == "shm") return host.is_loopback();
  // tcp names its endpoints with a sockaddr_in/sockaddr_in6: anything else (an all-0xff name, a
  // port 0) is refused here rather than handed to the provider, which would try to connect to it.
  const bool sockaddr_named = token.provider.starts_with("tcp");
  std::uint16_t family = 0;
  if (name.size() < sizeof family) return !sockaddr_named;
  std::memcpy(&family, name.data(), sizeof family);
  if (sockaddr_named) {
    const bool in4 = family == AF_INET && name.size() == sizeof(sockaddr_in);
    const bool in6 = family == AF_INET6 && name.size() == sizeof(sockaddr_in6);
    std::uint16_t port = 0;
    if (in4 || in6) std::memcpy(&port, name.data() + offsetof(sockaddr_in, sin_port), sizeof port);
    if ((!in4 && !in6) || port == 0) return false;
  }
  if (family == AF_INET && name.size() >= sizeof(sockaddr_in)) {
    sockaddr_in in{};
    std::memcpy(&in, name.data(), sizeof in);
    const std::uint32_t want = ntohl(in.sin_addr.s_addr);
    if (host.is_v4()) return host.to_v4().to_uint() == want;
    return host.is_v6() && host.to_v6().is_v4_mapped() &&
           asio::ip::make_address_v4(asio::ip::v4_mapped, host.to_v6()).to_uint() == want;
  }
  if (family == AF_INET6 && name.size() >= sizeof(sockaddr_in6)) {
    sockaddr_in6 in6{};
    std::memcpy(&in6, name.data(), sizeof in6);
    asio::ip::address_v6::bytes_type bytes{};
    std::memcpy(bytes.data(), &in6.sin6_addr, bytes.size());
    return host.is_v6() && host.to_v6() == asio::ip::address_v6(bytes);
  }
  return true;
}

/// A resolved "Range: bytes=..." header: the extent, or why it cannot be served.
struct range_result {
  bool present = false;
  bool satisfiable = true;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

/// Parses a single-range "bytes=a-b", "bytes=a-" or "bytes=-n" against an object of `size` bytes
/// (S3 semantics: an end past the object is clamped; a start at or past the end is unsatisfiable;
/// a syntactically invalid or multi-range header is ignored, as S3 does).
inline range_result parse_range(std::string_view header, std::uint64_t size) {
  range_result r;
  if (!header.starts_with("bytes=")) return r;
  std::string_view spec = header.substr(6);
  if (spec.find(',') != std::string_view::npos) return r;
  const auto dash = spec.find('-');
  if (dash == std::string_view::npos) return r;
  auto number = [](std::string_view s, std::uint64_t& out) {
    if (s.empty()) return false;
    auto [p, e] = std::from_chars(s.data(), s.data() + s.size(), out);
    return e == std::errc{} && p == s.data() + s.size();
  };
  std::uint64_t first = 0;
  std::uint64_t last = 0;
  const std::string_view a = spec.substr(0, dash);
  const std::string_view b = spec.substr(dash + 1);
  if (a.empty()) {  // suffix: the last b bytes
    if (!number(b, last)) return r;
    r.present = true;
    if (last == 0 || size == 0) {
      r.satisfiable = false;
      return r;
    }
    r.length = std::min(last, size);
    r.offset = size - r.length;
    return r;
  }
  if (!number(a, first)) return r;
  if (!b.empty() && (!number(b, last) || last < first)) return r;
  r.present = true;
  if (first >= size) {
    r.satisfiable = false;
    return r;
  }
  r.offset = first;
  r.length = (b.empty() ? size - 1 : std::min(last, size - 1)) - first + 1;
  return r;
}

/// The object named by CopyObject's or UploadPartCopy's x-amz-copy-source, "[/]bucket/key", url-
/// encoded; a "?versionId=..." is dropped (one version per key). nullopt: not of that form.
inline std::optional<object_ref> parse_copy_source(std::string_view header) {
  if (header.starts_with('/')) header.remove_prefix(1);
  header = header.substr(0, header.find('?'));
  auto decoded = percent_decode(header);
  const auto slash = decoded ? decoded->find('/') : std::string::npos;
  if (!decoded || slash == 0 || slash == std::string::npos || slash + 1 == decoded->size()) return std::nullopt;
  return object_ref{decoded->substr(0, slash), decoded->substr(slash + 1)};
}

/// The bytes UploadPartCopy copies out of a source of `size` bytes: the extent, or the error to
/// answer.
struct copy_extent {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::optional<s3_failure> problem;
};

/// Parses UploadPartCopy's x-amz-copy-source-range (`header`; nullopt when absent: the whole
/// source). S3 takes only "bytes=first-last", both inclusive offsets given as plain decimal, first
/// <= last: no suffix, open-ended or multi-range form, no sign or blank. A malformed value is
/// 400 InvalidArgument; a well-formed one reaching past the source is 416 InvalidRange, as S3
/// answers (and the s3-tests conformance suite checks). Numbers that overflow 64 bits are malformed.
inline copy_extent parse_copy_source_range(std::optional<std::string_view> header, std::uint64_t size) {
  copy_extent r;
  if (!header) {
    r.length = size;
    return r;
  }
  auto number = [](std::string_view s, std::uint64_t& out) {
    if (s.empty() || s.front() < '0' || s.front() > '9') return false;
    auto [p, e] = std::from_chars(s.data(), s.data() + s.size(), out);
    return e == std::errc{} && p == s.data() + s.size();
  };
  std::uint64_t first = 0;
  std::uint64_t last = 0;
  const std::string_view spec = header->starts_with("bytes=") ? header->substr(6) : std::string_view{};
  const auto dash = spec.find('-');
  if (dash == std::string_view::npos || !number(spec.substr(0, dash), first) || !number(spec.substr(dash + 1), last) ||
      last < first) {
    r.problem = s3_failure{s3::errc::invalid_argument,
                           "The x-amz-copy-source-range value must be of the form bytes=first-last where first and "
                           "last are the zero-based offsets of the first and last bytes to copy"};
    return r;
  }
  if (last >= size) {
    r.problem = s3_failure{s3::errc::invalid_range,
                           "Range specified is not valid for source object of size: " + std::to_string(size)};
    return r;
  }
  r.offset = first;
  r.length = last - first + 1;  // last < size: no overflow
  return r;
}

/// The partNumber of UploadPart and UploadPartCopy: 1..10000, or nullopt.
inline std::optional<std::uint32_t> parse_part_number(std::string_view text) {
  std::uint32_t number = 0;
  auto [p, e] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (e != std::errc{} || p != text.data() + text.size() || number < 1 || number > 10000) return std::nullopt;
  return number;
}

/// Whether an If-Match / If-None-Match list ("*", or ETags, quoted or not, W/ allowed, comma
/// separated) names `etag` (bare).
inline bool etag_list_matches(std::string_view list, std::string_view etag) {
  if (list == "*") return true;
  while (!list.empty()) {
    const auto comma = list.find(',');
    std::string_view one = list.substr(0, comma);
    while (!one.empty() && one.front() == ' ') one.remove_prefix(1);
    while (!one.empty() && one.back() == ' ') one.remove_suffix(1);
    if (one.starts_with("W/")) one.remove_prefix(2);
    if (one.size() >= 2 && one.front() == '"' && one.back() == '"') one = one.substr(1, one.size() - 2);
    if (one == etag) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

/// The precondition of a PUT or CompleteMultipartUpload from its If-None-Match (only "*": no
/// object may exist) and If-Match (one ETag) headers, as S3's conditional writes take them;
/// nullopt for what S3 does not do (another If-None-Match, If-Match of "*" or of a list).
inline std::optional<write_precondition> write_precondition_of(std::string_view if_match,
                                                               std::string_view if_none_match) {
  const auto trim = [](std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
  };
  write_precondition p;
  if (!if_none_match.empty()) {
    if (trim(if_none_match) != "*") return std::nullopt;
    p.if_absent = true;
  }
  if (std::string_view etag = trim(if_match); !etag.empty()) {
    if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
    if (etag.empty() || etag == "*" || etag.find_first_of(",\"") != std::string_view::npos) return std::nullopt;
    p.if_etag = std::string(etag);
  }
  return p;
}

/// The (key, value) pairs of an x-amz-tagging header: "k1=v1&k2=v2", URL-encoded as a query
/// ('+' is a space); nullopt when a piece does not decode.
inline std::optional<std::vector<std::pair<std::string, std::string>>> parse_tagging_header(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!text.empty()) {
    const auto amp = text.find('&');
    std::string piece(text.substr(0, amp));
    std::replace(piece.begin(), piece.end(), '+', ' ');
    const auto eq = piece.find('=');
    auto key = percent_decode(std::string_view(piece).substr(0, eq));
    auto value = eq == std::string::npos ? std::optional<std::string>(std::string())
                                         : percent_decode(std::string_view(piece).substr(eq + 1));
    if (!key || !value) return std::nullopt;
    if (!key->empty() || !value->empty()) out.emplace_back(std::move(*key), std::move(*value));
    if (amp == std::string_view::npos) break;
    text.remove_prefix(amp + 1);
  }
  return out;
}

/// A tag set as S3 accepts it: at most 10 tags, keys of 1 to 128 and values of at most 256
/// characters of XML-safe UTF-8, no key twice, none in the reserved "aws:" space. nullopt, with
/// `why` set to S3's message, otherwise.
inline std::optional<std::map<std::string, std::string>> checked_tags(
    const std::vector<std::pair<std::string, std::string>>& pairs, std::string& why) {
  constexpr std::size_t max_tags = 10;
  const auto characters = [](std::string_view text) {
    return static_cast<std::size_t>(std::count_if(
        text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0U) != 0x80U; }));
  };
  if (pairs.size() > max_tags) {
    why = "Object tags cannot be greater than 10";
    return std::nullopt;
  }
  std::map<std::string, std::string> tags;
  for (const auto& [key, value] : pairs) {
    if (key.empty() || characters(key) > 128 || !is_xml_safe_utf8(key)) {
      why = "The TagKey you have provided is invalid";
      return std::nullopt;
    }
    if (characters(value) > 256 || !is_xml_safe_utf8(value)) {
      why = "The TagValue you have provided is invalid";
      return std::nullopt;
    }
    if (key.starts_with("aws:")) {
      why = "Your TagKey cannot be prefixed with aws:";
      return std::nullopt;
    }
    if (!tags.emplace(key, value).second) {
      why = "Cannot provide multiple Tags with the same key";
      return std::nullopt;
    }
  }
  return tags;
}

/// Whether `location` may be a CreateBucket LocationConstraint: empty (us-east-1), or a region
/// name of 1 to 64 ASCII letters, digits and hyphens ("eu-west-1", the legacy "EU").
inline bool is_location_name(std::string_view location) noexcept {
  return location.size() <= 64 && std::all_of(location.begin(), location.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
         });
}

/// User metadata as S3 takes it (RFC 2047, as AWS documents for non-ASCII metadata): a value made
/// only of encoded words ("=?UTF-8?B?w6k=?=", B or Q encoding, UTF-8 or US-ASCII, several
/// separated by blanks) is stored decoded, when what it decodes to is UTF-8 a header and an XML
/// body can carry; any other value is stored as sent. nullopt: keep the value as it is.
inline std::optional<std::string> rfc2047_decoded(std::string_view value) {
  std::string out;
  bool any = false;
  while (!value.empty()) {
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    if (value.empty()) break;
    // =?charset?encoding?text?=
    if (!value.starts_with("=?")) return std::nullopt;
    const auto q1 = value.find('?', 2);
    const auto q2 = q1 == std::string_view::npos ? q1 : value.find('?', q1 + 1);
    const auto end = q2 == std::string_view::npos ? q2 : value.find("?=", q2 + 1);
    if (end == std::string_view::npos) return std::nullopt;
    const std::string_view charset = value.substr(2, q1 - 2);
    const std::string_view encoding = value.substr(q1 + 1, q2 - q1 - 1);
    const std::string_view text = value.substr(q2 + 1, end - q2 - 1);
    value.remove_prefix(end + 2);
    if (!iequals(charset, "UTF-8") && !iequals(charset, "US-ASCII")) return std::nullopt;
    if (iequals(encoding, "B")) {
      const auto bytes = base64_decode(text);
      if (!bytes) return std::nullopt;
      out.append(reinterpret_cast<const char*>(bytes->data()), bytes->size());
    } else if (iequals(encoding, "Q")) {
      for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '_') {
          out.push_back(' ');
        } else if (text[i] == '=') {
          unsigned byte = 0;
          if (i + 2 >= text.size()) return std::nullopt;
          const auto [p, e] = std::from_chars(text.data() + i + 1, text.data() + i + 3, byte, 16);
          if (e != std::errc{} || p != text.data() + i + 3) return std::nullopt;
          out.push_back(static_cast<char>(byte));
          i += 2;
        } else {
          out.push_back(text[i]);
        }
      }
    } else {
      return std::nullopt;
    }
    any = true;
  }
  if (!any || !is_xml_safe_utf8(out) || out.find_first_of("\r\n") != std::string::npos) return std::nullopt;
  return out;
}

/// How a stored metadata value goes out as a header: as it is when it is ASCII, else (UTF-8 a
/// client would read as Latin-1, as Python's http.client does) one RFC 2047 encoded word,
/// "=?UTF-8?B?<base64>?=", as S3 answers. The text is written into `buffer`, reused.
inline std::string_view header_safe_metadata(std::string_view value, std::string& buffer) {
  if (std::all_of(value.begin(), value.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    return value;
  }
  buffer.assign("=?UTF-8?B?");
  buffer += base64_encode(std::as_bytes(std::span(value.data(), value.size())));
  buffer += "?=";
  return buffer;
}

/// Whether a header value may be sent as it is: no CR, LF or other control character but tab
/// (GET's response-* overrides come from the query, percent-decoded, where anything may hide).
inline bool is_safe_header_value(std::string_view value) noexcept {
  return std::none_of(value.begin(), value.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && u != '\t') || u == 0x7F;
  });
}

/// Copies `length` bytes at `bytes` into `writer` in slices of 8 MiB, adding them to `md5` when
/// given; stops at the first write error (in `ec`).
template <class Writer>
void write_from(Writer& writer, const std::byte* bytes, std::uint64_t length, digest* md5, error_code& ec) {
  constexpr std::uint64_t slice = 8 * mib;
  for (std::uint64_t done = 0; done < length && !ec; done += slice) {
    const std::span<const std::byte> piece(bytes + done, static_cast<std::size_t>(std::min(slice, length - done)));
    if (md5 != nullptr) md5->update(piece);
    writer.write(piece, ec);
  }
}

}  // namespace sluice::s3::detail
