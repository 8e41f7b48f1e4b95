// SPDX-License-Identifier: Apache-2.0
// What the client commands share (client_common.hpp): the client made from the command line, the
// environment and the profile; errors for a person; --json lines; printable keys; progress.
#include "client_common.hpp"

#include <sluice/names.hpp>
#include <sluice/s3/access_log.hpp>
#include <sluice/s3/error.hpp>

#ifdef SLUICE_CLI_WITH_FABRIC
#include <sluice/fabric/s3_plane.hpp>
#endif

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include <arpa/inet.h>
#include <fnmatch.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace sluice::cli {

namespace {

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

#ifdef SLUICE_CLI_WITH_FABRIC
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
#endif

// Whether the kernel knows an RDMA device (verbs and efa both list theirs here).
bool has_rdma_device() {
  std::error_code ec;
  return !std::filesystem::is_empty("/sys/class/infiniband", ec) && !ec;
}

std::string env(const char* name) {
  // The CLI reads the environment once, before any thread starts (the library never does).
  const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe)
  return value != nullptr ? std::string(value) : std::string();
}

// The option or setting a client_config field comes from, for a configuration error.
std::string setting_of(std::string_view field) {
  if (field == "endpoint") return "--endpoint (AWS_ENDPOINT_URL, endpoint_url)";
  if (field == "ca_bundle") return "--ca-bundle (ca_bundle)";
  if (field == "region") return "--region (AWS_REGION, region)";
  if (field == "creds") return "--access-key/--secret-key (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)";
  if (field == "connect_timeout") return "--connect-timeout";
  if (field == "idle_timeout") return "--timeout";
  return std::string(field);
}

// Seconds as a duration of whole milliseconds (at least 1).
std::chrono::milliseconds milliseconds_of(double seconds) {
  return std::chrono::milliseconds(std::max<std::int64_t>(1, std::llround(seconds * 1000.0)));
}

}  // namespace

std::optional<s3_url> parse_s3(std::string_view text) {
  const auto split = split_s3_url(text);
  if (!split) return std::nullopt;
  return s3_url{split->first, split->second};
}

std::string url_text(const s3_url& url) { return "s3://" + url.bucket + (url.key.empty() ? "" : "/" + url.key); }

sluice::object_info head_explained(s3::client& client, const s3_url& url, sluice::error_code& ec) {
  sluice::object_info info = client.head_object(url.bucket, url.key, ec);
  if (ec == s3::errc::no_such_key) {
    s3::list_options one;
    one.max_keys = 1;
    sluice::error_code list_ec;
    (void)client.list_objects(url.bucket, one, list_ec);
    if (list_ec == s3::errc::no_such_bucket) ec = list_ec;
  }
  return info;
}

std::string endpoint_address(std::string_view endpoint) {
  const bool tls = endpoint.starts_with("https://") || endpoint.starts_with("HTTPS://");
  if (const auto scheme = endpoint.find("://"); scheme != std::string_view::npos) endpoint.remove_prefix(scheme + 3);
  endpoint = endpoint.substr(0, endpoint.find('/'));
  const bool has_port = endpoint.starts_with('[') ? endpoint.find("]:") != std::string_view::npos
                                                  : endpoint.find(':') != std::string_view::npos;
  return std::string(endpoint) + (has_port ? "" : tls ? ":443" : ":80");
}

