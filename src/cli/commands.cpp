// SPDX-License-Identifier: Apache-2.0
// The client commands of `sluice`: mb, rb, put, get, ls and rm against any S3 endpoint
// (sluice::s3::client), over HTTP or, for get and put, RDMA; --json for get, put and ls.
#include "cli.hpp"

#include <sluice/names.hpp>
#include <sluice/s3/access_log.hpp>
#include <sluice/s3/client.hpp>
#include <sluice/s3/sigv4.hpp>

#ifdef SLUICE_CLI_WITH_FABRIC
#include <sluice/fabric/s3_plane.hpp>
#endif

#include <boost/asio/ssl/error.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sluice::cli {

namespace {

namespace s3 = sluice::s3;

struct s3_url {
  std::string bucket;
  std::string key;  // may be empty
};

bool is_loopback_host(std::string_view host) {
  return host == "localhost" || host.starts_with("127.") || host == "::1" || host == "[::1]";
}

// The host part of http://host[:port][/...] or https://host[:port][/...].
std::string host_of(std::string_view url) {
  if (const auto scheme = url.find("://"); scheme != std::string_view::npos) url.remove_prefix(scheme + 3);
  url = url.substr(0, url.find('/'));
  if (url.starts_with('[')) return std::string(url.substr(0, url.find(']') + 1));
  return std::string(url.substr(0, url.rfind(':')));
}

// What an error means, for a person: the S3 code with a hint, or the system's message.
std::string describe(const sluice::error_code& ec, std::string_view endpoint) {
  if (ec.category() == s3::s3_category()) {
    std::string text = ec.message();
    switch (static_cast<s3::errc>(ec.value())) {
      case s3::errc::no_such_key: text += " (the object does not exist)"; break;
      case s3::errc::no_such_bucket: text += " (the bucket does not exist)"; break;
      case s3::errc::signature_does_not_match: text += " (check the secret key)"; break;
      case s3::errc::invalid_access_key_id: text += " (the server does not know this access key)"; break;
      case s3::errc::access_denied: text += " (not allowed with these credentials)"; break;
      case s3::errc::bucket_not_empty: text += " (delete its objects first)"; break;
      case s3::errc::bucket_already_owned_by_you: text += " (you already own this bucket)"; break;
      case s3::errc::bucket_already_exists: text += " (the name is taken)"; break;
      default: break;
    }
    return text;
  }
  if (ec == boost::asio::error::connection_refused) {
    return ec.message() + " (is an S3 server listening on " + std::string(endpoint) + "?)";
  }
  if (ec.category() == s3::tls_verify_category()) {
    return ec.message() + " (is the server's CA in --ca-bundle, and does its certificate name the host of " +
           std::string(endpoint) + "?)";
  }
  if (ec.category() == boost::asio::error::get_ssl_category()) {
    return "TLS: " + ec.message() + " (is " + std::string(endpoint) + " an HTTPS server?)";
  }
  return ec.message();
}

// A one-line progress bar on stderr, redrawn at most ten times a second; only on a terminal.
class progress_bar {
 public:
  progress_bar(std::string label, bool enabled) : label_(std::move(label)), enabled_(enabled) {}
  progress_bar(const progress_bar&) = delete;
  progress_bar& operator=(const progress_bar&) = delete;
  ~progress_bar() { finish(); }

  void update(std::uint64_t done, std::uint64_t total) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (drawn_ && done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    drawn_ = true;
    const double fraction = total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
    constexpr int width = 30;
    const int filled = static_cast<int>(fraction * width);
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% %s / %s %s/s\x1b[K", label_.c_str(), filled,
                 "##############################", width - filled, "", static_cast<int>(fraction * 100),
                 human(static_cast<double>(done)).c_str(), human(static_cast<double>(total)).c_str(),
                 human(rate).c_str());
    std::fflush(stderr);
  }

  void finish() {
    if (drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }

  static std::string human(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    std::size_t unit = 0;
    while (bytes >= 1024 && unit + 1 < std::size(units)) {
      bytes /= 1024;
      ++unit;
    }
    char text[32];
    std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
    return text;
  }

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
};

std::string format_time(std::chrono::system_clock::time_point t) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm parts{};
  gmtime_r(&seconds, &parts);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &parts);
  return text;
}

