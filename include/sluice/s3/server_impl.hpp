// The implementation of sluice::s3::server<Store>. Included by src/s3/server.ipp, which
// instantiates it for fs_store and memory_store; include it yourself to serve another store.
#pragma once

#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/sendfile.h>
#include <sys/stat.h>

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it

#include <sluice/names.hpp>
#include <sluice/s3/access_log.hpp>
#include <sluice/s3/admin_impl.hpp>
#include <sluice/s3/checksum.hpp>
#include <sluice/s3/chunked.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/metrics.hpp>
#include <sluice/s3/router.hpp>
#include <sluice/s3/server.hpp>
#include <sluice/s3/sigv2.hpp>
#include <sluice/s3/sigv4.hpp>
#include <sluice/s3/xml.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <charconv>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

namespace sluice::s3::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

/// What a failed request answers: the S3 error, an optional message, and whether the
/// connection must close (the request body was not consumed).
struct s3_failure {
  s3::errc code = s3::errc::internal_error;
  std::string message;
};

/// Maps a store's sluice::errc to the S3 error a client expects.
inline s3::errc to_s3(const error_code& ec, bool bucket_level = false) {
  if (ec.category() == s3_category()) return static_cast<s3::errc>(ec.value());
  if (ec.category() == sluice_category()) {
    switch (static_cast<sluice::errc>(ec.value())) {
      case sluice::errc::no_such_bucket: return s3::errc::no_such_bucket;
      case sluice::errc::no_such_object: return s3::errc::no_such_key;
      case sluice::errc::bucket_exists: return s3::errc::bucket_already_owned_by_you;
      case sluice::errc::bucket_not_empty: return s3::errc::bucket_not_empty;
      case sluice::errc::invalid_name: return bucket_level ? s3::errc::invalid_bucket_name : s3::errc::key_too_long;
      case sluice::errc::capacity_exceeded: return s3::errc::entity_too_large;
      case sluice::errc::no_such_upload: return s3::errc::no_such_upload;
      case sluice::errc::invalid_part: return s3::errc::invalid_part;
      case sluice::errc::invalid_part_order: return s3::errc::invalid_part_order;
      case sluice::errc::bad_range: return s3::errc::invalid_range;
      case sluice::errc::precondition_failed: return s3::errc::precondition_failed;
      default: break;
    }
  }
  if (ec == std::errc::no_space_on_device || ec.value() == EDQUOT) {
    if (ec.category() == boost::system::generic_category() || ec.category() == boost::system::system_category()) {
      return s3::errc::insufficient_storage;
    }
  }
  return s3::errc::internal_error;
}

/// The access log's path of a token's transfer: "grant:memfd" for a same-host grant
/// ("local:memfd"), "rdma:<provider>" otherwise.
inline std::string direct_path_of(std::string_view provider) {
  if (provider.starts_with("local:")) return "grant:" + std::string(provider.substr(6));
  return "rdma:" + std::string(provider);
}

/// A store whose reads may wait on the network (gateway_store: a read may ask its upstream). The
/// server runs its calls on the blocking pool, never on a network thread.
template <class Store>
concept remote_store = requires {
  requires Store::remote;
};

/// Shared by the acceptor and every connection.
template <class Store>
struct server_state : std::enable_shared_from_this<server_state<Store>> {
  server_state(Store& s, server_config c)
      : store(&s),
        config(std::move(c)),
        acceptor(io),
        tls_acceptor(io),
        admin_acceptor(io),
        log_flush_timer(io),
        users(std::make_shared<const std::vector<user>>(config.users)) {}

  Store* store;
  server_config config;
  asio::io_context io;
  // Store calls that wait for the disk (fsync, concatenation), and every call of a remote_store
  // (one thread per upstream request in flight).
  asio::thread_pool blocking{remote_store<Store> ? 16 : 2};
  asio::thread_pool rdma{config.rdma_threads};  // RDMA transfers (each waits for its completions)
  tcp::acceptor acceptor;
  tcp::acceptor tls_acceptor;                     // config.tls: the HTTPS listener
  std::optional<asio::ssl::context> tls_context;  // its certificate and key, loaded by listen()
  std::vector<std::thread> threads;
  std::atomic<std::size_t> connections{0};
  std::mutex address_mutex;                              // guards per_address
  std::map<asio::ip::address, std::size_t> per_address;  // open connections per client address
  std::atomic<std::uint64_t> request_counter{0};
  std::atomic<bool> stopping{false};
  std::atomic<bool> ready{false};  // GET /ready: listening, and not stopping
  tcp::acceptor admin_acceptor;    // config.admin_listen
  server_metrics metrics;
  std::unique_ptr<access_log> log;     // null: the access log is off
  asio::steady_timer log_flush_timer;  // writes the access log out every second
  std::mutex users_mutex;              // guards users (set_users replaces the list)
  std::shared_ptr<const std::vector<user>> users;

  std::mutex mutex;                                        // guards owners and closers
  std::map<std::string, std::string, std::less<>> owners;  // bucket → access key id
  std::map<const void*, std::function<void()>> closers;    // live connection → closes it on its strand

  std::optional<std::string> secret_for(std::string_view access_key) {
    std::shared_ptr<const std::vector<user>> current;
    {
      std::lock_guard lock(users_mutex);
      current = users;
    }
    for (const auto& u : *current) {
      if (u.access_key_id == access_key) return u.secret_access_key;
    }
    return std::nullopt;
  }

  std::string next_request_id() {
    char buf[17];
    const auto n = request_counter.fetch_add(1) + 0x51C3000000ull;
    auto [end, e] = std::to_chars(buf, buf + sizeof buf, n, 16);
    (void)e;
    return std::string(buf, end);
  }
};

}  // namespace sluice::s3::detail