std::optional<made_client> make_client(const client_options& o, const char* name, bool for_transfer, int& exit_code) {
  exit_code = 2;
  const aws_profile profile = read_aws_profile(o.profile);
  if (profile.named && !profile.found) {
    std::fprintf(stderr, "sluice %s: the profile '%s' is in neither ~/.aws/credentials nor ~/.aws/config\n", name,
                 profile.name.c_str());
    return std::nullopt;
  }
  made_client made;
  s3::client_config& config = made.config;
  config.endpoint = !o.endpoint.empty()                ? o.endpoint
                    : !env("AWS_ENDPOINT_URL").empty() ? env("AWS_ENDPOINT_URL")
                    : !profile.endpoint_url.empty()    ? profile.endpoint_url
                                                       : std::string("http://127.0.0.1:9000");
  config.ca_bundle = o.ca_bundle;
  if (!o.no_sign_request) {
    config.creds.access_key_id = !o.access_key.empty() ? o.access_key : profile.access_key;
    config.creds.secret_access_key = !o.secret_key.empty() ? o.secret_key : profile.secret_key;
  }
  config.region = !o.region.empty() ? o.region : !profile.region.empty() ? profile.region : "us-east-1";
  config.connect_timeout = milliseconds_of(o.connect_timeout);
  config.idle_timeout = milliseconds_of(o.timeout);
  config.max_connections_per_host = std::max<std::size_t>(config.max_connections_per_host, o.jobs);
  // One io thread per 4 cores, 2 to 8: a large download goes as one GET per io thread (cp), and
  // each receives and writes its file's pages on its own core.
  config.io_threads = std::clamp<std::size_t>(std::thread::hardware_concurrency() / 4, 2, 8);
  if (auto error = config.validate()) {
    std::fprintf(stderr, "sluice %s: %s: %s\n", name, setting_of(error->field).c_str(), error->reason.c_str());
    return std::nullopt;
  }
  const s3::transfer_via via = o.via == "rdma"   ? s3::transfer_via::rdma
                               : o.via == "http" ? s3::transfer_via::http
                                                 : s3::transfer_via::automatic;
  // --via auto is never slower than HTTP and never less private: it opens only hardware providers
  // unless --fabric names one (libfabric's software tcp;ofi_rxm is opt-in), and none at all for an
  // https:// endpoint (RDMA bytes are not encrypted; --via rdma says the user wants them anyway).
  const bool tls = config.endpoint.starts_with("https://") || config.endpoint.starts_with("HTTPS://");
  const bool by_fabric =
      for_transfer && (via == s3::transfer_via::rdma || (via == s3::transfer_via::automatic && !tls));
  // --via auto --fabric auto tries the hardware providers only, and those need an RDMA device:
  // a host without one goes by HTTP without loading libfabric (which takes ~200 ms to load).
  const bool hardware_only = via == s3::transfer_via::automatic && o.fabric == "auto";
  if (by_fabric && (!hardware_only || has_rdma_device())) {
#ifdef SLUICE_CLI_WITH_FABRIC
    sluice::fabric::client_plane_config plane;
    plane.fabric.provider = hardware_only ? std::string(hardware_providers) : provider_name(o.fabric);
    const std::string host = host_of(config.endpoint);
    const bool local = is_loopback_host(host);
    plane.fabric.node = local ? std::string("127.0.0.1") : local_address_towards(host);
    sluice::error_code plane_ec;
    config.rdma = sluice::fabric::client_plane::open(plane, local, plane_ec);
    if (plane_ec == sluice::errc::unavailable && via == s3::transfer_via::rdma) {
      std::fprintf(stderr, "sluice %s: --via rdma needs libfabric.so.1: %s\n", name,
                   sluice::fabric::libfabric_unavailable_reason().c_str());
      exit_code = 1;
      return std::nullopt;
    }
    if (plane_ec && via == s3::transfer_via::rdma) {
      std::fprintf(stderr, "sluice %s: --fabric %s: %s\n", name, o.fabric.c_str(), plane_ec.message().c_str());
      exit_code = 1;
      return std::nullopt;
    }
#else
    if (via == s3::transfer_via::rdma) {
      std::fprintf(stderr, "sluice %s: --via rdma: this build has no libfabric\n", name);
      exit_code = 1;
      return std::nullopt;
    }
#endif
  }
  try {
    made.client = std::make_unique<s3::client>(config);
  } catch (const std::invalid_argument& e) {  // a --ca-bundle that cannot be loaded: "ca_bundle: ..."
    std::fprintf(stderr, "sluice %s: --ca-bundle: %s\n", name, e.what());
    return std::nullopt;
  }
  // Nothing was sent yet: a command without credentials stops here, unless asked to go unsigned.
  if (config.creds.access_key_id.empty() && !o.no_sign_request) {
    std::fprintf(stderr,
                 "sluice %s: no credentials: give --access-key and --secret-key, set AWS_ACCESS_KEY_ID and "
                 "AWS_SECRET_ACCESS_KEY, or keep them in ~/.aws/credentials (profile '%s'); "
                 "--no-sign-request sends unsigned requests\n",
                 name, profile.name.c_str());
    return std::nullopt;
  }
  exit_code = 0;
  return made;
}