std::string base_name(std::string_view path) {
  while (path.size() > 1 && path.ends_with('/')) path.remove_suffix(1);
  const auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

// The local address this host uses to reach `host` (a UDP connect sends nothing), so that the
// fabric endpoint is bound on the interface the server can reach (on a host with several, the
// provider's first choice may be another); empty when unknown.
std::string local_address_towards(std::string host) {
  if (host.starts_with('[') && host.ends_with(']')) host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &found) != 0) return {};
  std::string out;
  for (const addrinfo* a = found; a != nullptr && out.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, static_cast<sockaddr*>(static_cast<void*>(&local)), &length) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      if (local.ss_family == AF_INET) {
        sockaddr_in in{};
        std::memcpy(&in, &local, sizeof in);
        if (::inet_ntop(AF_INET, &in.sin_addr, text, sizeof text) != nullptr) out = text;
      } else if (local.ss_family == AF_INET6) {
        sockaddr_in6 in6{};
        std::memcpy(&in6, &local, sizeof in6);
        if (::inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof text) != nullptr) out = text;
      }
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return out;
}

// "rdma 1073741824 bytes in 128 requests, http 0 bytes"
std::string describe_paths(const s3::transfer_report& r) {
  std::string text = "rdma " + std::to_string(r.rdma_bytes) + " bytes in " + std::to_string(r.rdma_requests) +
                     " requests, http " + std::to_string(r.http_bytes) + " bytes in " +
                     std::to_string(r.http_requests) + " requests";
  if (r.declined > 0) text += ", " + std::to_string(r.declined) + " declined by the server";
  return text;
}

// ISO 8601 in UTC, as S3 writes times: 2024-05-01T12:00:00.000Z.
std::string iso_time(std::chrono::system_clock::time_point t) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(t - std::chrono::system_clock::from_time_t(seconds))
          .count();
  std::tm parts{};
  gmtime_r(&seconds, &parts);
  char text[40];
  const std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &parts);
  std::snprintf(text + n, sizeof text - n, ".%03dZ", static_cast<int>(millis));
  return text;
}

// One JSON object on one line (--json), member by member.
class json_line {
 public:
  json_line& text(std::string_view name, std::string_view value) {
    member(name);
    s3::append_json_string(out_, value);
    return *this;
  }
  json_line& number(std::string_view name, std::uint64_t value) {
    member(name);
    out_ += std::to_string(value);
    return *this;
  }
  json_line& seconds(std::string_view name, double value) {
    member(name);
    char digits[32];
    std::snprintf(digits, sizeof digits, "%.6f", value);
    out_ += digits;
    return *this;
  }
  json_line& null(std::string_view name) {
    member(name);
    out_ += "null";
    return *this;
  }
  /// Prints the object and a newline on stdout.
  void print() {
    out_ += "}\n";
    std::fputs(out_.c_str(), stdout);
  }

 private:
  void member(std::string_view name) {
    if (out_.size() > 1) out_ += ',';
    s3::append_json_string(out_, name);
    out_ += ':';
  }
  std::string out_ = "{";
};