namespace sluice::s3::detail {

/// Case-insensitive ASCII comparison for header values such as "100-continue".
inline bool iequals(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

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

/// The identity of a mapped object version, for registration caches: the file's device and
/// inode when the store's mapping has a descriptor (fs_store), else none.
template <class Mapping>
object_version_id version_of(const Mapping& mapping) {
  if constexpr (requires { mapping.native_handle(); }) {
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
/// <= last: no suffix, open-ended or multi-range form, no sign or blank. A malformed value, and
/// one reaching past the source, are 400 InvalidArgument as on S3 (not 416: the request is
/// wrong, not the object's state). Numbers that overflow 64 bits are malformed.
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
    r.problem = s3_failure{s3::errc::invalid_argument,
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

/// One connection: reads requests, routes, authenticates, runs the operation, answers.
/// One client connection. `Stream` is beast::tcp_stream (HTTP) or an ssl::stream over one
/// (HTTPS: the TLS handshake runs first, under read_timeout).
template <class Store, class Stream>
class connection : public std::enable_shared_from_this<connection<Store, Stream>> {
 public:
  static constexpr bool tls = !std::is_same_v<Stream, beast::tcp_stream>;
  connection(std::shared_ptr<server_state<Store>> state, Stream stream, asio::ip::address peer)
      : state_(std::move(state)), stream_(std::move(stream)), peer_(std::move(peer)) {}

  asio::awaitable<void> run();

 private:
  using header_parser = http::request_parser<http::empty_body>;
  using string_response = http::response<http::string_body>;

  // Per-request facts every operation needs.
  struct request {
    header_parser* parser = nullptr;
    route where;
    std::string id;
    std::string user;  // access key id of the caller
    std::optional<verified> auth;
    bool head = false;
    bool keep_alive = true;
    bool body_pending = false;  // a body was announced and not (fully) read
    std::string rdma_reply;     // x-amz-rdma-reply of the answer: "200", "206", "501" or none
    // For the access log and the metrics (record()).
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    std::chrono::system_clock::time_point time = std::chrono::system_clock::now();
    std::string_view error;            // S3 error code answered (static text); empty on success
    std::uint64_t bytes_received = 0;  // payload bytes read over HTTP
    std::uint64_t bytes_direct = 0;    // payload bytes moved by RDMA or a grant
    std::string direct_path;           // "rdma:<provider>" or "grant:<kind>" when bytes_direct moved
    std::optional<rdma_decline_reason> decline;
    bool recorded = false;
    // The header, copied: reading a body moves the parser (and the header it holds) away.
    http::request_header<> fields;
    [[nodiscard]] const http::request_header<>& msg() const { return fields; }
    [[nodiscard]] std::string_view header(std::string_view name) const {
      auto it = msg().find(beast::string_view(name.data(), name.size()));
      if (it == msg().end()) return {};
      return {it->value().data(), it->value().size()};
    }
    [[nodiscard]] std::string resource() const {
      return "/" + where.bucket + (where.key.empty() ? "" : "/" + where.key);
    }
  };
  static rdma_requester requester(const request& req) { return {req.user}; }
  // Counts the answer to `req` in the metrics and writes its access log line, once: at every
  // place an answer leaves (send(), the streamed GET body) and, for a request that got none (the
  // client went away), when handle() ends (status 0).
  void record(request& req, unsigned status, std::uint64_t bytes_sent);
  struct record_on_exit {
    connection* self;
    request* req;
    record_on_exit(connection* s, request* r) : self(s), req(r) {}
    record_on_exit(const record_on_exit&) = delete;
    record_on_exit& operator=(const record_on_exit&) = delete;
    ~record_on_exit() { self->record(*req, 0, 0); }
  };

  asio::awaitable<bool> handle(header_parser& parser);
  asio::awaitable<bool> dispatch(request& req);

  // Responses.
  void common_headers(request& req, http::fields& fields);
  asio::awaitable<bool> send(request& req, string_response res);
  asio::awaitable<bool> send_xml(request& req, std::string body, http::status status = http::status::ok);
  asio::awaitable<bool> send_empty(request& req, http::status status);
  asio::awaitable<bool> send_error(request& req, s3::errc code, std::string message = {});

  // Bodies.
  asio::awaitable<bool> continue_if_expected(request& req);
  asio::awaitable<std::optional<std::string>> read_small_body(request& req, std::size_t limit);
  template <class Writer>
  asio::awaitable<std::optional<object_attributes>> receive_object(request& req, Writer& writer, std::uint64_t limit);
  // PutObject / UploadPart with x-amz-rdma-token: the payload is RMA-read from the client.
  template <class Writer>
  asio::awaitable<std::optional<object_attributes>> receive_via_rdma(request& req, Writer& writer, std::uint64_t limit);
  // Either, as the request says.
  template <class Writer>
  asio::awaitable<std::optional<object_attributes>> receive_payload(request& req, Writer& writer, std::uint64_t limit) {
    if (req.header("x-amz-rdma-token").empty()) co_return co_await receive_object(req, writer, limit);
    co_return co_await receive_via_rdma(req, writer, limit);
  }
  // What to do with a request's token: use it (`token` filled in), decline it, or reject it.
  enum class token_verdict { accept, decline, reject };
  token_verdict check_token(request& req, rdma_op op, std::uint64_t length, rdma_token& token, std::string& why);

  // Operations.
  asio::awaitable<bool> list_buckets(request& req);
  asio::awaitable<bool> create_bucket(request& req);
  asio::awaitable<bool> bucket_only(request& req);
  asio::awaitable<bool> list_objects(request& req);
  asio::awaitable<bool> delete_objects(request& req);
  asio::awaitable<bool> put_object(request& req);
  asio::awaitable<bool> copy_object(request& req);
  // `speculate`: a gateway's cached copy may be sent into a token's memory while its upstream is
  // asked whether it is current (false: the retry after it was not).
  asio::awaitable<bool> get_object(request& req, bool speculate = true);
  asio::awaitable<bool> delete_object(request& req);
  asio::awaitable<bool> multipart(request& req);
  asio::awaitable<bool> upload_part_copy(request& req);
  asio::awaitable<bool> object_tagging(request& req);

  // Runs `work` (a store call that may wait for the disk) on the blocking pool, then resumes
  // on this connection's strand: network threads never wait for fsync.
  template <class Work>
  asio::awaitable<std::invoke_result_t<Work>> offload(Work work) {
    co_return co_await offload_to(state_->blocking, std::move(work));
  }
  // A store call that answers from memory or the page cache runs in place; a remote_store's call
  // may wait for its upstream, so it is offloaded.
  template <class Work>
  asio::awaitable<std::invoke_result_t<Work>> store_call(Work work) {
    if constexpr (remote_store<Store>) {
      co_return co_await offload(std::move(work));
    } else {
      co_return work();
    }
  }
  // Awaits bytes [0, end) of a mapping still being filled (a gateway's miss), off the network
  // threads; `ec` as the fetch's.
  template <class Mapping>
  asio::awaitable<void> await_bytes(Mapping& mapping, std::uint64_t end, error_code& ec) {
    ec = {};
    if (mapping.ready(end)) co_return;
    (void)co_await store_call([&] {
      mapping.wait_until(end, ec);
      return 0;
    });
  }
  // As offload, on `pool`. A coroutine spawned on the pool runs `work` there, and awaiting it
  // resumes this one on its own executor. (`co_await asio::post(pool, use_awaitable)` would not
  // move it: the completion is dispatched back to the coroutine's executor, so `work` would run
  // on a network thread.)
  template <class Work>
  asio::awaitable<std::invoke_result_t<Work>> offload_to(asio::thread_pool& pool, Work work) {
    using result_type = std::invoke_result_t<Work>;
    co_return co_await asio::co_spawn(
        pool.get_executor(), [&work]() -> asio::awaitable<result_type> { co_return work(); }, asio::use_awaitable);
  }

  // The upstream's answer to whether a speculatively mapped copy (map_unconfirmed) is current,
  // asked on the blocking pool while the answer's bytes move. The job owns what it reads (the
  // mapping, the object's name), so a request that ends first does not wait for it.
  struct confirmation {
    explicit confirmation(const asio::any_io_executor& here) : wake(here) {}
    asio::steady_timer wake;  // cancelled on this connection's strand when the answer is in
    bool done = false;
    bool current = false;
  };
  template <class Mapping>
  asio::awaitable<std::shared_ptr<confirmation>> start_confirmation(object_ref object,
                                                                    std::shared_ptr<const Mapping> mapping) {
    const asio::any_io_executor here = co_await asio::this_coro::executor;
    auto asked = std::make_shared<confirmation>(here);
    // The store outlives the blocking pool (server::stop joins it), and holding the server's state
    // here could make this job its last owner.
    asio::post(state_->blocking,
               [store = state_->store, object = std::move(object), mapping = std::move(mapping), asked, here] {
                 bool current = false;
                 try {
                   current = store->confirm(object, *mapping);
                 } catch (...) {
                   // not confirmed: the request is answered from a confirmed version, or not at all
                 }
                 asio::post(here, [asked, current] {
                   asked->done = true;
                   asked->current = current;
                   asked->wake.cancel();
                 });
               });
    co_return asked;
  }
  static asio::awaitable<bool> confirmed(confirmation& asked) {
    while (!asked.done) {
      asked.wake.expires_at(asio::steady_timer::time_point::max());
      error_code cancelled;
      co_await asked.wake.async_wait(asio::redirect_error(asio::use_awaitable, cancelled));
    }
    co_return asked.current;
  }

  bool owns(const request& req, std::string_view bucket) const;
  object_attributes attributes_from(const request& req) const;
  // The tags of x-amz-tagging (none when absent), or nullopt with S3's message in `why`.
  static std::optional<std::map<std::string, std::string>> header_tags(const request& req, std::string& why);
  // Whether CopyObject's and UploadPartCopy's x-amz-copy-source-if-* conditions hold for `source`.
  static bool copy_source_allows(const request& req, const object_info& source);
  // Refuses a conditional write early, before its payload moves, when the object already fails
  // `precondition` (the store checks again as it publishes): the error to answer, if any.
  asio::awaitable<std::optional<s3::errc>> early_precondition_failure(const request& req,
                                                                      const write_precondition& precondition);
  void object_headers(http::fields& fields, const object_info& info, bool with_checksums) const;

  beast::tcp_stream& lowest() { return beast::get_lowest_layer(stream_); }
  // Whether the peer runs on this host: a loopback address, or the address it reached us at
  // (peer_ has IPv4-mapped IPv6 as IPv4 already). Asked once per connection.
  bool peer_on_this_host() {
    if (!peer_on_this_host_) {
      error_code ignored;
      auto local = lowest().socket().local_endpoint(ignored).address();
      if (local.is_v6() && local.to_v6().is_v4_mapped())
        local = asio::ip::make_address_v4(asio::ip::v4_mapped, local.to_v6());
      peer_on_this_host_ = peer_.is_loopback() || peer_ == local;
    }
    return *peer_on_this_host_;
  }
  // Sends `length` bytes from `position` of the file `fd` to the peer with sendfile(2), which
  // hands the file's pages to TCP instead of copying them into the socket's buffer: the plain-HTTP
  // body of an object the store keeps in a file. A peer that takes nothing for read_timeout ends it.
  asio::awaitable<error_code> send_file(int fd, std::uint64_t position, std::uint64_t length);

  std::shared_ptr<server_state<Store>> state_;
  Stream stream_;
  beast::flat_buffer buffer_;
  // Request bodies are received into this, allocated at the connection's first body and reused
  // by every later one (fresh memory costs a page fault per 4 KiB on first touch).
  static constexpr std::size_t body_buffer_bytes = 256 * kib;
  std::unique_ptr<std::byte[]> body_buffer_;
  asio::ip::address peer_;  // counted in state_->per_address while the connection lives
  std::optional<bool> peer_on_this_host_;
};

/// RFC 9112 §6.1 on a request's Transfer-Encoding (every field of that name, in order): null
/// when the request may go on (no such field, or exactly "chunked"); otherwise the error to
/// answer before any byte of the body is read, after which the connection closes (the body's
/// end cannot be known, so whatever follows must not be read as the next request):
/// Content-Length as well → 400; a final coding other than chunked, chunked twice, or an empty
/// list → 400; a coding this server does not decode before the final chunked → 501.
inline std::optional<s3::errc> transfer_encoding_problem(const http::request_header<>& msg) {
  auto [first, last] = msg.equal_range(http::field::transfer_encoding);
  if (first == last) return std::nullopt;
  if (msg.find(http::field::content_length) != msg.end()) return s3::errc::invalid_request;
  std::vector<std::string> codings;
  for (auto it = first; it != last; ++it) {
    std::string_view value(it->value().data(), it->value().size());
    while (!value.empty()) {
      const auto comma = value.find(',');
      std::string_view item = value.substr(0, comma);
      while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
      while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
      std::string lower(item);
      std::transform(lower.begin(), lower.end(), lower.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      if (!lower.empty()) codings.push_back(std::move(lower));
      if (comma == std::string_view::npos) break;
      value.remove_prefix(comma + 1);
    }
  }
  if (codings.empty() || codings.back() != "chunked") return s3::errc::invalid_request;
  for (std::size_t i = 0; i + 1 < codings.size(); ++i) {
    if (codings[i] == "chunked") return s3::errc::invalid_request;  // chunked applied twice
  }
  if (codings.size() > 1) return s3::errc::not_implemented;  // gzip, deflate, ... are not decoded here
  return std::nullopt;
}

}  // namespace sluice::s3::detail

namespace sluice::s3::detail {

template <class Store, class Stream>
asio::awaitable<void> connection<Store, Stream>::run() {
  {
    std::lock_guard lock(state_->mutex);
    state_->closers[this] = [weak = this->weak_from_this()] {
      if (auto self = weak.lock()) {
        asio::post(self->stream_.get_executor(), [self] {
          error_code ignored;
          self->lowest().socket().close(ignored);
        });
      }
    };
  }
  bool open = true;
  if constexpr (tls) {
    error_code ec;
    lowest().expires_after(state_->config.read_timeout);
    co_await stream_.async_handshake(asio::ssl::stream_base::server, asio::redirect_error(asio::use_awaitable, ec));
    open = !ec;  // not TLS, an old protocol, a stall: dropped without an answer
  }
  while (open) {  // NOLINT(bugprone-infinite-loop): every way out of the loop is a break
    header_parser parser;
    parser.header_limit(static_cast<std::uint32_t>(state_->config.max_header_bytes));
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    error_code ec;
    if (buffer_.size() == 0) {
      // Between requests the connection may idle for idle_timeout; from the request's first byte
      // its header section has read_timeout to arrive.
      lowest().expires_after(state_->config.idle_timeout);
      const std::size_t n =
          co_await stream_.async_read_some(buffer_.prepare(4096), asio::redirect_error(asio::use_awaitable, ec));
      buffer_.commit(n);
      if (ec) break;  // closed, reset or idle: nothing to answer
    }
    lowest().expires_after(state_->config.read_timeout);
    co_await http::async_read_header(stream_, buffer_, parser, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == http::error::header_limit) {
        request req{&parser};
        req.id = state_->next_request_id();
        req.keep_alive = false;
        req.error = "RequestHeaderSectionTooLarge";
        string_response res{http::status::bad_request, 11};
        res.set(http::field::content_type, "application/xml");
        res.body() =
            xml::error_body("RequestHeaderSectionTooLarge", "Your request header section is too large.", "", req.id);
        co_await send(req, std::move(res));
      } else if (ec != http::error::end_of_stream && ec != beast::error::timeout && ec != asio::error::eof &&
                 ec != asio::error::operation_aborted && ec != asio::error::connection_reset) {
        request req{&parser};
        req.id = state_->next_request_id();
        req.keep_alive = false;
        co_await send_error(req, s3::errc::invalid_request, "malformed HTTP request");
      }
      break;
    }
    lowest().expires_after(state_->config.read_timeout);
    const bool keep = co_await handle(parser);
    if (!keep || state_->stopping) break;
  }
  error_code ignored;
  if constexpr (tls) {  // close_notify, best effort: a peer that is gone or stalls does not hold us
    if (open) lowest().expires_after(std::chrono::seconds(2));
    if (open) co_await stream_.async_shutdown(asio::redirect_error(asio::use_awaitable, ignored));
  }
  lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
  lowest().close();
  {
    std::lock_guard lock(state_->mutex);
    state_->closers.erase(this);
  }
  {
    std::lock_guard lock(state_->address_mutex);
    if (auto it = state_->per_address.find(peer_); it != state_->per_address.end() && --it->second == 0) {
      state_->per_address.erase(it);
    }
  }
  state_->connections.fetch_sub(1);
}

template <class Store, class Stream>
asio::awaitable<bool> connection<Store, Stream>::handle(header_parser& parser) {
  request req{&parser};
  const record_on_exit recorded{this, &req};
  req.id = state_->next_request_id();
  req.fields = parser.get().base();
  const auto& msg = req.msg();
  req.head = msg.method() == http::verb::head;
  req.keep_alive = parser.get().keep_alive();
  req.body_pending = !parser.is_done();
  if (const auto problem = transfer_encoding_problem(msg)) {
    req.keep_alive = false;  // the body's end is unknown: nothing after this header is a request
    co_return co_await send_error(req, *problem,
                                  *problem == s3::errc::not_implemented
                                      ? "A Transfer-Encoding other than chunked is not supported."
                                      : "Transfer-Encoding must end in chunked, once, without Content-Length.");
  }

  const std::string_view method(msg.method_string().data(), msg.method_string().size());
  const std::string_view target(msg.target().data(), msg.target().size());
  error_code ec;
  req.where = parse_route(method, target, req.header("Host"), state_->config.virtual_host_suffixes,
                          msg.find("x-amz-copy-source") != msg.end(), ec);
  if (ec) co_return co_await send_error(req, to_s3(ec));

  // Authentication: a SigV4 header or presigned query, SigV2 (header or query) unless switched
  // off, or anonymous when configured.
  request_view view{method, target, {}};
  for (const auto& field : msg) {
    view.headers.emplace_back(std::string_view(field.name_string().data(), field.name_string().size()),
                              std::string_view(field.value().data(), field.value().size()));
  }
  const bool signed_v2 = sigv2::claims(view);
  const bool signed_request = signed_v2 || msg.find(http::field::authorization) != msg.end() ||
                              req.where.param("X-Amz-Signature") || req.where.param("X-Amz-Credential");
  if (!signed_request) {
    if (!state_->config.allow_anonymous) co_return co_await send_error(req, s3::errc::access_denied, "Access Denied");
    req.user = state_->config.users.empty() ? std::string("anonymous") : state_->config.users.front().access_key_id;
  } else if (signed_v2) {
    if (!state_->config.sigv2) {
      co_return co_await send_error(req, s3::errc::access_denied,
                                    "AWS Signature Version 2 is disabled on this server; sign with AWS4-HMAC-SHA256.");
    }
    const auto secret_for = [this](std::string_view key) { return state_->secret_for(key); };
    // The bucket is in the canonical resource even when only the Host header names it.
    const std::string_view host_bucket = req.where.virtual_host ? std::string_view(req.where.bucket) : "";
    std::string why;
    verified v = sigv2::verify(view, host_bucket, secret_for, std::chrono::system_clock::now(), ec, &why);
    if (ec) co_return co_await send_error(req, to_s3(ec), why);
    req.user = v.access_key_id;
    req.auth = std::move(v);
  } else {
    const auto secret_for = [this](std::string_view key) { return state_->secret_for(key); };
    std::optional<std::string_view> region;
    if (state_->config.region) region = *state_->config.region;
    std::string why;
    verified v = verify(view, secret_for, std::chrono::system_clock::now(), region, ec, &why);
    if (ec) co_return co_await send_error(req, to_s3(ec), why);
    req.user = v.access_key_id;
    req.auth = std::move(v);
  }

  // Ownership: every bucket-level operation but CreateBucket needs the caller to own the bucket.
  if (!req.where.bucket.empty() && req.where.op != operation::create_bucket &&
      req.where.op != operation::not_implemented && !owns(req, req.where.bucket)) {
    co_return co_await send_error(req, s3::errc::access_denied, "Access Denied");
  }
  // A new object's key must be text a plain (XML) listing can carry.
  if ((req.where.op == operation::put_object || req.where.op == operation::copy_object ||
       req.where.op == operation::create_multipart_upload) &&
      !is_xml_safe_utf8(req.where.key)) {
    co_return co_await send_error(req, s3::errc::invalid_argument,
                                  "Object keys must be UTF-8 without control characters other than tab, newline "
                                  "and carriage return (XML 1.0 cannot carry them).");
  }
  co_return co_await dispatch(req);
}

template <class Store, class Stream>
void connection<Store, Stream>::record(request& req, unsigned status, std::uint64_t bytes_sent) {
  if (req.recorded) return;
  req.recorded = true;
  const auto duration =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - req.start);
  server_metrics& metrics = state_->metrics;
  metrics.record(req.where.op, status, req.error, duration);
  metrics.add_bytes(byte_direction::out, byte_path::http, bytes_sent);
  metrics.add_bytes(byte_direction::in, byte_path::http, req.bytes_received);
  if (req.bytes_direct > 0) {
    metrics.add_bytes(req.where.op == operation::get_object ? byte_direction::out : byte_direction::in,
                      req.direct_path.starts_with("grant:") ? byte_path::grant : byte_path::rdma, req.bytes_direct);
  }
  if (req.decline && req.rdma_reply == "501") metrics.rdma_declined(*req.decline);
  access_log* log = state_->log.get();
  if (log == nullptr) return;
  error_code ignored;
  const std::string remote = peer_.to_string(ignored);
  const std::string_view method(req.fields.method_string().data(), req.fields.method_string().size());
  const std::string_view path = !req.direct_path.empty()                   ? std::string_view(req.direct_path)
                                : bytes_sent > 0 || req.bytes_received > 0 ? std::string_view("http")
                                                                           : std::string_view("none");
  // Empty before authentication succeeded: the line says "-".
  const std::string_view user = req.auth           ? std::string_view(req.user)
                                : req.user.empty() ? std::string_view()
                                                   : std::string_view("anonymous");
  access_record line;
  line.time = req.time;
  line.remote = remote;
  line.user = user;
  line.method = method;
  line.bucket = req.where.bucket;
  line.key = req.where.key;
  line.operation = operation_name(req.where.op);
  line.status = status;
  line.error = req.error;
  line.bytes_sent = bytes_sent;
  line.bytes_received = req.bytes_received;
  line.bytes_direct = req.bytes_direct;
  line.path = path;
  line.duration_us = static_cast<std::uint64_t>(duration.count());
  line.request_id = req.id;
  log->write(format_access_line(line, log->format()));
}

template <class Store, class Stream>
bool connection<Store, Stream>::owns(const request& req, std::string_view bucket) const {
  std::lock_guard lock(state_->mutex);
  auto it = state_->owners.find(bucket);
  return it == state_->owners.end() || it->second == req.user;  // unknown bucket: the store answers NoSuchBucket
}

template <class Store, class Stream>
asio::awaitable<bool> connection<Store, Stream>::dispatch(request& req) {
  switch (req.where.op) {
    case operation::list_buckets: co_return co_await list_buckets(req);
    case operation::create_bucket: co_return co_await create_bucket(req);
    case operation::head_bucket:
    case operation::delete_bucket:
    case operation::get_bucket_location:
    case operation::get_bucket_versioning: co_return co_await bucket_only(req);
    case operation::list_objects_v1:
    case operation::list_objects_v2:
    case operation::list_object_versions: co_return co_await list_objects(req);
    case operation::delete_objects: co_return co_await delete_objects(req);
    case operation::put_object: co_return co_await put_object(req);
    case operation::copy_object: co_return co_await copy_object(req);
    case operation::get_object:
    case operation::head_object: co_return co_await get_object(req);
    case operation::delete_object: co_return co_await delete_object(req);
    case operation::list_multipart_uploads:
    case operation::create_multipart_upload:
    case operation::upload_part:
    case operation::complete_multipart_upload:
    case operation::abort_multipart_upload:
    case operation::list_parts: co_return co_await multipart(req);
    case operation::upload_part_copy: co_return co_await upload_part_copy(req);
    case operation::get_object_tagging:
    case operation::put_object_tagging:
    case operation::delete_object_tagging: co_return co_await object_tagging(req);
    case operation::not_implemented: break;
  }
  co_return co_await send_error(req, s3::errc::not_implemented,
                                "A header or query you provided implies functionality that is not implemented.");
}

// ---------------------------------------------------------------------------------------------
// Responses

template <class Store, class Stream>
void connection<Store, Stream>::common_headers(request& req, http::fields& fields) {
  fields.set(http::field::server, "sluice");
  fields.set("x-amz-request-id", req.id);
  fields.set(http::field::date, xml::http_date(std::chrono::system_clock::now()));
  if (!req.rdma_reply.empty()) fields.set("x-amz-rdma-reply", req.rdma_reply);
}

template <class Store, class Stream>
asio::awaitable<bool> connection<Store, Stream>::send(request& req, string_response res) {
  common_headers(req, res.base());
  // A request whose body was not read leaves bytes on the wire: close after answering.
  const bool keep = req.keep_alive && !req.body_pending && !state_->stopping;
  res.keep_alive(keep);
  if (req.head) {
    const auto length = res.body().size();
    res.body().clear();
    res.content_length(length);
    http::response_serializer<http::string_body> sr(res);
    sr.split(true);
    error_code ec;
    co_await http::async_write_header(stream_, sr, asio::redirect_error(asio::use_awaitable, ec));
    record(req, res.result_int(), 0);
    co_return !ec && keep;
  }
  res.prepare_payload();
  error_code ec;
  co_await http::async_write(stream_, res, asio::redirect_error(asio::use_awaitable, ec));
  record(req, res.result_int(), ec ? 0 : res.body().size());
  co_return !ec && keep;
}

template <class Store, class Stream>
asio::awaitable<bool> connection<Store, Stream>::send_xml(request& req, std::string body, http::status status) {
  string_response res{status, 11};
  res.set(http::field::content_type, "application/xml");
  res.body() = std::move(body);
  co_return co_await send(req, std::move(res));
}

template <class Store, class Stream>
asio::awaitable<bool> connection<Store, Stream>::send_empty(request& req, http::status status) {
  string_response res{status, 11};
  co_return co_await send(req, std::move(res));
}

template <class Store, class Stream>
asio::awaitable<bool> connection<Store, Stream>::send_error(request& req, s3::errc code, std::string message) {
  const unsigned status = http_status(code);
  req.error = status == 304 ? std::string_view() : code_string(code);
  string_response res{static_cast<http::status>(status), 11};
  if (status == 304) co_return co_await send(req, std::move(res));  // 304 carries no body
  res.set(http::field::content_type, "application/xml");
  // Say what is wrong: S3's general message when the caller has nothing more specific (an
  // error_code's message() is only its code).
  if (message.empty() || message == code_string(code)) message = std::string(default_message(code));
  res.body() = xml::error_body(code_string(code), message, req.resource(), req.id);
  co_return co_await send(req, std::move(res));
}

// ---------------------------------------------------------------------------------------------
// Bodies

template <class Store, class Stream>
asio::awaitable<bool> connection<Store, Stream>::continue_if_expected(request& req) {
  if (!iequals(req.header("Expect"), "100-continue")) co_return true;
  http::response<http::empty_body> res{http::status::continue_, 11};
  error_code ec;
  co_await http::async_write(stream_, res, asio::redirect_error(asio::use_awaitable, ec));
  co_return !ec;
}

template <class Store, class Stream>
asio::awaitable<std::optional<std::string>> connection<Store, Stream>::read_small_body(request& req,
                                                                                       std::size_t limit) {
  if (!req.body_pending) co_return std::string();
  const auto length = req.parser->content_length();
  if (length && *length > limit) co_return std::nullopt;
  if (!co_await continue_if_expected(req)) co_return std::nullopt;
  http::request_parser<http::string_body> body_parser(std::move(*req.parser));
  body_parser.body_limit(limit);
  error_code ec;
  co_await http::async_read(stream_, buffer_, body_parser, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return std::nullopt;
  req.body_pending = false;
  std::string body = std::move(body_parser.get().body());
  req.bytes_received += body.size();
  // Signed payloads must hash to what was signed; Content-MD5, when sent, must match.
  if (req.auth && req.auth->payload_hash.size() == 64 &&
      !constant_time_equal(sha256_hex(body), req.auth->payload_hash)) {
    co_return std::nullopt;
  }
  if (auto md5 = req.header("Content-MD5"); !md5.empty()) {
    digest d(digest_kind::md5);
    d.update(std::string_view(body));
    if (base64_encode(d.finish()) != md5) co_return std::nullopt;
  }
  co_return body;
}

template <class Store, class Stream>
object_attributes connection<Store, Stream>::attributes_from(const request& req) const {
  object_attributes a;
  a.content_type = std::string(req.header("Content-Type"));
  // aws-chunked is transfer framing, not part of the object's encoding: it is dropped wherever
  // it stands in the list ("gzip, aws-chunked" stores "gzip").
  std::string_view codings = req.header("Content-Encoding");
  while (!codings.empty()) {
    const auto comma = codings.find(',');
    std::string_view one = codings.substr(0, comma);
    while (!one.empty() && (one.front() == ' ' || one.front() == '\t')) one.remove_prefix(1);
    while (!one.empty() && (one.back() == ' ' || one.back() == '\t')) one.remove_suffix(1);
    if (!one.empty() && !iequals(one, "aws-chunked")) {
      if (!a.content_encoding.empty()) a.content_encoding += ", ";
      a.content_encoding += one;
    }
    if (comma == std::string_view::npos) break;
    codings.remove_prefix(comma + 1);
  }
  a.content_disposition = std::string(req.header("Content-Disposition"));
  a.cache_control = std::string(req.header("Cache-Control"));
  a.content_language = std::string(req.header("Content-Language"));
  a.expires = std::string(req.header("Expires"));
  std::string ignored;
  if (auto tags = header_tags(req, ignored)) a.tags = std::move(*tags);  // checked before the body was read
  for (const auto& field : req.msg()) {
    std::string name(field.name_string().data(), field.name_string().size());
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (name.starts_with("x-amz-meta-"))
      a.metadata[name.substr(11)] = std::string(field.value().data(), field.value().size());
  }
  return a;
}

template <class Store, class Stream>
std::optional<std::map<std::string, std::string>> connection<Store, Stream>::header_tags(const request& req,
                                                                                         std::string& why) {
  const auto it = req.msg().find("x-amz-tagging");
  if (it == req.msg().end()) return std::map<std::string, std::string>();
  auto pairs = parse_tagging_header(std::string_view(it->value().data(), it->value().size()));
  if (!pairs) {
    why =
        "The header 'x-amz-tagging' shall be encoded as UTF-8 then URLEncoded URL query parameters without tag "
        "name duplicates.";
    return std::nullopt;
  }
  return checked_tags(*pairs, why);
}

template <class Store, class Stream>
bool connection<Store, Stream>::copy_source_allows(const request& req, const object_info& source) {
  const auto if_match = req.header("x-amz-copy-source-if-match");
  const auto if_none_match = req.header("x-amz-copy-source-if-none-match");
  const auto modified = std::chrono::time_point_cast<std::chrono::seconds>(source.last_modified);
  if (!if_match.empty() && !etag_list_matches(if_match, source.attributes.etag)) return false;
  if (!if_none_match.empty() && etag_list_matches(if_none_match, source.attributes.etag)) return false;
  // As S3: a matching If-Match overrides If-Unmodified-Since, a failing If-None-Match decides alone.
  if (if_match.empty()) {
    const auto t = xml::parse_http_date(req.header("x-amz-copy-source-if-unmodified-since"));
    if (t && modified > *t) return false;
  }
  if (if_none_match.empty()) {
    const auto t = xml::parse_http_date(req.header("x-amz-copy-source-if-modified-since"));
    if (t && modified <= *t) return false;
  }
  return true;
}

template <class Store, class Stream>
asio::awaitable<std::optional<s3::errc>> connection<Store, Stream>::early_precondition_failure(
    const request& req, const write_precondition& precondition) {
  if (precondition.none()) co_return std::nullopt;
  error_code ec;
  const object_info current = co_await store_call([&] {
    return state_->store->head({req.where.bucket, req.where.key}, ec);
  });
  if (ec && ec != sluice::errc::no_such_object) co_return to_s3(ec);
  if (ec && precondition.if_etag) co_return s3::errc::no_such_key;  // If-Match of a missing object: 404, as S3
  if (!precondition.met_by(ec ? nullptr : &current.attributes.etag)) co_return s3::errc::precondition_failed;
  co_return std::nullopt;
}

/// What a conditional write that S3 does not do is told.
inline constexpr std::string_view unsupported_condition =
    "Conditional writes take If-None-Match: * or If-Match with one ETag.";

/// A Content-MD5 header that is there with an empty value (req.header() cannot tell it from none).
inline bool has_empty_content_md5(const auto& req) {
  const auto it = req.msg().find("Content-MD5");
  return it != req.msg().end() && it->value().empty();
}

template <class Store, class Stream>
void connection<Store, Stream>::object_headers(http::fields& fields, const object_info& info,
                                               bool with_checksums) const {
  fields.set(http::field::etag, "\"" + info.attributes.etag + "\"");
  fields.set(http::field::last_modified, xml::http_date(info.last_modified));
  fields.set(http::field::content_type,
             info.attributes.content_type.empty() ? "binary/octet-stream" : info.attributes.content_type);
  fields.set(http::field::accept_ranges, "bytes");
  if (!info.attributes.content_encoding.empty())
    fields.set(http::field::content_encoding, info.attributes.content_encoding);
  if (!info.attributes.content_disposition.empty())
    fields.set(http::field::content_disposition, info.attributes.content_disposition);
  if (!info.attributes.cache_control.empty()) fields.set(http::field::cache_control, info.attributes.cache_control);
  if (!info.attributes.content_language.empty())
    fields.set(http::field::content_language, info.attributes.content_language);
  if (!info.attributes.expires.empty()) fields.set(http::field::expires, info.attributes.expires);
  if (!info.attributes.tags.empty()) fields.set("x-amz-tagging-count", std::to_string(info.attributes.tags.size()));
  for (const auto& [name, value] : info.attributes.metadata) fields.set("x-amz-meta-" + name, value);
  if (with_checksums) {
    for (const auto& [algorithm, value] : info.attributes.checksums) fields.set("x-amz-checksum-" + algorithm, value);
  }
}

/// Streams the request body into `writer`: decodes aws-chunked framing, verifies the signed
/// payload hash, Content-MD5 and any x-amz-checksum-* (header or trailer). Returns the attributes
/// to publish (ETag and checksums filled in), or nullopt after answering the error itself
/// (the writer is then dropped by the caller: nothing is published).
template <class Store, class Stream>
template <class Writer>
asio::awaitable<std::optional<object_attributes>> connection<Store, Stream>::receive_object(request& req,
                                                                                            Writer& writer,
                                                                                            std::uint64_t limit) {
  const std::string payload_hash = req.auth ? req.auth->payload_hash : std::string("UNSIGNED-PAYLOAD");
  const bool chunked = payload_hash.starts_with("STREAMING-");
  std::uint64_t expected = 0;
  if (chunked) {
    const auto decoded = req.header("x-amz-decoded-content-length");
    if (decoded.empty() ||
        std::from_chars(decoded.data(), decoded.data() + decoded.size(), expected).ec != std::errc{}) {
      co_await send_error(req, s3::errc::missing_content_length);
      co_return std::nullopt;
    }
  } else if (auto length = req.parser->content_length()) {
    expected = *length;
  } else if (req.body_pending) {
    co_await send_error(req, s3::errc::missing_content_length);
    co_return std::nullopt;
  }
  if (expected > limit) {
    co_await send_error(req, s3::errc::entity_too_large);
    co_return std::nullopt;
  }
  payload_digests digests;
  if (has_empty_content_md5(req)) {  // present but empty: S3 answers InvalidDigest, not "no digest"
    co_await send_error(req, s3::errc::invalid_digest);
    co_return std::nullopt;
  }
  if (const auto problem = digests.start(req.header("Content-MD5"), payload_hash,
                                         [&req](std::string_view name) { return req.header(name); })) {
    co_await send_error(req, problem->code, problem->message);
    co_return std::nullopt;
  }
  std::optional<checksum_algorithm> trailer;
  if (auto t = req.header("x-amz-trailer"); !t.empty()) {
    trailer = checksum_algorithm_of_header(t);
    if (trailer) digests.expect_trailer(*trailer);
  }

  error_code store_error;
  std::uint64_t received = 0;
  auto on_payload = [&](std::span<const std::byte> data) {
    received += data.size();
    req.bytes_received += data.size();
    if (store_error || received > expected) return;
    digests.update(data);
    writer.write(data, store_error);
  };

  std::optional<aws_chunked_decoder> decoder;
  if (chunked) {
    aws_chunked_decoder::options opt;
    opt.mode = parse_payload_mode(payload_hash).value_or(payload_mode::streaming_signed);
    if (req.auth) {
      opt.signing_key = req.auth->key;
      opt.amz_date = req.auth->amz_date;
      opt.scope = req.auth->scope;
      opt.seed_signature = req.auth->seed_signature;
    }
    opt.decoded_length = expected;
    opt.trailer_checksum = trailer;
    decoder.emplace(std::move(opt));
  }

  if (!co_await continue_if_expected(req)) co_return std::nullopt;
  // Feeds received body bytes through the aws-chunked decoder (when there is one) to on_payload;
  // false after answering a framing error.
  const auto feed = [&](std::span<const std::byte> got, error_code& decode_error) {
    if (!decoder) {
      on_payload(got);
      return true;
    }
    decoder->feed(got, on_payload, decode_error);
    return !decode_error;
  };
  if (req.body_pending && req.parser->content_length()) {
    // A Content-Length body is read straight from the socket into the connection's reused
    // buffer, in reads as large as the kernel has ready (up to body_buffer_bytes): no copy
    // through the parser's buffer and one composed operation per read, not per 64 KiB. What
    // arrived with the header is taken from buffer_ first.
    std::uint64_t left = *req.parser->content_length();
    const std::size_t early = static_cast<std::size_t>(std::min<std::uint64_t>(buffer_.size(), left));
    error_code decode_error;
    if (early > 0) {
      const bool fed = feed(std::span(static_cast<const std::byte*>(buffer_.data().data()), early), decode_error);
      buffer_.consume(early);
      left -= early;
      if (!fed) {
        req.body_pending = left > 0;
        co_await send_error(req, to_s3(decode_error), decode_error.message());
        co_return std::nullopt;
      }
    }
    if (!body_buffer_) body_buffer_ = std::make_unique_for_overwrite<std::byte[]>(body_buffer_bytes);
    while (left > 0) {
      error_code ec;
      lowest().expires_after(state_->config.read_timeout);
      const std::size_t n = co_await stream_.async_read_some(
          asio::buffer(body_buffer_.get(), static_cast<std::size_t>(std::min<std::uint64_t>(body_buffer_bytes, left))),
          asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return std::nullopt;  // the client went away or stalled past the read timeout
      left -= n;
      if (!feed(std::span<const std::byte>(body_buffer_.get(), n), decode_error)) {
        req.body_pending = left > 0;
        co_await send_error(req, to_s3(decode_error), decode_error.message());
        co_return std::nullopt;
      }
    }
    req.body_pending = false;
  } else if (req.body_pending) {  // chunked transfer coding: Beast's parser takes the framing off
    http::request_parser<http::buffer_body> body_parser(std::move(*req.parser));
    if (!body_buffer_) body_buffer_ = std::make_unique_for_overwrite<std::byte[]>(body_buffer_bytes);
    error_code ec;
    while (!body_parser.is_done()) {
      body_parser.get().body().data = body_buffer_.get();
      body_parser.get().body().size = body_buffer_bytes;
      co_await http::async_read(stream_, buffer_, body_parser, asio::redirect_error(asio::use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) co_return std::nullopt;  // the client went away or stalled past the read timeout
      const std::size_t n = body_buffer_bytes - body_parser.get().body().size;
      error_code decode_error;
      if (!feed(std::span<const std::byte>(body_buffer_.get(), n), decode_error)) {
        req.body_pending = !body_parser.is_done();
        co_await send_error(req, to_s3(decode_error), decode_error.message());
        co_return std::nullopt;
      }
      lowest().expires_after(state_->config.read_timeout);
    }
    req.body_pending = false;
  }

  if (store_error) {
    co_await send_error(req, to_s3(store_error));
    co_return std::nullopt;
  }
  if (decoder) {
    error_code incomplete;
    decoder->finish(incomplete);
    if (incomplete) {
      co_await send_error(req, to_s3(incomplete), incomplete.message());
      co_return std::nullopt;
    }
  }
  if (received != expected) {
    co_await send_error(req, s3::errc::incomplete_body, "the body is shorter or longer than announced");
    co_return std::nullopt;
  }
  object_attributes attributes = attributes_from(req);
  const std::map<std::string, std::string>* trailers = decoder ? &decoder->trailers() : nullptr;
  if (const auto problem = digests.finish(attributes, trailers)) {
    co_await send_error(req, problem->code, problem->message);
    co_return std::nullopt;
  }
  co_return attributes;
}

template <class Store, class Stream>
typename connection<Store, Stream>::token_verdict connection<Store, Stream>::check_token(request& req, rdma_op op,
                                                                                         std::uint64_t length,
                                                                                         rdma_token& token,
                                                                                         std::string& why) {
  if (!state_->config.rdma) {
    req.decline = rdma_decline_reason::no_plane;
    return token_verdict::decline;
  }
  // The token is a grant to write into (or read from) the client's memory: only a token that the
  // credential holder signed is used, or anyone who saw one could aim the server at that memory.
  const bool signed_token = req.auth && std::find(req.auth->signed_headers.begin(), req.auth->signed_headers.end(),
                                                  "x-amz-rdma-token") != req.auth->signed_headers.end();
  if (!signed_token) {
    why = "the x-amz-rdma-token header is not signed";
    return token_verdict::reject;
  }
  error_code ec;
  token = decode_rdma_token(req.header("x-amz-rdma-token"), ec);
  if (ec) {
    why = "malformed x-amz-rdma-token";
    return token_verdict::reject;
  }
  const auto now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch());
  check_rdma_token(token, op, length, static_cast<std::uint64_t>(now.count()), ec);
  if (ec) {
    why = token.op != op                  ? "the token grants the wrong operation"
          : token.total_length() < length ? "the token's segments are shorter than the transfer"
                                          : "the token has expired";
    return token_verdict::reject;
  }
  if (!state_->config.rdma->serves(token.provider)) {
    req.decline = rdma_decline_reason::provider;
    return token_verdict::decline;
  }
  if (state_->config.rdma_same_host_only) {
    error_code peer_error;
    const auto peer = lowest().socket().remote_endpoint(peer_error);
    const auto self = lowest().socket().local_endpoint(peer_error);
    // A same-host grant (local:*) is only for a client on this host: loopback, or our own address.
    const bool local_grant = token.provider.starts_with("local:");
    const bool on_host = local_grant ? peer.address().is_loopback() || peer.address() == self.address()
                                     : token_names_host(token, peer.address());
    if (peer_error || !on_host) {
      why = "the token's endpoint is not on the host the request came from";
      return token_verdict::reject;
    }
  }
  return token_verdict::accept;
}

template <class Store, class Stream>
template <class Writer>
asio::awaitable<std::optional<object_attributes>> connection<Store, Stream>::receive_via_rdma(request& req,
                                                                                              Writer& writer,
                                                                                              std::uint64_t limit) {
  // The payload's size travels in x-amz-decoded-content-length; the request has no body.
  std::uint64_t expected = 0;
  const auto decoded = req.header("x-amz-decoded-content-length");
  if (decoded.empty() || std::from_chars(decoded.data(), decoded.data() + decoded.size(), expected).ec != std::errc{}) {
    co_await send_error(req, s3::errc::missing_content_length,
                        "a PUT with x-amz-rdma-token needs x-amz-decoded-content-length");
    co_return std::nullopt;
  }
  if (const auto length = req.parser->content_length(); (length && *length != 0) || (!length && req.body_pending)) {
    co_await send_error(req, s3::errc::invalid_request, "a PUT with x-amz-rdma-token carries no body");
    co_return std::nullopt;
  }
  if (expected > limit) {
    co_await send_error(req, s3::errc::entity_too_large);
    co_return std::nullopt;
  }
  rdma_token token;
  std::string why;
  switch (check_token(req, rdma_op::read, expected, token, why)) {
    case token_verdict::reject: co_await send_error(req, s3::errc::invalid_rdma_token, why); co_return std::nullopt;
    case token_verdict::decline:
      req.rdma_reply = "501";
      co_await send_error(req, s3::errc::rdma_not_supported);
      co_return std::nullopt;
    case token_verdict::accept: break;
  }
  payload_digests digests;
  // Without Content-MD5 (a PUT from device memory cannot hash its bytes on the host) the
  // server does not compute one either: a CRC32C is kept and the ETag is opaque.
  if (has_empty_content_md5(req)) {  // present but empty: S3 answers InvalidDigest
    co_await send_error(req, s3::errc::invalid_digest);
    co_return std::nullopt;
  }
  if (req.header("Content-MD5").empty()) digests.skip_md5();
  // The request's own x-amz-content-sha256 covers its empty body, not the payload.
  if (const auto problem =
          digests.start(req.header("Content-MD5"), {}, [&req](std::string_view name) { return req.header(name); })) {
    co_await send_error(req, problem->code, problem->message);
    co_return std::nullopt;
  }
  error_code store_error;
  const error_code moved = co_await offload_to(state_->rdma, [&] {
    return state_->config.rdma->read(requester(req), token, expected, [&](std::span<const std::byte> data) {
      digests.update(data);
      writer.write(data, store_error);
      return store_error;
    });
  });
  if (moved) {
    // The store failed (a full disk, an I/O error): that is the answer, not a decline, even when
    // the plane stopped before its first byte moved.
    // Any other failure carries its own status in x-amz-rdma-reply: the client must not take it
    // for the decline of a server that ignores tokens (an answer without the header).
    const s3::errc code = store_error ? to_s3(store_error) : to_s3(moved);
    req.rdma_reply = moved == s3::errc::rdma_not_supported && !store_error ? "501" : std::to_string(http_status(code));
    if (req.rdma_reply == "501") req.decline = rdma_decline_reason::plane;
    co_await send_error(req, code);
    co_return std::nullopt;
  }
  object_attributes attributes = attributes_from(req);
  if (const auto problem = digests.finish(attributes, nullptr)) {
    co_await send_error(req, problem->code, problem->message);
    co_return std::nullopt;
  }
  req.rdma_reply = "200";
  req.bytes_direct = expected;
  req.direct_path = direct_path_of(token.provider);
  co_return attributes;
}

}  // namespace sluice::s3::detail

namespace sluice::s3::detail {

// ---------------------------------------------------------------------------------------------
// Operations

template <class Store, class Stream>
asio::awaitable<bool> connection<Store, Stream>::list_buckets(request& req) {
  error_code ec;
  std::vector<bucket_info> all = co_await store_call([&] { return state_->store->list_buckets(ec); });
  if (ec) co_return co_await send_error(req, to_s3(ec));
  std::vector<bucket_info> mine;
  for (auto& b : all) {
    if (owns(req, b.name)) mine.push_back(std::move(b));
  }
  co_return co_await send_xml(req, xml::list_buckets(req.user, req.user, mine));
}

template <class Store, class Stream>
asio::awaitable<bool> connection<Store, Stream>::create_bucket(request& req) {
  auto body = co_await read_small_body(req, 64 * kib);
  if (!body) co_return co_await send_error(req, s3::errc::malformed_xml);
  error_code ec;
  (void)xml::parse_create_bucket_configuration(*body, ec);  // any region is accepted
  if (ec) co_return co_await send_error(req, s3::errc::malformed_xml);
  // A store that can keep the owner with the bucket (fs_store) does, so it survives a restart.
  (void)co_await store_call([&] {
    if constexpr (requires { state_->store->create_bucket(req.where.bucket, req.user, ec); }) {
      state_->store->create_bucket(req.where.bucket, req.user, ec);
    } else {
      state_->store->create_bucket(req.where.bucket, ec);
    }
    return 0;
  });
  // Creating a bucket you own again: 200 in us-east-1 (S3's legacy behaviour there, which
  // clients rely on), 409 BucketAlreadyOwnedByYou in other regions.
  const bool legacy_region = state_->config.region.value_or("us-east-1") == "us-east-1";
  if (ec == sluice::errc::bucket_exists && owns(req, req.where.bucket) && legacy_region) ec = {};
  if (ec == sluice::errc::bucket_exists) {
    co_return co_await send_error(
        req, owns(req, req.where.bucket) ? s3::errc::bucket_already_owned_by_you : s3::errc::bucket_already_exists);
  }
  if (ec) co_return co_await send_error(req, to_s3(ec, true));
  {
    std::lock_guard lock(state_->mutex);
    state_->owners[req.where.bucket] = req.user;
  }
  string_response res{http::status::ok, 11};
  res.set(http::field::location, "/" + req.where.bucket);
  co_return co_await send(req, std::move(res));
}

template <class Store, class Stream>
asio::awaitable<bool> connection<Store, Stream>::bucket_only(request& req) {
  error_code ec;
  if (req.where.op == operation::delete_bucket) {
    // S3 aborts a bucket's incomplete multipart uploads with it (`aws s3 rb --force` deletes the
    // objects and leaves those); a bucket that still holds an object stays, 409 BucketNotEmpty,
    // with its uploads. An upload started while this runs keeps the bucket too (the store
    // refuses), and an object PUT meanwhile keeps it with its earlier uploads aborted.
    co_await offload([&] {
      const list_result objects = state_->store->list(list_request{req.where.bucket, {}, {}, 1}, ec);
      if (!ec && !objects.objects.empty()) ec = sluice::errc::bucket_not_empty;
      std::vector<upload_info> uploads;
      if (!ec) uploads = state_->store->list_uploads(req.where.bucket, {}, ec);
      for (const upload_info& upload : uploads) {
        error_code abort_error;
        state_->store->abort_upload({req.where.bucket, upload.key}, upload.upload_id, abort_error);
        if (abort_error && abort_error != sluice::errc::no_such_upload) {  // completed or aborted meanwhile: gone
          ec = abort_error;
          break;
        }
      }
      if (!ec) state_->store->remove_bucket(req.where.bucket, ec);
      return 0;
    });
    if (ec) co_return co_await send_error(req, to_s3(ec, true));
    {
      std::lock_guard lock(state_->mutex);
      state_->owners.erase(req.where.bucket);
    }
    co_return co_await send_empty(req, http::status::no_content);
  }
  (void)co_await store_call([&] { return state_->store->list(list_request{req.where.bucket, {}, {}, 1}, ec); });
  if (ec) co_return co_await send_error(req, to_s3(ec, true));
  const std::string region = state_->config.region.value_or("us-east-1");
  if (req.where.op == operation::get_bucket_location) {
    co_return co_await send_xml(req, xml::location_constraint(region));
  }
  if (req.where.op == operation::get_bucket_versioning) {
    // Never enabled: S3 answers an empty configuration (no Status) for such a bucket.
    co_return co_await send_xml(req,
                                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                                "<VersioningConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"/>");
  }
  string_response res{http::status::ok, 11};
  res.set("x-amz-bucket-region", region);
  co_return co_await send(req, std::move(res));
}

template <class Store, class Stream>
asio::awaitable<bool> connection<Store, Stream>::list_objects(request& req) {
  const route& r = req.where;
  const bool v2 = r.op == operation::list_objects_v2;
  const bool versions = r.op == operation::list_object_versions;
  xml::list_page page;
  page.bucket = r.bucket;
  page.prefix = std::string(r.param("prefix").value_or(""));
  page.delimiter = std::string(r.param("delimiter").value_or(""));
  page.url_encode = r.param("encoding-type") == std::optional<std::string_view>("url");
  page.owner_id = req.user;
  page.owner_name = req.user;
  page.fetch_owner = r.param("fetch-owner") == std::optional<std::string_view>("true");
  if (auto mk = r.param("max-keys")) {
    std::uint32_t n = 0;
    if (std::from_chars(mk->data(), mk->data() + mk->size(), n).ec != std::errc{}) {
      co_return co_await send_error(req, s3::errc::invalid_argument, "max-keys must be a non-negative integer");
    }
    page.max_keys = std::min<std::uint32_t>(n, 1000);
  }
  std::string cursor;  // list keys strictly after this one
  if (v2) {
    page.start_after = std::string(r.param("start-after").value_or(""));
    cursor = page.start_after;
    if (auto token = r.param("continuation-token")) {
      page.has_continuation_token = true;
      page.continuation_token = std::string(*token);
      auto decoded = base64_decode(*token);
      if (!decoded) co_return co_await send_error(req, s3::errc::invalid_argument, "invalid continuation token");
      cursor.assign(reinterpret_cast<const char*>(decoded->data()), decoded->size());
    }
  } else {
    page.marker = std::string(r.param(versions ? "key-marker" : "marker").value_or(""));
    cursor = page.marker;
  }

  // Walk the store's key-ordered pages, folding keys that share prefix + ... + delimiter into one
  // common prefix; keys and common prefixes together count against max-keys.
  error_code ec;
  // The last key or common prefix returned; starts at the cursor so a page that resumes after a
  // common prefix does not return that prefix again.
  std::string last = cursor;
  bool done = false;
  while (!done && page.max_keys > 0) {
    list_result batch = co_await store_call([&] {
      return state_->store->list(list_request{r.bucket, page.prefix, cursor, 1000}, ec);
    });
    if (ec) co_return co_await send_error(req, to_s3(ec, true));
    for (auto& info : batch.objects) {
      cursor = info.key;
      std::string common;
      if (!page.delimiter.empty()) {
        const auto pos = info.key.find(page.delimiter, page.prefix.size());
        if (pos != std::string::npos) common = info.key.substr(0, pos + page.delimiter.size());
      }
      if (!common.empty() && !page.common_prefixes.empty() && page.common_prefixes.back() == common) continue;
      if (!common.empty() && common <= last) continue;  // resumed inside a common prefix already returned
      if (page.contents.size() + page.common_prefixes.size() == page.max_keys) {
        page.truncated = true;
        done = true;
        break;
      }
      if (common.empty()) {
        last = info.key;
        page.contents.push_back(std::move(info));
      } else {
        last = common;
        page.common_prefixes.push_back(std::move(common));
      }
    }
    if (!batch.truncated) done = true;
  }
  if (page.truncated) {
    if (v2) {
      page.next_continuation_token = base64_encode(std::as_bytes(std::span(last)));
    } else if (versions || !page.delimiter.empty()) {
      page.next_marker = last;
    }
  }
  if (v2) co_return co_await send_xml(req, xml::list_objects_v2(page));
  if (versions) co_return co_await send_xml(req, xml::list_object_versions(page));
  co_return co_await send_xml(req, xml::list_objects_v1(page));
}

template <class Store, class Stream>
asio::awaitable<bool> connection<Store, Stream>::delete_objects(request& req) {
  auto body = co_await read_small_body(req, 2 * mib);
  if (!body) co_return co_await send_error(req, s3::errc::bad_digest, "the body does not match its digest");
  error_code ec;
  const xml::delete_objects what = xml::parse_delete_objects(*body, ec);
  if (ec) co_return co_await send_error(req, s3::errc::malformed_xml);
  std::vector<std::string> deleted;
  std::vector<xml::delete_outcome> errors;
  (void)co_await store_call([&] {
    for (const auto& object : what.objects) {
      state_->store->remove({req.where.bucket, object.first}, ec);
      if (!ec || ec == sluice::errc::no_such_object) {
        deleted.push_back(object.first);  // S3: deleting a missing key succeeds
      } else {
        const auto code = to_s3(ec);
        errors.push_back({object.first, std::string(code_string(code)), ec.message()});
      }
    }
    return 0;
  });
  co_return co_await send_xml(req, xml::delete_result(deleted, errors, what.quiet));
}

template <class Store, class Stream>
asio::awaitable<bool> connection<Store, Stream>::put_object(request& req) {
  std::string why;
  if (!header_tags(req, why)) co_return co_await send_error(req, s3::errc::invalid_tag, why);
  const auto precondition = write_precondition_of(req.header("If-Match"), req.header("If-None-Match"));
  if (!precondition) co_return co_await send_error(req, s3::errc::not_implemented, std::string(unsupported_condition));
  if (const auto failure = co_await early_precondition_failure(req, *precondition)) {
    co_return co_await send_error(req, *failure);
  }
  error_code ec;
  auto writer = state_->store->begin_put({req.where.bucket, req.where.key}, ec);
  if (ec) co_return co_await send_error(req, to_s3(ec));
  if constexpr (requires { writer.require(*precondition); }) writer.require(*precondition);
  auto attributes = co_await receive_payload(req, writer, state_->config.max_object_bytes);
  if (!attributes) co_return false;  // answered (or the connection is gone); nothing published
  const object_info info = co_await offload([&] { return writer.commit(*attributes, ec); });
  if (ec) co_return co_await send_error(req, to_s3(ec));
  string_response res{http::status::ok, 11};
  res.set(http::field::etag, "\"" + info.attributes.etag + "\"");
  for (const auto& [algorithm, value] : info.attributes.checksums) {
    if (!req.header("x-amz-checksum-" + algorithm).empty() ||
        req.header("x-amz-trailer") == "x-amz-checksum-" + algorithm) {
      res.set("x-amz-checksum-" + algorithm, value);
    }
  }
  co_return co_await send(req, std::move(res));
}

template <class Store, class Stream>
asio::awaitable<bool> connection<Store, Stream>::copy_object(request& req) {
  const auto from = parse_copy_source(req.header("x-amz-copy-source"));
  if (!from) co_return co_await send_error(req, s3::errc::invalid_argument, "invalid x-amz-copy-source");
  if (!owns(req, from->bucket)) co_return co_await send_error(req, s3::errc::access_denied);
  const bool replace = iequals(req.header("x-amz-metadata-directive"), "REPLACE");
  const bool replace_tags = iequals(req.header("x-amz-tagging-directive"), "REPLACE");
  if (from->bucket == req.where.bucket && from->key == req.where.key && !replace && !replace_tags) {
    co_return co_await send_error(req, s3::errc::invalid_request,
                                  "This copy request is illegal because it is trying to copy an object to itself "
                                  "without changing the object's metadata, storage class, website redirect location "
                                  "or encryption attributes.");
  }
  std::string why;
  const auto tags = header_tags(req, why);
  if (!tags) co_return co_await send_error(req, s3::errc::invalid_tag, why);
  error_code ec;
  auto mapping = co_await store_call([&] { return state_->store->map(*from, ec); });
  if (ec) co_return co_await send_error(req, to_s3(ec));
  if (!copy_source_allows(req, mapping.info())) co_return co_await send_error(req, s3::errc::precondition_failed);
  auto writer = state_->store->begin_put({req.where.bucket, req.where.key}, ec);
  if (ec) co_return co_await send_error(req, to_s3(ec));
  object_attributes attributes = replace ? attributes_from(req) : mapping.info().attributes;
  attributes.tags = replace_tags ? *tags : mapping.info().attributes.tags;
  attributes.part_sizes.clear();  // the copy is one piece, with the MD5 of its bytes as ETag
  attributes.upload_id.clear();
  attributes.checksums = mapping.info().attributes.checksums;  // the bytes are the same
  const object_info info = co_await offload([&] {
    const region bytes = mapping.region();
    digest md5(digest_kind::md5);
    write_from(writer, bytes.bytes(), bytes.size, &md5, ec);
    attributes.etag = to_hex(md5.finish());
    return ec ? object_info{} : writer.commit(attributes, ec);
  });
  if (ec) co_return co_await send_error(req, to_s3(ec));
  co_return co_await send_xml(req, xml::copy_object_result(info.attributes.etag, info.last_modified));
}

template <class Store, class Stream>
asio::awaitable<bool> connection<Store, Stream>::get_object(request& req, bool speculate) {
  error_code ec;
  // A store that revalidates its copies against an upstream (a gateway) may send its copy (cached,
  // or a fetch under way) while it asks the upstream whether that copy is current:
  // - into an RDMA or grant token's memory: the answer waits for both, and a copy that is not
  //   current is read again through map(), which writes the client's memory again before any
  //   answer;
  // - as an HTTP body, only for a GET with If-Match (what every part of a parallel download after
  //   the first carries): the body's last slice waits for the upstream's answer, and a copy that
  //   is not current ends the answer short (the connection closes), so no whole answer is made
  //   from it. Its version then fails the client's If-Match, as a confirmed answer would have.
  // Only for a GET whose answer depends on nothing but the copy's ETag and size, which the upstream
  // confirms: no partNumber (the part layout), no If-Modified-Since or If-Unmodified-Since
  // (Last-Modified). Any answer other than the transfer's success is made by the retry, from a
  // confirmed version (`unless_unconfirmed`).
  const object_ref object{req.where.bucket, req.where.key};
  bool unconfirmed = false;
  std::shared_ptr<confirmation> asked;  // the upstream's answer for an unconfirmed copy
  if constexpr (requires { state_->store->map_unconfirmed(object); }) {
    speculate = speculate && !req.head &&
                (!req.header("x-amz-rdma-token").empty() || !req.header("If-Match").empty()) &&
                !req.where.param("partNumber") && req.header("If-Modified-Since").empty() &&
                req.header("If-Unmodified-Since").empty();
  } else {
    speculate = false;
  }
  const auto retry = [&]() -> asio::awaitable<bool> {
    req.rdma_reply.clear();
    req.decline = {};
    return get_object(req, false);
  };
  // `answer()`, or the retry when the copy it would be made from is not confirmed.
  const auto unless_unconfirmed = [&](auto answer) -> asio::awaitable<bool> {
    return unconfirmed ? retry() : answer();
  };
  // A HEAD needs the version's info only: a store that can tell it without the bytes (a gateway,
  // which would otherwise fetch the object from its upstream) is asked for that alone.
  // A ranged GET of a store that can map part of an object (a gateway fetches only the range of
  // an uncached object) is asked for that part; the mapping's base() says where it starts.
  // A store that can answer before it has all the bytes (a gateway's miss, map_streaming) is
  // asked so; the bytes are then awaited (mapping.wait_until) before they are sent.
  using mapping_t = std::remove_cvref_t<decltype(state_->store->map(object, ec))>;
  std::optional<mapping_t> mapped;
  if constexpr (requires { state_->store->map_unconfirmed(object); }) {
    // In place, as a local store's map(): it asks nobody.
    if (speculate) mapped = state_->store->map_unconfirmed(object);
    unconfirmed = mapped.has_value();
  }
  if (!mapped) {
    mapped = co_await store_call([&] {
      if constexpr (requires { state_->store->describe(object_ref{}, ec); }) {
        if (req.head) return state_->store->describe({req.where.bucket, req.where.key}, ec);
      }
      if constexpr (requires { state_->store->map_range(object_ref{}, std::string_view{}, ec); }) {
        if (!req.header("Range").empty() && !req.where.param("partNumber")) {
          return state_->store->map_range({req.where.bucket, req.where.key}, req.header("Range"), ec);
        }
      }
      if constexpr (requires { state_->store->map_streaming(object_ref{}, ec); }) {
        if (!req.head) return state_->store->map_streaming({req.where.bucket, req.where.key}, ec);
      }
      return state_->store->map({req.where.bucket, req.where.key}, ec);
    });
  }
  if (ec) co_return co_await send_error(req, to_s3(ec));
  // Shared: an RDMA write still in flight when its transfer gives up (a peer that vanished) keeps
  // this version of the object mapped until libfabric completes it.
  const auto mapping_owner = std::make_shared<const mapping_t>(std::move(*mapped));
  const auto& mapping = *mapping_owner;
  if constexpr (requires { state_->store->confirm(object, mapping); }) {
    if (unconfirmed) asked = co_await start_confirmation(object, mapping_owner);
  }
  const object_info& info = mapping.info();
  const auto last_modified = std::chrono::time_point_cast<std::chrono::seconds>(info.last_modified);

  // Preconditions, in the order RFC 7232 section 6 gives.
  auto etag_matches = [&](std::string_view list) { return etag_list_matches(list, info.attributes.etag); };
  const auto if_match = req.header("If-Match");
  const auto if_none_match = req.header("If-None-Match");
  if (!if_match.empty() && !etag_matches(if_match)) {
    co_return co_await unless_unconfirmed([&] { return send_error(req, s3::errc::precondition_failed); });
  }
  if (if_match.empty()) {
    if (auto t = xml::parse_http_date(req.header("If-Unmodified-Since")); t && last_modified > *t) {
      co_return co_await send_error(req, s3::errc::precondition_failed);
    }
  }
  // 304 Not Modified carries the ETag and Last-Modified the client's cache compares (RFC 9110).
  const auto not_modified = [&] {
    string_response res{http::status::not_modified, 11};
    res.set(http::field::etag, "\"" + info.attributes.etag + "\"");
    res.set(http::field::last_modified, xml::http_date(info.last_modified));
    return res;
  };
  if (!if_none_match.empty() && etag_matches(if_none_match)) {
    co_return co_await unless_unconfirmed([&] { return send(req, not_modified()); });
  }
  if (if_none_match.empty()) {
    if (auto t = xml::parse_http_date(req.header("If-Modified-Since")); t && last_modified <= *t) {
      co_return co_await send(req, not_modified());
    }
  }

  // response-* overrides of the answer's headers: signed requests only, as on S3, and only values
  // that are safe to send as a header (they come percent-decoded from the query).
  static constexpr std::array<std::pair<std::string_view, http::field>, 6> overrides = {{
      {"response-content-type", http::field::content_type},
      {"response-content-language", http::field::content_language},
      {"response-expires", http::field::expires},
      {"response-cache-control", http::field::cache_control},
      {"response-content-disposition", http::field::content_disposition},
      {"response-content-encoding", http::field::content_encoding},
  }};
  std::vector<std::pair<http::field, std::string_view>> overridden;
  for (const auto& [name, field] : overrides) {
    const auto value = req.where.param(name);
    if (!value) continue;
    if (!req.auth) {
      co_return co_await unless_unconfirmed([&] {
        return send_error(req, s3::errc::invalid_request,
                          "Request specific response headers cannot be used for anonymous GET requests.");
      });
    }
    if (!is_safe_header_value(*value)) {
      const std::string why = "The " + std::string(name) + " value holds a character a header cannot carry.";
      co_return co_await unless_unconfirmed([&] { return send_error(req, s3::errc::invalid_argument, why); });
    }
    overridden.emplace_back(field, *value);
  }

  const std::uint64_t size = info.size;
  range_result range = parse_range(req.header("Range"), size);
  // ?partNumber=N: that part of a multipart object (206, with x-amz-mp-parts-count), or the
  // whole of any other object as its part 1.
  std::optional<std::size_t> parts_count;
  if (const auto part_param = req.where.param("partNumber")) {
    const auto number = parse_part_number(*part_param);
    if (!number) {
      co_return co_await send_error(req, s3::errc::invalid_argument,
                                    "Part number must be an integer between 1 and 10000");
    }
    if (!req.header("Range").empty()) {
      co_return co_await send_error(req, s3::errc::invalid_request,
                                    "Cannot specify both Range header and partNumber query parameter");
    }
    const auto& sizes = info.attributes.part_sizes;
    if (*number > std::max<std::size_t>(sizes.size(), 1)) {
      co_return co_await send_error(req, s3::errc::invalid_part, "The requested partnumber is not satisfiable");
    }
    range = {};
    if (!sizes.empty()) {
      parts_count = sizes.size();
      std::uint64_t first = 0;
      for (std::uint32_t i = 1; i < *number; ++i) first += sizes[i - 1];
      const std::uint64_t length = sizes[*number - 1];
      if (first > size || length > size - first) co_return co_await send_error(req, s3::errc::internal_error);
      if (length > 0) range = {true, true, first, length};
    }
  }
  // What every successful answer carries beside the object's headers.
  const auto answer_headers = [&](http::fields& fields, std::uint64_t first, std::uint64_t length) {
    object_headers(fields, info, !range.present && iequals(req.header("x-amz-checksum-mode"), "ENABLED"));
    if (range.present) {
      fields.set(http::field::content_range, "bytes " + std::to_string(first) + "-" +
                                                 std::to_string(first + length - 1) + "/" + std::to_string(size));
    }
    if (parts_count) fields.set("x-amz-mp-parts-count", std::to_string(*parts_count));
    for (const auto& [field, value] : overridden) fields.set(field, beast::string_view(value.data(), value.size()));
  };
  if (range.present && !range.satisfiable) {
    if (unconfirmed) co_return co_await retry();
    string_response res{http::status::range_not_satisfiable, 11};
    res.set(http::field::content_range, "bytes */" + std::to_string(size));
    res.set(http::field::content_type, "application/xml");
    req.error = "InvalidRange";
    res.body() = xml::error_body("InvalidRange", "The requested range is not satisfiable", req.resource(), req.id);
    co_return co_await send(req, std::move(res));
  }
  const std::uint64_t offset = range.present ? range.offset : 0;
  const std::uint64_t length = range.present ? range.length : size;
  // Where the mapping's region starts in the object (0 but for a part mapped by map_range), and
  // a check that it holds [offset, offset + length).
  std::uint64_t base = 0;
  if constexpr (requires { mapping.base(); }) base = mapping.base();
  if (!req.head &&
      (offset < base || offset - base > mapping.region().size || length > mapping.region().size - (offset - base))) {
    co_return co_await unless_unconfirmed([&] { return send_error(req, s3::errc::internal_error); });
  }

  // A mapping still being filled (a gateway's miss): bytes [0, end) of its region are awaited
  // off the network threads. The RDMA and grant paths wait for the whole range; the HTTP body for
  // its first slice before the answer's headers (so a fetch that fails early still answers with an
  // error), then slice by slice.
  constexpr std::uint64_t slice = 4 * mib;
  constexpr bool growing = requires { mapping.wait_until(std::uint64_t{}, ec); };
  if constexpr (growing) {
    const std::uint64_t first = req.header("x-amz-rdma-token").empty() ? std::min(length, slice) : length;
    const std::uint64_t end = offset - base + first;
    if (!req.head) {
      co_await await_bytes(mapping, end, ec);
      // A fetch joined before the upstream was asked (map_unconfirmed) that failed (its version
      // replaced during it, say): the retry asks, and answers from what the upstream holds.
      if (ec) co_return co_await unless_unconfirmed([&] { return send_error(req, to_s3(ec)); });
    }
  }

  // With a token, the bytes go by RDMA into the client's memory and the answer has no body;
  // a declined token gets the body over HTTP, marked x-amz-rdma-reply: 501.
  if (!req.head && !req.header("x-amz-rdma-token").empty()) {
    rdma_token token;
    std::string why;
    const token_verdict verdict = check_token(req, rdma_op::write, length, token, why);
    if (unconfirmed && verdict != token_verdict::accept) co_return co_await retry();
    if (verdict == token_verdict::reject) co_return co_await send_error(req, s3::errc::invalid_rdma_token, why);
    req.rdma_reply = "501";
    if (verdict == token_verdict::accept) {
      // Straight from the store's mapping of the object: no staging copy.
      rdma_source source{mapping.region(), offset - base, length, mapping_owner, version_of(mapping)};
      if constexpr (requires { mapping.data_offset(); }) {
        source.file = mapping.native_handle();
        source.file_offset = mapping.data_offset();
      }
      const error_code moved = co_await offload_to(
          state_->rdma, [&] { return state_->config.rdma->write_from(requester(req), token, source); });
      if (asked) {  // the upstream's HEAD, asked while the bytes moved
        if (!co_await confirmed(*asked)) co_return co_await retry();
        unconfirmed = false;
        asked.reset();
      }
      if (!moved) {
        string_response res{range.present ? http::status::partial_content : http::status::ok, 11};
        answer_headers(res.base(), offset, length);
        req.rdma_reply = range.present ? "206" : "200";
        req.bytes_direct = length;
        req.direct_path = direct_path_of(token.provider);
        res.set("x-amz-rdma-bytes-transferred", std::to_string(length));
        co_return co_await send(req, std::move(res));
      }
      if (moved == s3::errc::invalid_rdma_token) {  // memory the requester was not granted
        req.rdma_reply.clear();
        co_return co_await send_error(req, s3::errc::invalid_rdma_token,
                                      "the token names memory not granted to this user");
      }
      if (moved != s3::errc::rdma_not_supported) {
        req.rdma_reply.clear();  // not a decline: the transfer failed
        co_return co_await send_error(req, to_s3(moved));
      }
      req.decline = rdma_decline_reason::plane;
    }
  }

  // An unconfirmed copy as an HTTP body (If-Match): retried from a confirmed version if the upstream
  // already said no, or if the body is one slice (its headers wait for the answer, so that no
  // answer is cut short for nothing). The body goes before the answer only when If-Match names
  // the copy's ETag alone: then another version fails it. `*` or a list may hold that version too,
  // which must get a whole answer.
  if (asked && (asked->done || length <= slice || req.header("If-Match") != "\"" + info.attributes.etag + "\"")) {
    if (!co_await confirmed(*asked)) co_return co_await retry();
    unconfirmed = false;
    asked.reset();
  }
  http::response<http::buffer_body> res{range.present ? http::status::partial_content : http::status::ok, 11};
  common_headers(req, res.base());
  answer_headers(res.base(), offset, length);
  res.content_length(length);
  const bool keep = req.keep_alive && !req.body_pending && !state_->stopping;
  res.keep_alive(keep);
  res.body().data = nullptr;
  res.body().more = !req.head && length > 0;
  http::response_serializer<http::buffer_body> sr(res);
  co_await http::async_write_header(stream_, sr, asio::redirect_error(asio::use_awaitable, ec));
  const unsigned status = res.result_int();
  if (ec || req.head || length == 0) {
    record(req, status, 0);
    co_return !ec && keep;
  }

  // The body straight from the store's mapping, in slices (no copy in user space). Over plain
  // HTTP, from the store's file by sendfile(2) when it has one: no copy into the socket either.
  const region bytes = mapping.region();
  int file = -1;
  std::uint64_t file_offset = 0;
  if constexpr (!tls && requires { mapping.data_offset(); }) {
    const http_sendfile when = state_->config.sendfile;
    if (when == http_sendfile::always || (when == http_sendfile::remote && !peer_on_this_host())) {
      file = mapping.native_handle();
      file_offset = mapping.data_offset() + (offset - base);
    }
  }
  std::uint64_t written = 0;  // acknowledged by the socket
  for (std::uint64_t sent = 0; sent < length;) {
    const std::uint64_t n = std::min(slice, length - sent);
    if constexpr (growing) {
      co_await await_bytes(mapping, offset - base + sent + n, ec);
      if (ec) {  // the fetch failed with the answer under way: the body ends short, the connection closes
        record(req, status, written);
        co_return false;
      }
    }
    if (asked && sent + n == length) {  // the last slice goes only from a version the upstream confirms
      if (!co_await confirmed(*asked)) {
        record(req, status, written);
        co_return false;  // the body ends short: the connection closes
      }
      asked.reset();
    }
    if (file >= 0) {
      ec = co_await send_file(file, file_offset + sent, n);
      if (ec) {
        record(req, status, written);
        co_return false;
      }
      written = sent += n;
      continue;
    }
    res.body().data = bytes.bytes() + (offset - base) + sent;
    res.body().size = static_cast<std::size_t>(n);
    sent += n;
    res.body().more = sent < length;
    lowest().expires_after(state_->config.read_timeout);
    co_await http::async_write(stream_, sr, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      record(req, status, written);
      co_return false;
    }
    written = sent;
  }
  if (file < 0 && !sr.is_done()) {
    res.body().data = nullptr;
    res.body().more = false;
    co_await http::async_write(stream_, sr, asio::redirect_error(asio::use_awaitable, ec));
  }
  record(req, status, written);
  co_return !ec && keep;
}

template <class Store, class Stream>
asio::awaitable<error_code> connection<Store, Stream>::send_file(int fd, std::uint64_t position, std::uint64_t length) {
  tcp::socket& socket = lowest().socket();
  error_code ec;
  socket.native_non_blocking(true, ec);
  if (ec) co_return ec;
  // Waits for room in the socket's buffer are bounded by a timer that cancels the wait; `waiting`
  // keeps a timer that fires as the wait ends from cancelling a later operation.
  asio::steady_timer deadline(stream_.get_executor());
  auto waiting = std::make_shared<bool>(false);
  while (length > 0) {
    auto at = static_cast<off_t>(position);
    const ssize_t n =
        sendfile_nosignal(socket.native_handle(), fd, &at, static_cast<std::size_t>(std::min(length, gib)));
    if (n > 0) {
      position += static_cast<std::uint64_t>(n);
      length -= static_cast<std::uint64_t>(n);
      continue;
    }
    if (n == 0) co_return make_error_code(sluice::errc::protocol_violation);  // the file is shorter than its object
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) co_return error_code(errno, boost::system::system_category());
    *waiting = true;
    deadline.expires_after(state_->config.read_timeout);
    deadline.async_wait([self = this->shared_from_this(), waiting](error_code e) {
      if (!e && *waiting) {
        error_code ignored;
        self->lowest().socket().cancel(ignored);
      }
    });
    co_await socket.async_wait(tcp::socket::wait_write, asio::redirect_error(asio::use_awaitable, ec));
    *waiting = false;
    deadline.cancel();
    if (ec) co_return ec;
  }
  co_return error_code{};
}

template <class Store, class Stream>
asio::awaitable<bool> connection<Store, Stream>::delete_object(request& req) {
  error_code ec;
  (void)co_await store_call([&] {
    state_->store->remove({req.where.bucket, req.where.key}, ec);
    return 0;
  });
  if (ec && ec != sluice::errc::no_such_object) co_return co_await send_error(req, to_s3(ec));
  co_return co_await send_empty(req, http::status::no_content);
}

template <class Store, class Stream>
asio::awaitable<bool> connection<Store, Stream>::multipart(request& req) {
  const route& r = req.where;
  const object_ref object{r.bucket, r.key};
  const std::string upload_id(r.param("uploadId").value_or(""));
  error_code ec;
  switch (r.op) {
    case operation::create_multipart_upload: {
      std::string why;
      if (!header_tags(req, why)) co_return co_await send_error(req, s3::errc::invalid_tag, why);
      const std::string id =
          co_await store_call([&] { return state_->store->create_upload(object, attributes_from(req), ec); });
      if (ec) co_return co_await send_error(req, to_s3(ec));
      co_return co_await send_xml(req, xml::initiate_multipart_upload(r.bucket, r.key, id));
    }
    case operation::upload_part: {
      const auto number = parse_part_number(r.param("partNumber").value_or(""));
      if (!number) {
        co_return co_await send_error(req, s3::errc::invalid_argument,
                                      "Part number must be an integer between 1 and 10000");
      }
      auto writer = state_->store->begin_part(object, upload_id, *number, ec);
      if (ec) co_return co_await send_error(req, to_s3(ec));
      auto attributes = co_await receive_payload(req, writer, state_->config.max_object_bytes);
      if (!attributes) co_return false;
      const object_info info = co_await offload([&] { return writer.commit(*attributes, ec); });
      if (ec) co_return co_await send_error(req, to_s3(ec));
      string_response res{http::status::ok, 11};
      res.set(http::field::etag, "\"" + info.attributes.etag + "\"");
      for (const auto& [algorithm, value] : info.attributes.checksums) res.set("x-amz-checksum-" + algorithm, value);
      co_return co_await send(req, std::move(res));
    }
    case operation::complete_multipart_upload: {
      const auto precondition = write_precondition_of(req.header("If-Match"), req.header("If-None-Match"));
      if (!precondition) {
        co_return co_await send_error(req, s3::errc::not_implemented, std::string(unsupported_condition));
      }
      auto body = co_await read_small_body(req, 4 * mib);
      if (!body) co_return co_await send_error(req, s3::errc::malformed_xml);
      const auto chosen = xml::parse_complete_multipart_upload(*body, ec);
      if (ec) co_return co_await send_error(req, to_s3(ec));
      // A client's retry of a completion that succeeded (its answer was lost): the object that
      // upload made is still there, so the answer is the same.
      const auto completed_before = [&]() -> std::optional<object_info> {
        error_code head_error;
        object_info current = state_->store->head(object, head_error);
        if (head_error || current.attributes.upload_id != upload_id) return std::nullopt;
        return current;
      };
      const auto completed = [&](const object_info& info) {
        return send_xml(
            req, xml::complete_multipart_upload("/" + r.bucket + "/" + r.key, r.bucket, r.key, info.attributes.etag));
      };
      const std::vector<part_info> uploaded = state_->store->list_parts(object, upload_id, ec);
      if (ec == sluice::errc::no_such_upload) {
        if (const auto before = co_await store_call(completed_before)) co_return co_await completed(*before);
      }
      if (ec) co_return co_await send_error(req, to_s3(ec));
      if (const auto failure = co_await early_precondition_failure(req, *precondition)) {
        co_return co_await send_error(req, *failure);
      }
      std::vector<part_info> parts;
      digest etags(digest_kind::md5);
      for (std::size_t i = 0; i < chosen.size(); ++i) {
        auto it = std::find_if(uploaded.begin(), uploaded.end(),
                               [&](const part_info& p) { return p.number == chosen[i].number; });
        if (it == uploaded.end() || it->etag != chosen[i].etag)
          co_return co_await send_error(req, s3::errc::invalid_part);
        if (i + 1 < chosen.size() && it->size < state_->config.min_part_bytes) {
          co_return co_await send_error(req, s3::errc::entity_too_small);
        }
        auto binary = std::vector<std::byte>();
        for (std::size_t h = 0; h + 1 < it->etag.size(); h += 2) {
          unsigned v = 0;
          std::from_chars(it->etag.data() + h, it->etag.data() + h + 2, v, 16);
          binary.push_back(static_cast<std::byte>(v));
        }
        etags.update(binary);
        parts.push_back(*it);
      }
      object_attributes attributes;
      for (const auto& u : state_->store->list_uploads(r.bucket, r.key, ec)) {
        if (u.upload_id == upload_id) attributes = u.attributes;
      }
      attributes.etag = to_hex(etags.finish()) + "-" + std::to_string(parts.size());
      attributes.upload_id = upload_id;
      attributes.part_sizes.clear();
      for (const part_info& part : parts) attributes.part_sizes.push_back(part.size);
      const object_info info = co_await offload([&] {
        if constexpr (requires {
                        state_->store->complete_upload(object, upload_id, parts, attributes, ec, *precondition);
                      }) {
          return state_->store->complete_upload(object, upload_id, parts, attributes, ec, *precondition);
        } else {
          return state_->store->complete_upload(object, upload_id, parts, attributes, ec);
        }
      });
      if (ec == sluice::errc::no_such_upload) {  // completed by a retry that raced this one
        if (const auto before = co_await store_call(completed_before)) co_return co_await completed(*before);
      }
      if (ec) co_return co_await send_error(req, to_s3(ec));
      co_return co_await completed(info);
    }
    case operation::abort_multipart_upload: {
      state_->store->abort_upload(object, upload_id, ec);
      if (ec) co_return co_await send_error(req, to_s3(ec));
      co_return co_await send_empty(req, http::status::no_content);
    }
    case operation::list_parts: {
      const auto parts = state_->store->list_parts(object, upload_id, ec);
      if (ec) co_return co_await send_error(req, to_s3(ec));
      co_return co_await send_xml(req, xml::list_parts(r.bucket, r.key, upload_id, parts, 1000, false, 0));
    }
    case operation::list_multipart_uploads: {
      const std::string prefix(r.param("prefix").value_or(""));
      const auto uploads = state_->store->list_uploads(r.bucket, prefix, ec);
      if (ec) co_return co_await send_error(req, to_s3(ec, true));
      co_return co_await send_xml(req, xml::list_multipart_uploads(r.bucket, prefix, uploads));
    }
    default: break;
  }
  co_return co_await send_error(req, s3::errc::not_implemented);
}

template <class Store, class Stream>
asio::awaitable<bool> connection<Store, Stream>::upload_part_copy(request& req) {
  const route& r = req.where;
  const auto number = parse_part_number(r.param("partNumber").value_or(""));
  if (!number) {
    co_return co_await send_error(req, s3::errc::invalid_argument,
                                  "Part number must be an integer between 1 and 10000");
  }
  const auto from = parse_copy_source(req.header("x-amz-copy-source"));
  if (!from) co_return co_await send_error(req, s3::errc::invalid_argument, "invalid x-amz-copy-source");
  if (!owns(req, from->bucket)) co_return co_await send_error(req, s3::errc::access_denied);
  error_code ec;
  // The mapping holds this version of the source for the whole copy: a PUT over it meanwhile
  // cannot tear the part.
  auto mapping = co_await store_call([&] { return state_->store->map(*from, ec); });
  if (ec) co_return co_await send_error(req, to_s3(ec));
  if (!copy_source_allows(req, mapping.info())) co_return co_await send_error(req, s3::errc::precondition_failed);
  std::optional<std::string_view> range_header;
  if (auto it = req.msg().find("x-amz-copy-source-range"); it != req.msg().end()) {
    range_header = std::string_view(it->value().data(), it->value().size());
  }
  const copy_extent extent = parse_copy_source_range(range_header, mapping.info().size);
  if (extent.problem) co_return co_await send_error(req, extent.problem->code, extent.problem->message);
  if (extent.length > state_->config.max_object_bytes) {
    co_return co_await send_error(req, s3::errc::entity_too_large, "A part is larger than the maximum part size.");
  }
  auto writer =
      state_->store->begin_part({r.bucket, r.key}, std::string(r.param("uploadId").value_or("")), *number, ec);
  if (ec) co_return co_await send_error(req, to_s3(ec));
  // As UploadPart would have: the part's ETag is the MD5 of its bytes, so the completed object's
  // "-N" ETag is S3's. The bytes go from the mapping to the writer in slices, never gathered.
  const object_info info = co_await offload([&] {
    object_attributes attributes;
    digest md5(digest_kind::md5);
    write_from(writer, mapping.region().bytes() + extent.offset, extent.length, &md5, ec);
    attributes.etag = to_hex(md5.finish());
    return ec ? object_info{} : writer.commit(attributes, ec);
  });
  if (ec) co_return co_await send_error(req, to_s3(ec));
  co_return co_await send_xml(req, xml::copy_part_result(info.attributes.etag, info.last_modified));
}

template <class Store, class Stream>
asio::awaitable<bool> connection<Store, Stream>::object_tagging(request& req) {
  const object_ref object{req.where.bucket, req.where.key};
  error_code ec;
  if (req.where.op == operation::get_object_tagging) {
    const object_info info = co_await store_call([&] { return state_->store->head(object, ec); });
    if (ec) co_return co_await send_error(req, to_s3(ec));
    co_return co_await send_xml(req, xml::tagging(info.attributes.tags));
  }
  std::map<std::string, std::string> tags;
  if (req.where.op == operation::put_object_tagging) {
    auto body = co_await read_small_body(req, 64 * kib);
    if (!body) co_return co_await send_error(req, s3::errc::malformed_xml);
    auto pairs = xml::parse_tagging(*body, ec);
    if (ec) co_return co_await send_error(req, to_s3(ec));
    std::string why;
    auto checked = checked_tags(pairs, why);
    if (!checked) co_return co_await send_error(req, s3::errc::invalid_tag, why);
    tags = std::move(*checked);
  }
  // Tags live in the object's metadata: the object is written again with the new set (same
  // bytes, ETag and other attributes), published only if it is still the version that was read,
  // so that a PUT meanwhile is never undone. A few tries, then 503 SlowDown.
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto mapping = co_await store_call([&] { return state_->store->map(object, ec); });
    if (ec) co_return co_await send_error(req, to_s3(ec));
    if (mapping.info().attributes.tags == tags) break;  // nothing to change
    auto writer = state_->store->begin_put(object, ec);
    if (ec) co_return co_await send_error(req, to_s3(ec));
    object_attributes attributes = mapping.info().attributes;
    attributes.tags = tags;
    if constexpr (requires { writer.require(write_precondition{}); }) {
      writer.require(write_precondition{false, attributes.etag});
    }
    (void)co_await offload([&] {
      const region bytes = mapping.region();
      write_from(writer, bytes.bytes(), bytes.size, nullptr, ec);
      return ec ? object_info{} : writer.commit(attributes, ec);
    });
    if (ec == sluice::errc::precondition_failed) continue;  // replaced meanwhile: tag the new version
    if (ec) co_return co_await send_error(req, to_s3(ec));
    break;
  }
  if (ec) co_return co_await send_error(req, s3::errc::slow_down, "The object kept changing while it was tagged.");
  co_return co_await send_empty(
      req, req.where.op == operation::put_object_tagging ? http::status::ok : http::status::no_content);
}

}  // namespace sluice::s3::detail

namespace sluice::s3::detail {

/// Writes the access log out every second until the server stops (stop() flushes the rest).
template <class Store>
asio::awaitable<void> flush_access_log(std::shared_ptr<server_state<Store>> state) {
  while (!state->stopping) {
    state->log_flush_timer.expires_after(std::chrono::seconds(1));
    error_code ec;
    co_await state->log_flush_timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    state->log->flush();
  }
}

/// Accepts on `acceptor` until the server stops: HTTPS connections with `with_tls`.
template <class Store, bool with_tls>
asio::awaitable<void> accept_loop(std::shared_ptr<server_state<Store>> state, tcp::acceptor& acceptor) {
  for (;;) {
    error_code accept_error;
    tcp::socket socket = co_await acceptor.async_accept(asio::make_strand(state->io),
                                                        asio::redirect_error(asio::use_awaitable, accept_error));
    if (accept_error) {
      if (state->stopping || accept_error == asio::error::operation_aborted) co_return;
      continue;  // EMFILE and friends: keep serving the connections we have
    }
    if (state->connections.fetch_add(1) >= state->config.max_connections) {
      state->connections.fetch_sub(1);
      error_code ignored;
      socket.close(ignored);  // over the limit: refuse rather than queue without bound
      continue;
    }
    error_code peer_error;
    auto peer = socket.remote_endpoint(peer_error).address();
    if (peer.is_v6() && peer.to_v6().is_v4_mapped()) {
      peer = asio::ip::make_address_v4(asio::ip::v4_mapped, peer.to_v6());
    }
    bool over = false;
    {
      std::lock_guard lock(state->address_mutex);
      auto& count = state->per_address[peer];
      over = count >= state->config.max_connections_per_address;
      if (!over) ++count;
    }
    if (over) {  // one client address holds its share already
      state->connections.fetch_sub(1);
      error_code ignored;
      socket.close(ignored);
      continue;
    }
    // Answers are written header then body: without TCP_NODELAY a small body waits for the
    // client's delayed ACK of the header (40 ms on Linux) on a kept-alive connection.
    error_code ignored_option;
    socket.set_option(tcp::no_delay(true), ignored_option);
    auto executor = socket.get_executor();
    if constexpr (with_tls) {
      using tls_stream = asio::ssl::stream<beast::tcp_stream>;
      auto conn = std::make_shared<detail::connection<Store, tls_stream>>(
          state, tls_stream(beast::tcp_stream(std::move(socket)), *state->tls_context), peer);
      asio::co_spawn(
          executor, [conn]() { return conn->run(); }, asio::detached);
    } else {
      auto conn = std::make_shared<detail::connection<Store, beast::tcp_stream>>(
          state, beast::tcp_stream(std::move(socket)), peer);
      asio::co_spawn(
          executor, [conn]() { return conn->run(); }, asio::detached);
    }
  }
}

}  // namespace sluice::s3::detail

namespace sluice::s3 {

template <servable_store Store>
server<Store>::server(Store& store, server_config config)
    : state_(std::make_shared<detail::server_state<Store>>(store, std::move(config))) {
  if (auto error = state_->config.validate()) throw std::invalid_argument(error->message());
  // Buckets that exist before the server starts belong to the owner the store kept for them
  // (a store with the bucket_owner capability), else to the first user.
  error_code ec;
  for (const auto& b : store.list_buckets(ec)) {
    std::optional<std::string> owner;
    if constexpr (requires { store.bucket_owner(b.name); }) owner = store.bucket_owner(b.name);
    if (!owner && !state_->config.users.empty()) owner = state_->config.users.front().access_key_id;
    if (owner) state_->owners[b.name] = std::move(*owner);
  }
  if (state_->config.access_log.target != access_log_target::off) {
    std::error_code log_error;
    state_->log = std::make_unique<access_log>(state_->config.access_log, log_error);
    if (log_error) {
      throw std::invalid_argument("access log " + state_->config.access_log.path.string() + ": " + log_error.message());
    }
  }
}

template <servable_store Store>
server<Store>::~server() {
  stop();
}

template <servable_store Store>
void server<Store>::listen(error_code& ec) {
  namespace asio = boost::asio;
  using tcp = asio::ip::tcp;
  auto& s = *state_;
  const auto open = [&](tcp::acceptor& acceptor, const std::string& host, std::uint16_t port) {
    const auto address = asio::ip::make_address(host, ec);
    if (ec) return;
    const tcp::endpoint endpoint(address, port);
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  };
  if (s.config.plain_http) open(s.acceptor, s.config.listen_address, s.config.port);
  if (ec) return;
  if (s.config.admin_listen) {
    open(s.admin_acceptor, s.config.admin_listen->listen_address, s.config.admin_listen->port);
    if (ec) {
      error_code ignored;
      s.acceptor.close(ignored);
      return;
    }
  }
  if (s.config.tls) {
    // TLS 1.2 and 1.3 only; the certificate chain and key as PEM files.
    auto& context = s.tls_context.emplace(asio::ssl::context::tls_server);
    context.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                            asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                            asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use,
                        ec);
    if (!ec) context.use_certificate_chain_file(s.config.tls->certificate_chain.string(), ec);
    if (!ec) context.use_private_key_file(s.config.tls->private_key.string(), asio::ssl::context::pem, ec);
    if (!ec) open(s.tls_acceptor, s.config.tls->listen_address, s.config.tls->port);
    if (ec) {
      error_code ignored;
      s.acceptor.close(ignored);
      s.admin_acceptor.close(ignored);
      return;
    }
  }
  if (s.config.plain_http) {
    asio::co_spawn(s.io, detail::accept_loop<Store, false>(state_, s.acceptor), asio::detached);
  }
  if (s.config.tls) {
    asio::co_spawn(s.io, detail::accept_loop<Store, true>(state_, s.tls_acceptor), asio::detached);
  }
  if (s.config.admin_listen) {
    // The route reads the state through a weak pointer: admin connections never keep it alive.
    std::weak_ptr<detail::server_state<Store>> weak = state_;
    asio::co_spawn(s.io,
                   detail::admin_accept_loop(
                       s.admin_acceptor,
                       [weak](std::string_view method, std::string_view target) {
                         auto st = weak.lock();
                         if (!st) return detail::admin_answer{503, "stopping\n"};
                         return detail::admin_route(
                             method, target,
                             [&st] { return st->metrics.render(st->connections.load(), st->config.metrics_sources); },
                             st->ready.load() && !st->stopping.load());
                       }),
                   asio::detached);
  }
  if (s.log) asio::co_spawn(s.io, detail::flush_access_log(state_), asio::detached);
  s.ready = true;
  for (std::size_t i = 0; i < s.config.io_threads; ++i) s.threads.emplace_back([st = state_] { st->io.run(); });
}

template <servable_store Store>
void server<Store>::listen() {
  error_code ec;
  listen(ec);
  sluice::detail::throw_on_error(ec, "sluice s3 server listen");
}

template <servable_store Store>
boost::asio::ip::tcp::endpoint server<Store>::local_endpoint() const {
  error_code ec;
  return state_->acceptor.local_endpoint(ec);
}

template <servable_store Store>
boost::asio::ip::tcp::endpoint server<Store>::tls_endpoint() const {
  error_code ec;
  return state_->tls_acceptor.local_endpoint(ec);
}

template <servable_store Store>
boost::asio::ip::tcp::endpoint server<Store>::admin_endpoint() const {
  error_code ec;
  return state_->admin_acceptor.local_endpoint(ec);
}

template <servable_store Store>
void server<Store>::set_users(std::vector<user> users) {
  for (const auto& u : users) {
    if (u.access_key_id.empty() || u.secret_access_key.empty()) {
      throw std::invalid_argument("every user needs an access key id and a secret");
    }
  }
  auto fresh = std::make_shared<const std::vector<user>>(std::move(users));
  std::lock_guard lock(state_->users_mutex);
  state_->users = std::move(fresh);
}

template <servable_store Store>
void server<Store>::reopen_access_log(error_code& ec) {
  ec = {};
  if (!state_->log) return;
  std::error_code e;
  state_->log->reopen(e);
  if (e) ec = error_code(e.value(), boost::system::generic_category());
}

template <servable_store Store>
void server<Store>::stop() {
  auto& s = *state_;
  if (s.stopping.exchange(true)) return;
  s.ready = false;
  // Transfers to peers that vanished would otherwise hold their threads for operation_timeout.
  if (s.config.rdma) s.config.rdma->close();
  const auto close_all = [](detail::server_state<Store>& state) {
    error_code ignored;
    state.acceptor.close(ignored);
    state.tls_acceptor.close(ignored);
    state.admin_acceptor.close(ignored);
    state.log_flush_timer.cancel();
    std::lock_guard lock(state.mutex);
    for (auto& [connection, close] : state.closers) close();
  };
  if (s.threads.empty()) {
    // Never listening (or listen failed): no thread would run a posted handler, and one holding
    // the state in the state's own io_context would keep it alive for ever.
    close_all(s);
  } else {
    boost::asio::post(s.io, [state = state_, close_all] { close_all(*state); });
  }
  // Give connections a moment to finish their last write, then stop the loop.
  for (auto& t : s.threads) {
    if (t.joinable()) t.join();
  }
  s.threads.clear();
  s.blocking.join();
  s.rdma.join();
  if (s.log) s.log->flush();
}

}  // namespace sluice::s3