std::string describe(const sluice::error_code& ec, const s3::client_config& config) {
  const std::string address = endpoint_address(config.endpoint);
  if (ec.category() == s3::s3_category()) {
    std::string text = ec.message();
    switch (static_cast<s3::errc>(ec.value())) {
      case s3::errc::no_such_key: text += " (the object does not exist)"; break;
      case s3::errc::no_such_bucket: text += " (the bucket does not exist)"; break;
      case s3::errc::signature_does_not_match: text += " (check the secret key)"; break;
      case s3::errc::invalid_access_key_id: text += " (the server does not know this access key)"; break;
      case s3::errc::access_denied: text += " (not allowed with these credentials)"; break;
      case s3::errc::bucket_not_empty: text += " (delete its objects first, or rb --force)"; break;
      case s3::errc::bucket_already_owned_by_you: text += " (you already own this bucket)"; break;
      case s3::errc::bucket_already_exists: text += " (the name is taken)"; break;
      default: break;
    }
    return text;
  }
  if (ec.category() == s3::client_category()) {
    using s3::client_errc;
    const auto which = static_cast<client_errc>(ec.value());
    if (which == client_errc::not_s3_answer) return address + ": " + ec.message();
    const bool opening = which == client_errc::connect_timeout || which == client_errc::handshake_timeout;
    const double seconds =
        std::chrono::duration<double>(opening ? config.connect_timeout : config.idle_timeout).count();
    char text[64];
    std::snprintf(text, sizeof text, "%g s", seconds);
    switch (which) {
      case client_errc::connect_timeout:
        return "no TCP connection to " + address + " within " + text + " (--connect-timeout)";
      case client_errc::handshake_timeout:
        return "the TLS handshake with " + address + " did not finish within " + text + " (--connect-timeout)";
      case client_errc::send_timeout: return address + " took no bytes of the request for " + text + " (--timeout)";
      case client_errc::answer_timeout:
        return address + " accepted the request but sent no answer for " + text + " (--timeout)";
      case client_errc::body_timeout:
        return address + " stopped sending the answer's body for " + text + " (--timeout)";
      default: break;
    }
  }
  if (ec == boost::asio::error::timed_out) {
    return "no answer from " + address + " within the request's deadline (" +
           std::to_string(config.request_timeout.count()) + " s)";
  }
  if (ec == boost::asio::error::connection_refused) {
    return ec.message() + " (is an S3 server listening on " + address + "?)";
  }
  if (ec.category() == s3::tls_verify_category()) {
    return ec.message() + " (is the server's CA in --ca-bundle, and does its certificate name the host of " + address +
           "?)";
  }
  if (ec.category() == boost::asio::error::get_ssl_category() || ec == boost::asio::ssl::error::stream_truncated) {
    return "TLS with " + address + ": " + ec.message() + " (is it an HTTPS server?)";
  }
  if (ec == sluice::errc::protocol_violation) {
    return ec.message() + " (" + address + " answered something that is not S3: is it an S3 server?)";
  }
  return ec.message();
}

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

std::string human_bytes(double bytes) {
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

std::string base_name(std::string_view path) {
  while (path.size() > 1 && path.ends_with('/')) path.remove_suffix(1);
  const auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

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

std::string format_time(std::chrono::system_clock::time_point t) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm parts{};
  gmtime_r(&seconds, &parts);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &parts);
  return text;
}

bool progress_wanted(const client_options& o) {
  return !o.no_progress && ::isatty(STDOUT_FILENO) == 1 && ::isatty(STDERR_FILENO) == 1;
}

json_line& json_line::text(std::string_view name, std::string_view value) {
  member(name);
  s3::append_json_string(out_, value);
  return *this;
}
json_line& json_line::number(std::string_view name, std::uint64_t value) {
  member(name);
  out_ += std::to_string(value);
  return *this;
}
json_line& json_line::seconds(std::string_view name, double value) {
  member(name);
  char digits[32];
  std::snprintf(digits, sizeof digits, "%.6f", value);
  out_ += digits;
  return *this;
}
json_line& json_line::boolean(std::string_view name, bool value) {
  member(name);
  out_ += value ? "true" : "false";
  return *this;
}
json_line& json_line::null(std::string_view name) {
  member(name);
  out_ += "null";
  return *this;
}
void json_line::print() {
  out_ += "}\n";
  std::fputs(out_.c_str(), stdout);
}
void json_line::member(std::string_view name) {
  if (out_.size() > 1) out_ += ',';
  s3::append_json_string(out_, name);
  out_ += ':';
}

void progress_bar::update(std::uint64_t done, std::uint64_t total) {
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
               human_bytes(static_cast<double>(done)).c_str(), human_bytes(static_cast<double>(total)).c_str(),
               human_bytes(rate).c_str());
  std::fflush(stderr);
}

void progress_bar::finish() {
  if (drawn_) std::fputc('\n', stderr);
  drawn_ = false;
}

bool selected(const client_options& o, std::string_view relative) {
  const std::string path(relative);
  const auto matches = [&](const std::string& pattern) { return ::fnmatch(pattern.c_str(), path.c_str(), 0) == 0; };
  if (std::any_of(o.include.begin(), o.include.end(), matches)) return true;
  return std::none_of(o.exclude.begin(), o.exclude.end(), matches);
}

}  // namespace sluice::cli