// The --json line of a finished get or put: what moved, and which way (the transfer report).
void print_transfer(std::string_view op, const s3_url& where, const std::string& file, std::uint64_t bytes,
                    std::string_view etag, std::chrono::steady_clock::time_point started,
                    const s3::transfer_report& paths, const s3::rdma_client_plane* plane) {
  json_line line;
  line.text("op", op).text("bucket", where.bucket).text("key", where.key).text("file", file).number("bytes", bytes);
  line.text("etag", etag)
      .seconds("seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  line.number("rdma_bytes", paths.rdma_bytes).number("rdma_requests", paths.rdma_requests);
  line.number("http_bytes", paths.http_bytes).number("http_requests", paths.http_requests);
  line.number("declined", paths.declined);
  if (plane != nullptr) {
    line.text("rdma_provider", plane->provider());
  } else {
    line.null("rdma_provider");
  }
  line.print();
}

// The download in progress, removed by a SIGINT or SIGTERM so that no partial file stays.
char partial_to_remove[4096];

void remove_partial_and_exit(int signal_number) {
  if (partial_to_remove[0] != '\0') ::unlink(partial_to_remove);
  ::_exit(128 + signal_number);
}

// Writes the object `info` describes into `fd`, window by window: each window (parts_in_flight
// parts) is fetched by ranged GETs into one of two reused buffers while the previous one is
// written with pwrite on another thread, every GET with If-Match of the HEAD's ETag. No page of
// the output is written through a mapping (a fault per 4 KiB page inside recvmsg) and memory stays
// at two windows. Returns the bytes written; an object replaced meanwhile is
// s3::errc::precondition_failed.
std::uint64_t download_to_file(s3::client& client, const s3_url& from, const sluice::object_info& info, int fd,
                               s3::transfer_via via, progress_bar& bar, s3::transfer_report& paths,
                               sluice::error_code& ec) {
  const std::uint64_t size = info.size;
  const std::uint64_t window =
      std::min<std::uint64_t>(size, client.config().part_size * client.config().parts_in_flight);
  std::array<std::unique_ptr<std::byte[]>, 2> buffers;
  std::future<int> writing;  // the pwrite of the previous window: 0 or an errno
  std::uint64_t written = 0;
  const auto wait_for_write = [&] {
    if (!writing.valid()) return;
    if (const int error = writing.get(); error != 0 && !ec)
      ec = sluice::error_code(error, boost::system::system_category());
  };
  for (std::uint64_t at = 0, index = 0; at < size && !ec; at += window, ++index) {
    const std::uint64_t n = std::min(window, size - at);
    auto& buffer = buffers[index % 2];
    if (!buffer) buffer = std::make_unique_for_overwrite<std::byte[]>(static_cast<std::size_t>(window));
    s3::get_options options(sluice::byte_range{at, n});
    options.progress = [&bar, at, size](std::uint64_t done, std::uint64_t) { bar.update(at + done, size); };
    options.via = via;
    options.if_match = info.attributes.etag;
    s3::transfer_report report;
    options.report = &report;
    const std::uint64_t got =
        client.get_object(from.bucket, from.key, sluice::region{buffer.get(), n}, std::move(options), ec);
    paths.rdma_bytes += report.rdma_bytes;
    paths.http_bytes += report.http_bytes;
    paths.rdma_requests += report.rdma_requests;
    paths.http_requests += report.http_requests;
    paths.declined += report.declined;
    if (!ec && got != n) ec = s3::errc::precondition_failed;  // shorter than the HEAD said: replaced
    wait_for_write();  // window index - 1 is on disk: its buffer may be fetched into next
    if (ec) break;
    writing = std::async(std::launch::async, [fd, data = buffer.get(), n, at] {
      for (std::uint64_t done = 0; done < n;) {
        const ssize_t w = ::pwrite(fd, data + done, static_cast<std::size_t>(n - done), static_cast<off_t>(at + done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? errno : EIO;
        done += static_cast<std::uint64_t>(w);
      }
      return 0;
    });
    written = at + n;
  }
  wait_for_write();
  return ec ? 0 : written;
}

int get_command(s3::client& client, const s3_url& from, std::string target, bool show_progress, s3::transfer_via via,
                bool json) {
  const auto started = std::chrono::steady_clock::now();
  const std::string endpoint = client.config().endpoint;
  const std::string source = "s3://" + from.bucket + "/" + from.key;
  auto fail = [&](const sluice::error_code& ec) {
    std::fprintf(stderr, "sluice get: %s: %s\n", source.c_str(), describe(ec, endpoint).c_str());
    return 1;
  };
  if (target.empty()) target = base_name(from.key);
  std::error_code fs_ec;
  if (std::filesystem::is_directory(target, fs_ec)) target += (target.ends_with('/') ? "" : "/") + base_name(from.key);
  const std::string partial = target + ".partial";
  if (partial.size() >= sizeof partial_to_remove) {
    std::fprintf(stderr, "sluice get: %s: path too long\n", target.c_str());
    return 1;
  }
  std::signal(SIGINT, remove_partial_and_exit);
  std::signal(SIGTERM, remove_partial_and_exit);

  // An object replaced between the HEAD and the GET is fetched again (a few times at most).
  for (int round = 0;; ++round) {
    sluice::error_code ec;
    const sluice::object_info info = client.head_object(from.bucket, from.key, ec);
    if (ec) return fail(ec);
    std::memcpy(partial_to_remove, partial.c_str(), partial.size() + 1);
    const int fd = ::open(partial.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      std::fprintf(stderr, "sluice get: %s: %s\n", partial.c_str(),
                   std::strerror(errno));  // NOLINT(concurrency-mt-unsafe): only this thread reports errors here
      return 1;
    }
    auto abandon = [&](const sluice::error_code& why) {
      ::close(fd);
      ::unlink(partial.c_str());
      partial_to_remove[0] = '\0';
      return fail(why);
    };
    std::uint64_t bytes = 0;
    s3::transfer_report paths;
    {
      progress_bar bar("get " + source, show_progress);
      bytes = download_to_file(client, from, info, fd, via, bar, paths, ec);
    }
    const bool changed = ec == sluice::errc::region_too_small || ec == s3::errc::precondition_failed;
    if (changed && round < 3) {
      ::close(fd);
      ::unlink(partial.c_str());
      continue;
    }
    if (ec) return abandon(ec);
    if (::close(fd) != 0 || ::rename(partial.c_str(), target.c_str()) != 0) {
      const sluice::error_code error(errno, boost::system::system_category());
      ::unlink(partial.c_str());
      partial_to_remove[0] = '\0';
      return fail(error);
    }
    partial_to_remove[0] = '\0';
    if (json) {
      print_transfer("get", from, target, bytes, info.attributes.etag, started, paths, client.config().rdma.get());
      return 0;
    }
    std::printf("download: %s to %s (%llu bytes; %s)\n", source.c_str(), target.c_str(),
                static_cast<unsigned long long>(bytes), describe_paths(paths).c_str());
    return 0;
  }
}

/// A key as `ls` prints it: control characters, DEL, backslash and bytes that are not UTF-8
/// written as \xNN (\\ for a backslash), so that a key can neither end the line early nor send
/// escape sequences to the terminal; printable UTF-8 as it is.
std::string printable_key(std::string_view key) {
  std::string out;
  out.reserve(key.size());
  const auto escape = [&](unsigned char b) {
    static constexpr char hex[] = "0123456789abcdef";
    out += "\\x";
    out += hex[b >> 4U];
    out += hex[b & 15U];
  };
  for (std::size_t i = 0; i < key.size();) {
    const auto b = static_cast<unsigned char>(key[i]);
    if (b == '\\') {
      out += "\\\\";
      ++i;
      continue;
    }
    if (b < 0x20 || b == 0x7F) {
      escape(b);
      ++i;
      continue;
    }
    std::size_t n = b < 0x80                 ? 1
                    : b >= 0xC2 && b <= 0xDF ? 2
                    : b >= 0xE0 && b <= 0xEF ? 3
                    : b >= 0xF0 && b <= 0xF4 ? 4
                                             : 0;
    // One whole UTF-8 sequence made of allowed characters passes; anything else byte by byte.
    if (n > 0 && i + n <= key.size() && sluice::is_xml_safe_utf8(key.substr(i, n))) {
      out.append(key.substr(i, n));
      i += n;
    } else {
      escape(b);
      ++i;
    }
  }
  return out;
}

int ls_command(s3::client& client, const std::optional<s3_url>& where, bool recursive, bool json) {
  const std::string endpoint = client.config().endpoint;
  sluice::error_code ec;
  if (!where) {
    const auto buckets = client.list_buckets(ec);
    if (ec) {
      std::fprintf(stderr, "sluice ls: %s\n", describe(ec, endpoint).c_str());
      return 1;
    }
    for (const auto& b : buckets) {
      if (json) {
        json_line().text("bucket", b.name).text("created", iso_time(b.created)).print();
      } else {
        std::printf("%s %s\n", format_time(b.created).c_str(), b.name.c_str());
      }
    }
    return 0;
  }
  s3::list_options options;
  options.prefix = where->key;
  if (!recursive) options.delimiter = "/";
  for (;;) {
    const s3::list_objects_result page = client.list_objects(where->bucket, options, ec);
    if (ec) {
      std::fprintf(stderr, "sluice ls: s3://%s/%s: %s\n", where->bucket.c_str(), where->key.c_str(),
                   describe(ec, endpoint).c_str());
      return 1;
    }
    for (const auto& prefix : page.common_prefixes) {
      if (json) {
        json_line().text("prefix", prefix).print();
      } else {
        std::printf("%30s %s\n", "PRE", printable_key(prefix).c_str());
      }
    }
    for (const auto& object : page.objects) {
      if (json) {
        json_line()
            .text("key", object.key)
            .number("size", object.size)
            .text("etag", object.attributes.etag)
            .text("last_modified", iso_time(object.last_modified))
            .print();
      } else {
        std::printf("%s %10llu %s\n", format_time(object.last_modified).c_str(),
                    static_cast<unsigned long long>(object.size), printable_key(object.key).c_str());
      }
    }
    if (!page.truncated || page.next_continuation_token.empty()) return 0;
    options.continuation_token = page.next_continuation_token;
  }
}

// `sluice presign`: the path-style GET URL of the object at the endpoint, signed in its query
// (SigV4, only host signed, UNSIGNED-PAYLOAD), valid for `expires` seconds from now. Nothing is sent:
// the URL works for whoever holds it, as aws s3 presign's does.
int presign_command(const s3::client_config& config, const s3_url& object, std::uint64_t expires) {
  // validate() took the endpoint: http:// or https://, then host[:port], no path, maybe one '/'.
  std::string_view origin = config.endpoint;
  if (origin.ends_with('/')) origin.remove_suffix(1);
  const std::string_view authority = origin.substr(origin.find("://") + 3);  // the Host header, port included
  const std::string path = "/" + s3::uri_encode(object.bucket, true) + "/" + s3::uri_encode(object.key, false);
  const std::string query = s3::presign("GET", authority, path, "", config.creds, config.region,
                                        std::chrono::system_clock::now(), std::chrono::seconds(expires));
  std::printf("%.*s%s?%s\n", static_cast<int>(origin.size()), origin.data(), path.c_str(), query.c_str());
  return 0;
}

}  // namespace

int run_client(const client_options& o) {
  const client_command command = o.command;
  const char* const name = command == client_command::mb    ? "mb"
                           : command == client_command::rb  ? "rb"
                           : command == client_command::put ? "put"
                           : command == client_command::get ? "get"
                           : command == client_command::ls  ? "ls"
                           : command == client_command::rm  ? "rm"
                                                            : "presign";
  // The command line's shape was checked (args.cpp): the URL parses, with a key where one is due.
  std::optional<s3_url> url;
  if (const auto split = split_s3_url(o.url)) url = s3_url{split->first, split->second};
  if (command == client_command::put && (url->key.empty() || url->key.ends_with('/'))) url->key += base_name(o.file);

  s3::client_config config;
  config.endpoint = o.endpoint;
  config.ca_bundle = o.ca_bundle;
  config.creds.access_key_id = o.access_key;
  config.creds.secret_access_key = o.secret_key;
  config.region = o.region;
  if (auto error = config.validate()) {
    std::fprintf(stderr, "sluice %s: %s\n", name, error->message().c_str());
    return 2;
  }
  if (command == client_command::presign) return presign_command(config, *url, o.expires);
  const bool show_progress = ::isatty(STDERR_FILENO) == 1 && !o.no_progress;
  const s3::transfer_via via = o.via == "rdma"   ? s3::transfer_via::rdma
                               : o.via == "http" ? s3::transfer_via::http
                                                 : s3::transfer_via::automatic;
  if (via != s3::transfer_via::http && (command == client_command::get || command == client_command::put)) {
#ifdef SLUICE_CLI_WITH_FABRIC
    sluice::fabric::client_plane_config plane;
    plane.fabric.provider = provider_name(o.fabric);
    const std::string host = host_of(config.endpoint);
    const bool local = is_loopback_host(host);
    plane.fabric.node = local ? std::string("127.0.0.1") : local_address_towards(host);
    sluice::error_code plane_ec;
    config.rdma = sluice::fabric::client_plane::open(plane, local, plane_ec);
    if (plane_ec && via == s3::transfer_via::rdma) {
      std::fprintf(stderr, "sluice %s: --fabric %s: %s\n", name, o.fabric.c_str(), plane_ec.message().c_str());
      return 1;
    }
#else
    if (via == s3::transfer_via::rdma) {
      std::fprintf(stderr, "sluice %s: --via rdma: this build has no libfabric\n", name);
      return 1;
    }
#endif
  }
  std::optional<s3::client> made;
  try {
    made.emplace(config);
  } catch (const std::invalid_argument& e) {  // a --ca-bundle that cannot be loaded
    std::fprintf(stderr, "sluice %s: %s\n", name, e.what());
    return 2;
  }
  s3::client& client = *made;
  sluice::error_code ec;
  const std::string where = url ? "s3://" + url->bucket + (url->key.empty() ? "" : "/" + url->key) : "";
  auto report = [&](const char* done_word) {
    if (ec) {
      std::fprintf(stderr, "sluice %s: %s: %s\n", name, where.c_str(), describe(ec, config.endpoint).c_str());
      return 1;
    }
    std::printf("%s: %s\n", done_word, where.c_str());
    return 0;
  };
  switch (command) {
    case client_command::mb: client.create_bucket(url->bucket, ec); return report("make_bucket");
    case client_command::rb: client.delete_bucket(url->bucket, ec); return report("remove_bucket");
    case client_command::rm: client.delete_object(url->bucket, url->key, ec); return report("delete");
    case client_command::ls: return ls_command(client, url, o.recursive, o.json);
    case client_command::get: return get_command(client, *url, o.file, show_progress, via, o.json);
    case client_command::put: break;
    case client_command::presign: return 2;  // answered above, before any connection
  }
  const std::string& file = o.file;
  const auto started = std::chrono::steady_clock::now();
  std::error_code size_ec;
  const std::uint64_t bytes = std::filesystem::file_size(file, size_ec);  // for --json; a missing file fails below
  std::string etag;
  s3::transfer_report paths;
  {
    progress_bar bar("put " + where, show_progress);
    s3::put_options options;
    options.attributes.content_type = o.content_type;
    options.progress = [&bar](std::uint64_t done, std::uint64_t total) { bar.update(done, total); };
    options.via = via;
    options.report = &paths;
    // For RDMA the server reads the file's pages where they are: map it rather than read it.
    const int fd = config.rdma ? ::open(file.c_str(), O_RDONLY | O_CLOEXEC) : -1;
    struct stat st {};
    void* mapping = MAP_FAILED;
    if (fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
      mapping = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    }
    if (mapping != MAP_FAILED) {
      const sluice::region source{mapping, static_cast<std::size_t>(st.st_size), sluice::memory_kind::host_pageable,
                                  -1};
      etag = client.put_object(url->bucket, url->key, source, std::move(options), ec);
      ::munmap(mapping, static_cast<std::size_t>(st.st_size));
    } else {
      etag = client.put_object(url->bucket, url->key, std::filesystem::path(file), std::move(options), ec);
    }
    if (fd >= 0) ::close(fd);
  }
  if (ec) {
    const bool local = ec.category() == boost::system::system_category();
    std::fprintf(stderr, "sluice put: %s: %s\n", local ? file.c_str() : where.c_str(),
                 describe(ec, config.endpoint).c_str());
    return 1;
  }
  if (o.json) {
    print_transfer("put", *url, file, size_ec ? 0 : bytes, etag, started, paths, config.rdma.get());
    return 0;
  }
  std::printf("upload: %s to %s (etag %s; %s)\n", file.c_str(), where.c_str(), etag.c_str(),
              describe_paths(paths).c_str());
  return 0;
}

}  // namespace sluice::cli
