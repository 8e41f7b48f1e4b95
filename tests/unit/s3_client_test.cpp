// SPDX-License-Identifier: Apache-2.0
#include <sluice/s3/client.hpp>
#include <sluice/s3/local_plane.hpp>

#include <sluice/memory_store.hpp>
#include <sluice/s3/server.hpp>
#include <sluice/s3/xml_client.hpp>
#include <sluice/shared_buffer.hpp>

#include <doctest/doctest.h>

#include "byte_pattern.hpp"
#include "s3_live_server.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <unistd.h>

namespace {

namespace asio = boost::asio;
namespace s3 = sluice::s3;
using tcp = asio::ip::tcp;
using sluice::error_code;
using sluice::mib;
using namespace std::chrono_literals;

constexpr const char* access_key = sluice::testing::s3_access_key;
constexpr const char* secret_key = sluice::testing::s3_secret_key;

using sluice::testing::pattern;

using sluice::testing::config_for;
using sluice::testing::live_server;

// A scripted HTTP/1.1 server on 127.0.0.1: the n-th request it receives (from 1) gets what
// script(n) says: a raw response, a connection reset, silence, or a response and then a close.
class raw_server {
 public:
  enum class kind { respond, reset, hang, respond_then_close };
  struct action {
    kind what = kind::respond;
    std::string text;
  };

  explicit raw_server(std::function<action(std::size_t)> script)
      : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)), script_(std::move(script)) {
    asio::co_spawn(io_, accept_loop(), asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }
  raw_server(const raw_server&) = delete;
  raw_server& operator=(const raw_server&) = delete;
  ~raw_server() {
    io_.stop();
    thread_.join();
  }

  [[nodiscard]] std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  [[nodiscard]] std::size_t requests() const { return requests_.load(); }
  [[nodiscard]] std::size_t connections() const { return connections_.load(); }
  [[nodiscard]] std::vector<std::string> heads() const {
    std::lock_guard lock(mutex_);
    return heads_;
  }

  static std::string response(unsigned status, const std::string& reason, const std::string& body,
                              const std::string& headers = {}) {
    return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n" + headers + "\r\n" + body;
  }
  static std::string slow_down() {
    return response(503, "Slow Down",
                    "<Error><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>",
                    "Content-Type: application/xml\r\n");
  }
  static std::string hello() { return response(200, "OK", "hello", "ETag: \"5d41402abc4b2a76b9719d911017c592\"\r\n"); }

 private:
  asio::awaitable<void> accept_loop() {
    for (;;) {
      error_code ec;
      tcp::socket socket = co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      connections_.fetch_add(1);
      asio::co_spawn(io_, serve(std::move(socket)), asio::detached);
    }
  }

  static std::size_t content_length(const std::string& head) {
    std::string lower(head);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const auto at = lower.find("\r\ncontent-length:");
    if (at == std::string::npos) return 0;
    return std::stoul(lower.substr(at + 17));
  }

  asio::awaitable<void> serve(tcp::socket socket) {
    std::string buffer;
    for (;;) {
      error_code ec;
      const std::size_t n = co_await asio::async_read_until(socket, asio::dynamic_buffer(buffer), "\r\n\r\n",
                                                            asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      const std::string head = buffer.substr(0, n);
      buffer.erase(0, n);
      const std::size_t length = content_length(head);
      if (buffer.size() < length) {
        co_await asio::async_read(socket, asio::dynamic_buffer(buffer), asio::transfer_exactly(length - buffer.size()),
                                  asio::redirect_error(asio::use_awaitable, ec));
        if (ec) co_return;
      }
      buffer.erase(0, length);
      {
        std::lock_guard lock(mutex_);
        heads_.push_back(head);
      }
      const action next = script_(requests_.fetch_add(1) + 1);
      switch (next.what) {
        case kind::respond:
        case kind::respond_then_close:
          co_await asio::async_write(socket, asio::buffer(next.text), asio::redirect_error(asio::use_awaitable, ec));
          if (ec || next.what == kind::respond_then_close) co_return;
          break;
        case kind::reset:
          socket.set_option(tcp::socket::linger(true, 0), ec);
          socket.close(ec);
          co_return;
        case kind::hang: held_.push_back(std::make_shared<tcp::socket>(std::move(socket))); co_return;
      }
    }
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::uint16_t port_ = acceptor_.local_endpoint().port();
  std::function<action(std::size_t)> script_;
  std::atomic<std::size_t> requests_{0};
  std::atomic<std::size_t> connections_{0};
  mutable std::mutex mutex_;
  std::vector<std::string> heads_;
  std::vector<std::shared_ptr<tcp::socket>> held_;  // on the io thread only
  std::thread thread_;
};

template <class Clock = std::chrono::steady_clock>
double seconds_since(typename Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A self-signed certificate (EC P-256, valid for two days) naming `subject_alt_name`
// ("DNS:localhost,IP:127.0.0.1"), and its key: PEM files in a directory of their own, removed
// with the object. Made with the OpenSSL API, so the test needs no openssl command.
struct test_certificate {
  explicit test_certificate(const std::string& subject_alt_name) {
    static std::atomic<int> made{0};
    const int serial = ++made;
    dir = std::filesystem::temp_directory_path() /
          ("sluice-client-tls-" + std::to_string(::getpid()) + "-" + std::to_string(serial));
    std::filesystem::create_directories(dir);
    certificate = dir / "cert.pem";
    key = dir / "key.pem";
    EVP_PKEY* pkey = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
    X509* x509 = X509_new();
    REQUIRE(pkey != nullptr);
    REQUIRE(x509 != nullptr);
    X509_set_version(x509, 2);  // v3
    ASN1_INTEGER_set(X509_get_serialNumber(x509), serial);
    X509_gmtime_adj(X509_getm_notBefore(x509), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x509), 2L * 24 * 3600);
    X509_set_pubkey(x509, pkey);
    X509_NAME* name = X509_get_subject_name(x509);
    const std::string common_name = "sluice test " + std::to_string(serial);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(common_name.c_str()),
                               -1, -1, 0);
    X509_set_issuer_name(x509, name);
    X509V3_CTX context{};  // no config database
    X509V3_set_ctx(&context, x509, x509, nullptr, nullptr, 0);
    const std::pair<int, std::string> extensions[] = {{NID_subject_alt_name, subject_alt_name},
                                                      {NID_basic_constraints, "critical,CA:TRUE"}};
    for (const auto& [nid, value] : extensions) {
      X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value.c_str());
      REQUIRE(extension != nullptr);
      X509_add_ext(x509, extension, -1);
      X509_EXTENSION_free(extension);
    }
    REQUIRE(X509_sign(x509, pkey, EVP_sha256()) > 0);
    BIO* out = BIO_new_file(certificate.c_str(), "w");
    REQUIRE(out != nullptr);
    CHECK(PEM_write_bio_X509(out, x509) == 1);
    BIO_free(out);
    out = BIO_new_file(key.c_str(), "w");
    REQUIRE(out != nullptr);
    CHECK(PEM_write_bio_PrivateKey(out, pkey, nullptr, nullptr, 0, nullptr, nullptr) == 1);
    BIO_free(out);
    X509_free(x509);
    EVP_PKEY_free(pkey);
  }
  test_certificate(const test_certificate&) = delete;
  test_certificate& operator=(const test_certificate&) = delete;
  ~test_certificate() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }

  std::filesystem::path dir;
  std::filesystem::path certificate;
  std::filesystem::path key;
};

// A live_server that also serves HTTPS (an ephemeral port) with `certificate`.
s3::server_config tls_defaults(const test_certificate& certificate) {
  s3::server_config config = live_server::defaults();
  config.tls = s3::tls_listener{"127.0.0.1", 0, certificate.certificate, certificate.key};
  return config;
}

std::string https_endpoint(const live_server& live, const std::string& host) {
  return "https://" + host + ":" + std::to_string(live.server.tls_endpoint().port());
}

// An HTTPS server that answers each request (the n-th, from 1, gets script(n)) and then ends the
// TLS session with close_notify although the answer did not say "Connection: close", as a server
// that closes after an error does. TCP_CORK holds both until the kernel sends them together
// (200 ms), so the client receives the close_notify with the answer.
class closing_tls_server {
 public:
  closing_tls_server(const test_certificate& certificate, std::function<std::string(std::size_t)> script)
      : context_(asio::ssl::context::tls_server),
        acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        script_(std::move(script)) {
    context_.use_certificate_chain_file(certificate.certificate.string());
    context_.use_private_key_file(certificate.key.string(), asio::ssl::context::pem);
    asio::co_spawn(io_, accept_loop(), asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }
  closing_tls_server(const closing_tls_server&) = delete;
  closing_tls_server& operator=(const closing_tls_server&) = delete;
  ~closing_tls_server() {
    io_.stop();
    thread_.join();
  }

  [[nodiscard]] std::string endpoint() const {
    return "https://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }
  [[nodiscard]] std::size_t requests() const { return requests_.load(); }

 private:
  asio::awaitable<void> accept_loop() {
    for (;;) {
      error_code ec;
      tcp::socket socket = co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      asio::co_spawn(io_, serve(std::move(socket)), asio::detached);
    }
  }

  asio::awaitable<void> serve(tcp::socket socket) {
    asio::ssl::stream<tcp::socket> tls(std::move(socket), context_);
    error_code ec;
    co_await tls.async_handshake(asio::ssl::stream_base::server, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    std::string request;
    co_await asio::async_read_until(tls, asio::dynamic_buffer(request), "\r\n\r\n",
                                    asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    const std::string answer = script_(requests_.fetch_add(1) + 1);
    const int on = 1;
    ::setsockopt(tls.next_layer().native_handle(), IPPROTO_TCP, TCP_CORK, &on, sizeof on);
    co_await asio::async_write(tls, asio::buffer(answer), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    co_await tls.async_shutdown(asio::redirect_error(asio::use_awaitable, ec));  // until the client closes
  }

  asio::io_context io_;
  asio::ssl::context context_;
  tcp::acceptor acceptor_;
  std::function<std::string(std::size_t)> script_;
  std::atomic<std::size_t> requests_{0};
  std::thread thread_;
};

}  // namespace

TEST_CASE("s3 client: configuration is validated") {
  s3::client_config good = config_for("http://127.0.0.1:9000");
  CHECK_FALSE(good.validate());
  auto broken = [&](auto change) {
    s3::client_config c = good;
    change(c);
    return c.validate().has_value();
  };
  CHECK(broken([](auto& c) { c.endpoint = ""; }));
  CHECK(broken([](auto& c) { c.endpoint = "ftp://127.0.0.1:9000"; }));
  CHECK(broken([](auto& c) { c.endpoint = "https://"; }));
  CHECK(broken([](auto& c) { c.ca_bundle = "ca.pem"; }));  // with an http:// endpoint
  CHECK(broken([](auto& c) { c.endpoint = "http://127.0.0.1:99999"; }));
  CHECK(broken([](auto& c) { c.endpoint = "http://127.0.0.1:9000/path"; }));
  CHECK(broken([](auto& c) { c.creds.secret_access_key.clear(); }));
  CHECK(broken([](auto& c) { c.part_size = 1 * mib; }));
  CHECK(broken([](auto& c) { c.multipart_threshold = 1 * mib; }));
  CHECK(broken([](auto& c) { c.parts_in_flight = 0; }));
  CHECK(broken([](auto& c) { c.max_connections_per_host = 0; }));
  CHECK(broken([](auto& c) { c.request_timeout = 0s; }));
  CHECK(broken([](auto& c) { c.connect_timeout = 0ms; }));
  CHECK(broken([](auto& c) { c.idle_timeout = 0ms; }));
  CHECK_FALSE(broken([](auto& c) { c.endpoint = "http://[::1]:9000/"; }));
  CHECK_FALSE(broken([](auto& c) { c.endpoint = "http://localhost"; }));
  CHECK_FALSE(broken([](auto& c) { c.endpoint = "https://localhost"; }));
  CHECK_FALSE(broken([](auto& c) { c.endpoint = "HTTPS://[::1]:9443/"; }));
  CHECK_FALSE(broken([](auto& c) {
    c.endpoint = "https://s3.example:8443";
    c.ca_bundle = "ca.pem";
  }));
  s3::client_config ftp = good;
  ftp.endpoint = "ftp://x";
  REQUIRE(ftp.validate());
  CHECK(ftp.validate()->message().find("\"ftp\" is not supported") != std::string::npos);
  CHECK_FALSE(broken([](auto& c) { c.creds = {}; }));  // anonymous
  s3::client_config bad = good;
  bad.endpoint = "ftp://x";
  CHECK_THROWS_AS(s3::client{bad}, std::invalid_argument);
}

TEST_CASE("s3 client: round trips of 0 B to 40 MiB, single and multipart, whole and parallel ranged GET") {
  live_server live;
  s3::client client(config_for(live.endpoint()));
  client.create_bucket("round");
  for (const std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, 8 * mib + 1, 40 * mib}) {
    CAPTURE(size);
    const auto data = pattern(size, size);
    const std::string key = "objects/" + std::to_string(size);
    // A const source: host_region(const vector) is a const_region, which a put takes.
    const std::string etag = client.put_object("round", key, sluice::host_region(data));
    const bool multipart = size > client.config().multipart_threshold;
    CHECK((etag.find('-') != std::string::npos) == multipart);
    if (multipart) CHECK(etag.ends_with("-8"));

    const sluice::object_info info = client.head_object("round", key);
    CHECK(info.size == size);
    CHECK(info.attributes.etag == etag);

    std::vector<std::byte> back(size + 7, std::byte{0xEE});
    const auto before = client.statistics().requests;
    const std::uint64_t got = client.get_object("round", key, sluice::host_region(back));
    const auto requests = client.statistics().requests - before;
    CHECK(got == size);
    CHECK(std::equal(data.begin(), data.end(), back.begin()));
    CHECK(back[size] == std::byte{0xEE});  // nothing past the object
    if (multipart) {
      // 16 MiB first (the threshold), then 24 MiB as five ranged GETs of 5 MiB.
      CHECK(requests == 6);
    } else {
      CHECK(requests == 1);
    }
  }
}

TEST_CASE("s3 client: a sink takes a GET's body as it arrives, whole and by parts, and its error ends the GET") {
  live_server live;
  s3::client client(config_for(live.endpoint()));
  client.create_bucket("sink");
  // One slice, several slices and a partial last one, then parts (above multipart_threshold).
  for (const std::size_t size : {std::size_t{1}, 300 * sluice::kib + 5, 40 * mib}) {
    CAPTURE(size);
    const auto data = pattern(size, size + 3);
    client.put_object("sink", "object", sluice::host_region(data));
    std::vector<std::byte> destination(size, std::byte{0xEE});
    std::vector<std::byte> received(size);
    std::atomic<bool> outside{false};  // no assertion on the client's threads
    s3::get_options options;
    options.sink = [&](std::uint64_t at, std::span<const std::byte> bytes) -> sluice::error_code {
      if (at > received.size() || bytes.size() > received.size() - at) {
        outside = true;
        return {};
      }
      std::copy(bytes.begin(), bytes.end(), received.begin() + static_cast<std::ptrdiff_t>(at));
      return {};
    };
    CHECK(client.get_object("sink", "object", sluice::host_region(destination), options) == size);
    CHECK_FALSE(outside.load());
    CHECK(received == data);
    CHECK(std::all_of(destination.begin(), destination.end(), [](std::byte b) { return b == std::byte{0xEE}; }));
  }
  // A sink that refuses fails the GET with its error, at once (no retry asks again).
  const auto before = client.statistics().requests;
  s3::get_options refusing{sluice::byte_range{0, 4 * sluice::kib}};  // one request
  refusing.sink = [](std::uint64_t, std::span<const std::byte>) {
    return sluice::error_code(ENOSPC, boost::system::generic_category());
  };
  std::vector<std::byte> destination(4 * sluice::kib);
  sluice::error_code ec;
  client.get_object("sink", "object", sluice::host_region(destination), refusing, ec);
  CHECK(ec == sluice::error_code(ENOSPC, boost::system::generic_category()));
  CHECK(client.statistics().requests - before == 1);
}

TEST_CASE("s3 client: ranges, a destination too small, missing keys and buckets") {
  live_server live;
  s3::client client(config_for(live.endpoint()));
  client.create_bucket("ranges");
  const std::size_t size = 100 * 1024;
  auto data = pattern(size, 3);
  client.put_object("ranges", "k", sluice::host_region(data));
  std::vector<std::byte> out(size);
  const auto region = sluice::host_region(out);

  CHECK(client.get_object("ranges", "k", region, sluice::byte_range{1000, 500}) == 500);
  CHECK(std::equal(out.begin(), out.begin() + 500, data.begin() + 1000));
  CHECK(client.get_object("ranges", "k", region, sluice::byte_range{size - 10, std::nullopt}) == 10);
  CHECK(std::equal(out.begin(), out.begin() + 10, data.end() - 10));
  CHECK(client.get_object("ranges", "k", region, sluice::byte_range{size, std::nullopt}) == 0);
  CHECK(client.get_object("ranges", "k", region, sluice::byte_range{0, 0}) == 0);

  error_code ec;
  (void)client.get_object("ranges", "k", region, sluice::byte_range{size + 1, std::nullopt}, ec);
  CHECK(ec == sluice::errc::bad_range);
  (void)client.get_object("ranges", "k", region, sluice::byte_range{size - 10, 20}, ec);
  CHECK(ec == sluice::errc::bad_range);

  std::vector<std::byte> small(size - 1);
  (void)client.get_object("ranges", "k", sluice::host_region(small), {}, ec);
  CHECK(ec == sluice::errc::region_too_small);
  const auto before = client.statistics().requests;
  (void)client.get_object("ranges", "k", sluice::host_region(small), sluice::byte_range{0, size}, ec);
  CHECK(ec == sluice::errc::region_too_small);
  CHECK(client.statistics().requests == before);  // known before any request

  (void)client.get_object("ranges", "missing", region, {}, ec);
  CHECK(ec == s3::errc::no_such_key);
  CHECK(ec.category().name() == std::string("s3"));
  (void)client.head_object("ranges", "missing", ec);
  CHECK(ec == s3::errc::no_such_key);
  (void)client.get_object("no-such-bucket", "k", region, {}, ec);
  CHECK(ec == s3::errc::no_such_bucket);
  CHECK_THROWS_AS((void)client.head_object("ranges", "missing"), sluice::system_error);

  // An empty object, whole and from its end.
  client.put_object("ranges", "empty", sluice::region{});
  CHECK(client.get_object("ranges", "empty", sluice::region{}) == 0);
  (void)client.get_object("ranges", "empty", region, sluice::byte_range{1, std::nullopt}, ec);
  CHECK(ec == sluice::errc::bad_range);

  client.delete_object("ranges", "k");
  client.delete_object("ranges", "k");  // deleting what is gone succeeds
  (void)client.head_object("ranges", "k", ec);
  CHECK(ec == s3::errc::no_such_key);
}

TEST_CASE("s3 client: wrong credentials map to the S3 error codes") {
  live_server live;
  s3::client_config config = config_for(live.endpoint());
  s3::client good(config);
  good.create_bucket("auth");
  std::vector<std::byte> data(100, std::byte{7});
  good.put_object("auth", "k", sluice::host_region(data));

  config.creds.secret_access_key = "wrong";
  s3::client wrong_secret(config);
  error_code ec;
  std::vector<std::byte> out(100);
  (void)wrong_secret.get_object("auth", "k", sluice::host_region(out), {}, ec);
  CHECK(ec == s3::errc::signature_does_not_match);
  (void)wrong_secret.put_object("auth", "k2", sluice::host_region(data), {}, ec);
  CHECK(ec == s3::errc::signature_does_not_match);
  (void)wrong_secret.list_objects("auth", {}, ec);
  CHECK(ec == s3::errc::signature_does_not_match);
  (void)wrong_secret.head_object("auth", "k", ec);
  CHECK(ec == s3::errc::access_denied);  // a HEAD answer has no body to carry the code: 403

  config.creds.access_key_id = "AKIDUNKNOWN";
  s3::client unknown(config);
  (void)unknown.get_object("auth", "k", sluice::host_region(out), {}, ec);
  CHECK(ec == s3::errc::invalid_access_key_id);
}

TEST_CASE("s3 client: keys with reserved characters, metadata and listing pages with a delimiter") {
  live_server live;
  s3::client client(config_for(live.endpoint()));
  client.create_bucket("pages");
  std::vector<std::byte> one(1, std::byte{'x'});
  for (const char* key : {"a/1", "a/2", "a/3", "b/1", "c", "d", "e/x", "f"}) {
    client.put_object("pages", key, sluice::host_region(one));
  }

  s3::list_options options;
  options.delimiter = "/";
  options.max_keys = 2;
  std::vector<std::string> entries;
  std::size_t pages = 0;
  for (;;) {
    const s3::list_objects_result page = client.list_objects("pages", options);
    ++pages;
    CHECK(page.objects.size() + page.common_prefixes.size() <= 2);
    for (const auto& p : page.common_prefixes) entries.push_back("P:" + p);
    for (const auto& o : page.objects) entries.push_back(o.key);
    if (!page.truncated) break;
    REQUIRE_FALSE(page.next_continuation_token.empty());
    options.continuation_token = page.next_continuation_token;
    REQUIRE(pages < 10);
  }
  // Six entries, two a page: three pages. (sluice's server, as of this writing, repeats a common
  // prefix that ended the previous page at the start of the next one, so allow for that.)
  CHECK(pages >= 3);
  std::sort(entries.begin(), entries.end());
  entries.erase(std::unique(entries.begin(), entries.end()), entries.end());
  CHECK(entries == std::vector<std::string>{"P:a/", "P:b/", "P:e/", "c", "d", "f"});

  options = {};
  options.delimiter = "/";
  options.max_keys = 2;
  const s3::list_objects_result all = client.list_all_objects("pages", options);
  CHECK_FALSE(all.truncated);
  CHECK(all.common_prefixes == std::vector<std::string>{"a/", "b/", "e/"});
  REQUIRE(all.objects.size() == 3);
  CHECK(all.objects[0].key == "c");
  CHECK(all.objects[2].key == "f");
  CHECK(all.objects[0].size == 1);
  CHECK(all.objects[0].attributes.etag.size() == 32);

  options = {};
  options.prefix = "a/";
  const auto under_a = client.list_all_objects("pages", options);
  CHECK(under_a.objects.size() == 3);
  CHECK(under_a.common_prefixes.empty());

  // A key that needs encoding in the path, the signature and the listing.
  const std::string odd = "dir/sp ace+plus%25&amp?=#~\xC3\xA9.txt";
  auto data = pattern(3000, 9);
  s3::put_options put;
  put.attributes.content_type = "text/plain";
  put.attributes.metadata["color"] = "blue";
  put.attributes.content_language = "de-CH";
  put.attributes.expires = "Wed, 01 Jan 2031 00:00:00 GMT";
  put.attributes.tags = {{"team", "ml & search"}, {"k=v", "a+b/c"}};
  client.put_object("pages", odd, sluice::host_region(data), put);
  const auto info = client.head_object("pages", odd);
  CHECK(info.size == 3000);
  CHECK(info.attributes.content_type == "text/plain");
  CHECK(info.attributes.metadata.at("color") == "blue");
  CHECK(info.attributes.content_language == "de-CH");
  CHECK(info.attributes.expires == "Wed, 01 Jan 2031 00:00:00 GMT");
  sluice::error_code stored_error;  // tags are not in a HEAD answer: read them from the store
  CHECK(live.store.head({"pages", odd}, stored_error).attributes.tags == put.attributes.tags);
  std::vector<std::byte> back(3000);
  CHECK(client.get_object("pages", odd, sluice::host_region(back)) == 3000);
  CHECK(back == data);
  options = {};
  options.prefix = "dir/";
  const auto listed = client.list_all_objects("pages", options);
  REQUIRE(listed.objects.size() == 1);
  CHECK(listed.objects[0].key == odd);

  const auto buckets = client.list_buckets();
  REQUIRE(buckets.size() == 1);
  CHECK(buckets[0].name == "pages");
  error_code ec;
  client.delete_bucket("pages", ec);
  CHECK(ec == s3::errc::bucket_not_empty);
  client.create_bucket("pages", ec);
  CHECK(!ec);  // a bucket you own, in us-east-1 (the server's default region): 200, as S3
}

TEST_CASE("s3 client: connections are reused, and bounded per host") {
  live_server live;
  s3::client_config config = config_for(live.endpoint());
  config.max_connections_per_host = 1;
  s3::client client(config);
  client.create_bucket("reuse");
  auto data = pattern(10000, 1);
  client.put_object("reuse", "k", sluice::host_region(data));
  for (int i = 0; i < 50; ++i) CHECK(client.head_object("reuse", "k").size == 10000);
  CHECK(client.statistics().connections_opened == 1);

  // Eight at once through one connection: they queue for it.
  std::vector<std::vector<std::byte>> outs(8, std::vector<std::byte>(10000));
  std::vector<std::promise<std::pair<error_code, std::uint64_t>>> done(8);
  for (std::size_t i = 0; i < outs.size(); ++i) {
    client.async_get_object("reuse", "k", sluice::host_region(outs[i]), {}, [&done, i](error_code ec, std::uint64_t n) {
      done[i].set_value({ec, n});
    });
  }
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const auto [ec, n] = done[i].get_future().get();
    CHECK_FALSE(ec);
    CHECK(n == 10000);
    CHECK(outs[i] == data);
  }
  CHECK(client.statistics().connections_opened == 1);
  CHECK(client.statistics().retries == 0);
}

TEST_CASE("s3 client: completion tokens: a bound executor, use_awaitable, a file source and progress") {
  live_server live;
  s3::client_config config = config_for(live.endpoint());
  config.multipart_threshold = 5 * mib;
  s3::client client(config);
  client.create_bucket("tokens");

  // The handler runs on the executor bound to it, not on a client thread.
  asio::io_context mine;
  bool on_mine = false;
  error_code got;
  client.async_create_bucket("tokens-2", asio::bind_executor(mine, [&](error_code ec) {
                               got = ec;
                               on_mine = mine.get_executor().running_in_this_thread();
                             }));
  mine.run();
  CHECK_FALSE(got);
  CHECK(on_mine);

  // A 12 MiB file: three parts, with progress that only grows and ends at the total.
  const auto path = std::filesystem::temp_directory_path() / ("sluice-client-test-" + std::to_string(::getpid()));
  const auto data = pattern(12 * mib + 5, 12);
  {
    std::ofstream file(path, std::ios::binary);
    file.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  }
  std::mutex progress_mutex;
  std::vector<std::uint64_t> seen;
  std::uint64_t last_total = 0;
  s3::put_options put;
  put.progress = [&](std::uint64_t done, std::uint64_t total) {
    std::lock_guard lock(progress_mutex);
    seen.push_back(done);
    last_total = total;
  };

  asio::io_context context;
  std::string etag;
  std::uint64_t read_back = 0;
  std::vector<std::byte> back(data.size());
  error_code failure;
  asio::co_spawn(
      context,
      [&]() -> asio::awaitable<void> {
        try {
          etag = co_await client.async_put_object("tokens", "file", path, put, asio::use_awaitable);
          read_back =
              co_await client.async_get_object("tokens", "file", sluice::host_region(back), {}, asio::use_awaitable);
        } catch (const sluice::system_error& e) {
          failure = e.code();
        }
      },
      asio::detached);
  context.run();
  std::filesystem::remove(path);
  CHECK_FALSE(failure);
  CHECK(etag.ends_with("-3"));
  CHECK(read_back == data.size());
  CHECK(back == data);
  REQUIRE_FALSE(seen.empty());
  CHECK(std::is_sorted(seen.begin(), seen.end()));
  CHECK(seen.back() == data.size());
  CHECK(last_total == data.size());

  // A missing file is a system error.
  error_code ec;
  (void)client.put_object("tokens", "nope", std::filesystem::path("/nonexistent/sluice"), {}, ec);
  CHECK(ec == boost::system::errc::no_such_file_or_directory);
}

TEST_CASE("s3 client: a failed or cancelled multipart upload leaves no upload behind") {
  s3::server_config server_config = live_server::defaults();
  server_config.max_object_bytes = 5 * mib - 1;  // every 5 MiB part is refused
  live_server live(server_config);
  s3::client_config config = config_for(live.endpoint());
  config.multipart_threshold = 5 * mib;
  config.max_retries = 1;
  s3::client client(config);
  client.create_bucket("mpu");
  auto data = pattern(12 * mib, 5);
  error_code ec;
  (void)client.put_object("mpu", "big", sluice::host_region(data), {}, ec);
  CHECK(ec);
  error_code store_ec;
  CHECK(live.store.list_uploads("mpu", "", store_ec).empty());
  (void)client.head_object("mpu", "big", ec);
  CHECK(ec == s3::errc::no_such_key);
}

TEST_CASE("s3 client: cancel() aborts a transfer in flight and the upload with it") {
  live_server live;
  s3::client_config config = config_for(live.endpoint());
  config.multipart_threshold = 5 * mib;
  config.parts_in_flight = 1;
  s3::client client(config);
  client.create_bucket("cancel");
  auto data = pattern(40 * mib, 6);
  std::promise<error_code> done;
  std::atomic<bool> cancelled{false};
  s3::put_options put;
  put.progress = [&](std::uint64_t bytes, std::uint64_t) {
    if (bytes > 6 * mib && !cancelled.exchange(true)) client.cancel();
  };
  client.async_put_object("cancel", "big", sluice::host_region(data), put,
                          [&](error_code ec, const std::string&) { done.set_value(ec); });
  const error_code ec = done.get_future().get();
  CHECK(ec == asio::error::operation_aborted);
  error_code store_ec;
  CHECK(live.store.list_uploads("cancel", "", store_ec).empty());
  // The client goes on working.
  std::vector<std::byte> small(10, std::byte{1});
  CHECK_NOTHROW(client.put_object("cancel", "small", sluice::host_region(small)));
}

TEST_CASE("s3 client: retries: SlowDown twice then 200, a reset then 200, and giving up") {
  {
    raw_server raw([](std::size_t n) {
      return n <= 2 ? raw_server::action{raw_server::kind::respond, raw_server::slow_down()}
                    : raw_server::action{raw_server::kind::respond, raw_server::hello()};
    });
    s3::client client(config_for(raw.endpoint()));
    std::vector<std::byte> out(16);
    CHECK(client.get_object("b", "k", sluice::host_region(out)) == 5);
    CHECK(std::string(reinterpret_cast<const char*>(out.data()), 5) == "hello");
    CHECK(raw.requests() == 3);
    CHECK(client.statistics().retries == 2);
    CHECK(raw.connections() == 1);  // the 503s kept the connection open
  }
  {
    raw_server raw([](std::size_t n) {
      return n == 1 ? raw_server::action{raw_server::kind::reset, {}}
                    : raw_server::action{raw_server::kind::respond, raw_server::hello()};
    });
    s3::client client(config_for(raw.endpoint()));
    std::vector<std::byte> out(16);
    CHECK(client.get_object("b", "k", sluice::host_region(out)) == 5);
    CHECK(raw.requests() == 2);
    CHECK(client.statistics().retries == 1);
    CHECK(raw.connections() == 2);
  }
  {
    raw_server raw([](std::size_t) { return raw_server::action{raw_server::kind::respond, raw_server::slow_down()}; });
    s3::client_config config = config_for(raw.endpoint());
    config.max_retries = 2;
    s3::client client(config);
    error_code ec;
    (void)client.head_object("b", "k", ec);
    CHECK(ec == s3::errc::service_unavailable);  // HEAD answers carry no body: mapped from 503
    std::vector<std::byte> out(16);
    (void)client.get_object("b", "k", sluice::host_region(out), {}, ec);
    CHECK(ec == s3::errc::slow_down);
    CHECK(raw.requests() == 6);  // 1 + 2 retries, twice
  }
}

TEST_CASE("s3 client: a non-idempotent request is not retried, and a closed idle connection is replaced") {
  {
    raw_server raw([](std::size_t) { return raw_server::action{raw_server::kind::reset, {}}; });
    s3::client_config config = config_for(raw.endpoint());
    config.multipart_threshold = 5 * mib;
    s3::client client(config);
    auto data = pattern(6 * mib, 2);
    error_code ec;
    (void)client.put_object("b", "k", sluice::host_region(data), {}, ec);
    CHECK(ec);
    CHECK(ec.category() != s3::s3_category());
    REQUIRE(raw.requests() == 1);  // CreateMultipartUpload, once
    CHECK(raw.heads()[0].starts_with("POST /b/k?uploads HTTP/1.1"));
  }
  {
    raw_server raw([](std::size_t) {
      return raw_server::action{raw_server::kind::respond_then_close, raw_server::hello()};
    });
    s3::client client(config_for(raw.endpoint()));
    std::vector<std::byte> out(16);
    CHECK(client.get_object("b", "k", sluice::host_region(out)) == 5);
    std::this_thread::sleep_for(50ms);  // let the close arrive
    CHECK(client.get_object("b", "k", sluice::host_region(out)) == 5);
    CHECK(raw.requests() == 2);
    CHECK(raw.connections() == 2);
    CHECK(client.statistics().retries == 0);
  }
}

TEST_CASE("s3 client: a chunked answer is read through the parser, a lying one is refused") {
  raw_server raw([](std::size_t n) {
    if (n == 1) {
      return raw_server::action{raw_server::kind::respond,
                                "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-4/5\r\n"
                                "Transfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n"};
    }
    // Content-Range promises 5 bytes, Content-Length 3.
    return raw_server::action{raw_server::kind::respond,
                              "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-4/5\r\n"
                              "Content-Length: 3\r\n\r\nhel"};
  });
  s3::client client(config_for(raw.endpoint()));
  std::vector<std::byte> out(8);
  CHECK(client.get_object("b", "k", sluice::host_region(out)) == 5);
  CHECK(std::string(reinterpret_cast<const char*>(out.data()), 5) == "hello");
  error_code ec;
  (void)client.get_object("b", "k", sluice::host_region(out), {}, ec);
  CHECK(ec == sluice::errc::protocol_violation);
  CHECK(raw.requests() == 2);  // not retried
}

TEST_CASE("s3 client: no answer times out after request_timeout, and cancel() ends a request at once") {
  raw_server raw([](std::size_t) { return raw_server::action{raw_server::kind::hang, {}}; });
  s3::client_config config = config_for(raw.endpoint());
  config.request_timeout = 1s;
  s3::client client(config);
  const auto start = std::chrono::steady_clock::now();
  error_code ec;
  (void)client.head_object("b", "k", ec);
  const double took = seconds_since(start);
  CHECK(ec == asio::error::timed_out);
  CHECK(took >= 0.9);
  CHECK(took < 3.0);
  CHECK(raw.requests() == 1);  // a deadline is not retried

  config.request_timeout = 60s;
  s3::client patient(config);
  std::promise<error_code> done;
  patient.async_head_object("b", "k", [&](error_code e, const sluice::object_info&) { done.set_value(e); });
  std::this_thread::sleep_for(200ms);
  const auto cancel_at = std::chrono::steady_clock::now();
  patient.cancel();
  auto result = done.get_future();
  REQUIRE(result.wait_for(5s) == std::future_status::ready);
  CHECK(result.get() == asio::error::operation_aborted);
  CHECK(seconds_since(cancel_at) < 1.0);
}

TEST_CASE("s3 client: idle_timeout ends a request whose answer never comes, and says it was waiting for it") {
  raw_server raw([](std::size_t) { return raw_server::action{raw_server::kind::hang, {}}; });
  s3::client_config config = config_for(raw.endpoint());
  config.idle_timeout = 500ms;
  s3::client client(config);
  const auto start = std::chrono::steady_clock::now();
  error_code ec;
  (void)client.head_object("b", "k", ec);
  const double took = seconds_since(start);
  CHECK(ec == s3::client_errc::answer_timeout);
  CHECK(ec == boost::system::errc::timed_out);  // the generic condition
  CHECK(took >= 0.4);
  CHECK(took < 3.0);
  CHECK(raw.requests() == 1);  // not retried
}

TEST_CASE("s3 client: a GET by token waits for its answer past idle_timeout, up to request_timeout") {
  // The server answers a token's GET once it has moved the bytes out of band (minutes for a cold
  // object of many GiB): idle_timeout must not cut that wait. A real same-host grant plane grants
  // the memory; the HTTP side never answers.
  const auto socket =
      std::filesystem::temp_directory_path() / ("sluice-client-token-" + std::to_string(::getpid()) + ".sock");
  s3::local_server_plane_config grants;
  grants.socket_path = socket;
  grants.users = {{access_key, secret_key}};
  error_code ec;
  auto server_plane = s3::local_server_plane::open(grants, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  raw_server raw([](std::size_t) { return raw_server::action{raw_server::kind::hang, {}}; });
  s3::client_config config = config_for(raw.endpoint());
  config.idle_timeout = 300ms;
  config.request_timeout = 2s;
  config.max_retries = 0;
  auto plane = s3::local_client_plane::open({socket, grants.users.front(), nullptr, 2000ms}, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  auto into = sluice::shared_buffer::create(64 * 1024, ec);
  REQUIRE(!ec);
  plane->share(into, ec);
  REQUIRE(!ec);
  config.rdma = plane;
  s3::client client(config);
  s3::get_options get(sluice::byte_range{0, into.size()});
  get.via = s3::transfer_via::rdma;
  const auto start = std::chrono::steady_clock::now();
  (void)client.get_object("b", "k", into.region(), get, ec);
  const double took = seconds_since(start);
  CHECK(ec == boost::system::errc::timed_out);
  CHECK(took >= 1.8);  // the request's deadline, not idle_timeout
  CHECK(took < 5.0);
  server_plane->close();
}

// The caller of operations cancelled one at a time: a thread that runs their handlers and emits
// their signals, since Asio asks that a slot be cleared (on the handler's executor) and its
// signal emitted without a race.
struct caller_thread {
  caller_thread() = default;
  caller_thread(const caller_thread&) = delete;
  caller_thread& operator=(const caller_thread&) = delete;
  ~caller_thread() {
    work.reset();
    thread.join();
  }
  template <class Handler>
  auto bind(asio::cancellation_signal& signal, Handler handler) {
    return asio::bind_cancellation_slot(signal.slot(), asio::bind_executor(io, std::move(handler)));
  }
  void emit(asio::cancellation_signal& signal, asio::cancellation_type type = asio::cancellation_type::terminal) {
    asio::post(io, [&signal, type] { signal.emit(type); });
  }

  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::thread thread{[this] { io.run(); }};
};

template <class Condition>
bool eventually(Condition condition) {
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

TEST_CASE("s3 client: a cancellation slot aborts one stalled GET or PUT, not the others on the client") {
  // The first request (a GET) and the third (a PUT) get no answer; the others get one.
  raw_server raw([](std::size_t n) {
    return n == 1 || n == 3 ? raw_server::action{raw_server::kind::hang, {}}
                            : raw_server::action{raw_server::kind::respond, raw_server::hello()};
  });
  s3::client_config config = config_for(raw.endpoint());
  config.request_timeout = 60s;
  s3::client client(config);
  caller_thread caller;

  asio::cancellation_signal signal;
  std::vector<std::byte> stalled(16);
  std::promise<error_code> aborted;
  client.async_get_object("b", "k", sluice::host_region(stalled), {},
                          caller.bind(signal, [&](error_code ec, std::uint64_t) { aborted.set_value(ec); }));
  REQUIRE(eventually([&] { return raw.requests() == 1; }));

  // Another GET on the same client, while the first waits: answered, on a second connection.
  std::vector<std::byte> out(16);
  std::promise<std::pair<error_code, std::uint64_t>> other;
  client.async_get_object("b", "k", sluice::host_region(out), {}, [&](error_code ec, std::uint64_t n) {
    other.set_value({ec, n});
  });
  auto other_result = other.get_future();
  REQUIRE(other_result.wait_for(5s) == std::future_status::ready);
  const auto [other_ec, other_bytes] = other_result.get();
  CHECK_FALSE(other_ec);
  CHECK(other_bytes == 5);

  auto result = aborted.get_future();
  CHECK(result.wait_for(100ms) == std::future_status::timeout);  // still waiting for its answer
  const auto cancel_at = std::chrono::steady_clock::now();
  caller.emit(signal);
  REQUIRE(result.wait_for(5s) == std::future_status::ready);
  CHECK(result.get() == asio::error::operation_aborted);
  CHECK(seconds_since(cancel_at) < 1.0);
  caller.emit(signal);  // after the completion: nothing left to cancel

  // A PUT, cancelled with a partial cancellation this time (any type aborts the operation).
  asio::cancellation_signal put_signal;
  std::promise<error_code> put_aborted;
  const std::vector<std::byte> body(10, std::byte{1});
  client.async_put_object(
      "b", "k", sluice::host_region(body), {},
      caller.bind(put_signal, [&](error_code ec, const std::string&) { put_aborted.set_value(ec); }));
  REQUIRE(eventually([&] { return raw.requests() == 3; }));
  auto put_result = put_aborted.get_future();
  CHECK(put_result.wait_for(100ms) == std::future_status::timeout);
  caller.emit(put_signal, asio::cancellation_type::partial);
  REQUIRE(put_result.wait_for(5s) == std::future_status::ready);
  CHECK(put_result.get() == asio::error::operation_aborted);

  // The client goes on working; a signal bound to an operation that succeeded does nothing after it.
  std::promise<error_code> fine;
  client.async_get_object("b", "k", sluice::host_region(out), {},
                          caller.bind(signal, [&](error_code ec, std::uint64_t) { fine.set_value(ec); }));
  auto fine_result = fine.get_future();
  REQUIRE(fine_result.wait_for(5s) == std::future_status::ready);
  CHECK_FALSE(fine_result.get());
  caller.emit(signal);
  caller.emit(put_signal, asio::cancellation_type::total);
  CHECK(client.get_object("b", "k", sluice::host_region(out)) == 5);
}

TEST_CASE("s3 client: a cancellation slot aborts a parallel ranged GET and a multipart upload part way") {
  live_server live;
  s3::client_config config = config_for(live.endpoint());
  config.multipart_threshold = 5 * mib;
  config.parts_in_flight = 1;
  s3::client client(config);
  client.create_bucket("slot");
  const auto data = pattern(40 * mib, 9);
  client.put_object("slot", "big", sluice::host_region(data));
  caller_thread caller;

  // Two 40 MiB GETs at once (5 MiB, then seven ranged GETs of 5 MiB); the first is cancelled
  // after 6 MiB, from its progress callback, the second reads everything.
  asio::cancellation_signal signal;
  std::atomic<bool> emitted{false};
  s3::get_options cancelled_get;
  cancelled_get.progress = [&](std::uint64_t bytes, std::uint64_t) {
    // On the operation's strand: it cannot complete (and clear the slot) meanwhile.
    if (bytes > 6 * mib && !emitted.exchange(true)) signal.emit(asio::cancellation_type::terminal);
  };
  std::vector<std::byte> first(data.size());
  std::vector<std::byte> second(data.size());
  std::promise<error_code> aborted;
  std::promise<std::pair<error_code, std::uint64_t>> whole;
  client.async_get_object("slot", "big", sluice::host_region(first), cancelled_get,
                          caller.bind(signal, [&](error_code ec, std::uint64_t) { aborted.set_value(ec); }));
  client.async_get_object("slot", "big", sluice::host_region(second), {}, [&](error_code ec, std::uint64_t n) {
    whole.set_value({ec, n});
  });
  auto result = aborted.get_future();
  REQUIRE(result.wait_for(10s) == std::future_status::ready);
  CHECK(result.get() == asio::error::operation_aborted);
  CHECK(emitted);
  auto whole_result = whole.get_future();
  REQUIRE(whole_result.wait_for(10s) == std::future_status::ready);
  const auto [whole_ec, whole_bytes] = whole_result.get();
  CHECK_FALSE(whole_ec);
  CHECK(whole_bytes == data.size());
  CHECK(second == data);

  // A multipart upload cancelled after 6 MiB: aborted on the server too (the abort is not part of
  // the cancelled operation), and the client goes on working.
  asio::cancellation_signal put_signal;
  std::atomic<bool> put_emitted{false};
  s3::put_options put;
  put.progress = [&](std::uint64_t bytes, std::uint64_t) {
    if (bytes > 6 * mib && !put_emitted.exchange(true)) put_signal.emit(asio::cancellation_type::terminal);
  };
  std::promise<error_code> put_aborted;
  client.async_put_object(
      "slot", "upload", sluice::host_region(data), put,
      caller.bind(put_signal, [&](error_code ec, const std::string&) { put_aborted.set_value(ec); }));
  auto put_result = put_aborted.get_future();
  REQUIRE(put_result.wait_for(10s) == std::future_status::ready);
  CHECK(put_result.get() == asio::error::operation_aborted);
  error_code store_ec;
  CHECK(live.store.list_uploads("slot", "", store_ec).empty());
  error_code ec;
  (void)client.head_object("slot", "upload", ec);
  CHECK(ec == s3::errc::no_such_key);
  std::vector<std::byte> back(data.size());
  CHECK(client.get_object("slot", "big", sluice::host_region(back)) == data.size());
  CHECK(back == data);
}

TEST_CASE("s3 client: a co_await'ed GET that loses a race to a timer is cancelled") {
  using namespace asio::experimental::awaitable_operators;
  raw_server raw([](std::size_t n) {
    return n == 1 ? raw_server::action{raw_server::kind::hang, {}}
                  : raw_server::action{raw_server::kind::respond, raw_server::hello()};
  });
  s3::client_config config = config_for(raw.endpoint());
  config.request_timeout = 60s;
  s3::client client(config);
  asio::io_context context;
  std::vector<std::byte> out(16);
  std::size_t winner = 99;
  std::uint64_t bytes = 0;
  const auto start = std::chrono::steady_clock::now();
  asio::co_spawn(
      context,
      [&]() -> asio::awaitable<void> {
        asio::steady_timer timer(co_await asio::this_coro::executor, 200ms);
        auto first = co_await (client.async_get_object("b", "k", sluice::host_region(out), {}, asio::use_awaitable) ||
                               timer.async_wait(asio::use_awaitable));
        winner = first.index();
        // The next GET on the same client is answered.
        bytes = co_await client.async_get_object("b", "k", sluice::host_region(out), {}, asio::use_awaitable);
      },
      asio::detached);
  context.run();
  CHECK(winner == 1);
  CHECK(bytes == 5);
  CHECK(seconds_since(start) < 3.0);
}

TEST_CASE("s3 client: https round trips of 0 B to 12 MiB with the CA bundle, sessions kept alive per host") {
  const test_certificate certificate("DNS:localhost,IP:127.0.0.1");
  live_server live(tls_defaults(certificate));
  s3::client_config config = config_for(https_endpoint(live, "localhost"));
  config.ca_bundle = certificate.certificate;
  config.multipart_threshold = 5 * mib;
  s3::client client(config);
  client.create_bucket("secure");
  for (const std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{70000}, 12 * mib + 3}) {
    CAPTURE(size);
    const auto data = pattern(size, size + 7);
    auto source = data;
    const std::string key = "tls/" + std::to_string(size);
    const std::string etag = client.put_object("secure", key, sluice::host_region(source));
    CHECK((etag.find('-') != std::string::npos) == (size > config.multipart_threshold));
    CHECK(client.head_object("secure", key).size == size);
    std::vector<std::byte> back(size + 5, std::byte{0xEE});
    CHECK(client.get_object("secure", key, sluice::host_region(back)) == size);
    CHECK(std::equal(data.begin(), data.end(), back.begin()));
    CHECK(back[size] == std::byte{0xEE});
    // A range inside the body, read through the TLS stream.
    if (size >= 70000) {
      std::vector<std::byte> part(1000);
      CHECK(client.get_object("secure", key, sluice::host_region(part), sluice::byte_range{65000, 1000}) == 1000);
      CHECK(std::equal(part.begin(), part.end(), data.begin() + 65000));
    }
  }
  const auto listing = client.list_all_objects("secure");
  CHECK(listing.objects.size() == 4);
  // The same objects over plain HTTP, from the same server.
  s3::client plain(config_for(live.endpoint()));
  CHECK(plain.head_object("secure", "tls/70000").size == 70000);
  // Kept-alive TLS sessions move between operations (each on a strand of its own) and are reused.
  CHECK(client.statistics().connections_opened <= config.parts_in_flight + 1);
  CHECK(client.statistics().retries == 0);

  // One connection, many operations: one TLS handshake. An IP literal is checked against the
  // certificate's IP SANs.
  config.endpoint = https_endpoint(live, "127.0.0.1");
  config.max_connections_per_host = 1;
  s3::client one(config);
  for (int i = 0; i < 20; ++i) CHECK(one.head_object("secure", "tls/1").size == 1);
  std::vector<std::byte> back(12 * mib + 3);
  CHECK(one.get_object("secure", "tls/12582915", sluice::host_region(back)) == back.size());
  const auto whole = pattern(back.size(), back.size() + 7);
  CHECK(std::equal(whole.begin(), whole.end(), back.begin()));
  // The server seals a large body's records in batches beside its TLS stream: the session goes on
  // after them (a range across batch and slice boundaries, then small answers), on one connection.
  std::vector<std::byte> part(5 * mib);
  CHECK(one.get_object("secure", "tls/12582915", sluice::host_region(part),
                       sluice::byte_range{3 * mib + 17, 5 * mib}) == part.size());
  CHECK(std::equal(part.begin(), part.end(), whole.begin() + 3 * mib + 17));
  for (int i = 0; i < 3; ++i) CHECK(one.head_object("secure", "tls/70000").size == 70000);
  std::vector<std::byte> small(70000);
  CHECK(one.get_object("secure", "tls/70000", sluice::host_region(small)) == small.size());
  const auto expected = pattern(70000, 70007);
  CHECK(std::equal(expected.begin(), expected.end(), small.begin()));
  CHECK(one.statistics().connections_opened == 1);
}

TEST_CASE("s3 client: https refuses a certificate it cannot verify, at once and without retries") {
  const test_certificate certificate("DNS:localhost,IP:127.0.0.1");
  live_server live(tls_defaults(certificate));
  // No CA bundle: the system's store, which does not hold the test's certificate.
  s3::client_config config = config_for(https_endpoint(live, "localhost"));
  config.max_retries = 3;
  config.retry_base_delay = 500ms;  // a retry would show in the time taken
  s3::client client(config);
  const auto start = std::chrono::steady_clock::now();
  error_code ec;
  client.create_bucket("refused", ec);
  CHECK(seconds_since(start) < 2.0);
  CHECK(ec.category() == s3::tls_verify_category());
  CHECK(ec.value() == X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT);
  CHECK(ec.message().starts_with("TLS certificate verification failed: "));
  MESSAGE("without the CA: " << ec.message());
  CHECK(client.statistics().retries == 0);
  CHECK(client.statistics().connections_opened == 1);
  CHECK(client.statistics().requests == 0);  // nothing was sent
  std::vector<std::byte> out(10);
  (void)client.get_object("refused", "k", sluice::host_region(out), {}, ec);
  CHECK(ec.category() == s3::tls_verify_category());
  error_code store_ec;
  CHECK(live.store.list_buckets(store_ec).empty());

  // A CA bundle that holds another certificate: refused the same way.
  const test_certificate stranger("DNS:localhost,IP:127.0.0.1");
  config.ca_bundle = stranger.certificate;
  s3::client other(config);
  other.create_bucket("refused", ec);
  CHECK(ec.category() == s3::tls_verify_category());
  CHECK(other.statistics().retries == 0);

  // A CA bundle that cannot be read, or holds no certificate: the client is not built.
  config.ca_bundle = certificate.dir / "missing.pem";
  CHECK_THROWS_WITH_AS(s3::client{config}, doctest::Contains("No such file"), std::invalid_argument);
  config.ca_bundle = certificate.key;
  CHECK_THROWS_WITH_AS(s3::client{config}, doctest::Contains("ca_bundle: no CA certificate"), std::invalid_argument);

  // https to a plain HTTP port: a TLS error, not retried.
  s3::client_config wrong = config_for("https://127.0.0.1:" + std::to_string(live.server.local_endpoint().port()));
  wrong.ca_bundle = certificate.certificate;
  s3::client confused(wrong);
  confused.create_bucket("refused", ec);
  CHECK(ec);
  CHECK(ec.category() == asio::error::get_ssl_category());
  MESSAGE("https to a plain HTTP port: " << ec.message());
  CHECK(confused.statistics().retries == 0);
}

TEST_CASE("s3 client: https refuses a certificate for another host name, verify_peer=false accepts it") {
  const test_certificate certificate("DNS:other.example");
  live_server live(tls_defaults(certificate));
  s3::client_config config = config_for(https_endpoint(live, "127.0.0.1"));
  config.ca_bundle = certificate.certificate;  // trusted, but for another name
  error_code ec;
  {
    s3::client client(config);
    client.create_bucket("names", ec);
    CHECK(ec.category() == s3::tls_verify_category());
    CHECK(ec.value() == X509_V_ERR_IP_ADDRESS_MISMATCH);
    MESSAGE("an IP literal the certificate does not name: " << ec.message());
    CHECK(client.statistics().retries == 0);
  }
  {
    config.endpoint = https_endpoint(live, "localhost");
    s3::client client(config);
    client.create_bucket("names", ec);
    CHECK(ec.category() == s3::tls_verify_category());
    CHECK(ec.value() == X509_V_ERR_HOSTNAME_MISMATCH);
    MESSAGE("a host name the certificate does not name: " << ec.message());
  }
  error_code store_ec;
  CHECK(live.store.list_buckets(store_ec).empty());
  {
    // Tests only: no verification at all (no CA bundle either).
    config.ca_bundle.clear();
    config.verify_peer = false;
    s3::client client(config);
    client.create_bucket("names", ec);
    CHECK_FALSE(ec);
    auto data = pattern(3 * mib, 9);
    client.put_object("names", "k", sluice::host_region(data));
    std::vector<std::byte> back(data.size());
    CHECK(client.get_object("names", "k", sluice::host_region(back)) == data.size());
    CHECK(back == data);
  }
}

TEST_CASE("s3 client: a TLS session whose close_notify came with the answer is not reused") {
  const test_certificate certificate("DNS:localhost,IP:127.0.0.1");
  closing_tls_server server(certificate,
                            [](std::size_t n) { return n <= 2 ? raw_server::slow_down() : raw_server::hello(); });
  s3::client_config config = config_for(server.endpoint());
  config.ca_bundle = certificate.certificate;
  s3::client client(config);
  std::vector<std::byte> out(16);
  CHECK(client.get_object("b", "k", sluice::host_region(out)) == 5);
  // Each attempt on a new connection: none is wasted on a session the server had ended (which
  // would fail with end_of_stream, and count as a retry the second time).
  CHECK(server.requests() == 3);
  CHECK(client.statistics().requests == 3);
  CHECK(client.statistics().retries == 2);
  CHECK(client.statistics().connections_opened == 3);
  CHECK(client.get_object("b", "k", sluice::host_region(out)) == 5);
  CHECK(client.statistics().requests == 4);
  CHECK(client.statistics().connections_opened == 4);
}

TEST_CASE("s3 client: an https handshake that gets no answer ends at request_timeout") {
  raw_server raw([](std::size_t) { return raw_server::action{raw_server::kind::hang, {}}; });
  s3::client_config config = config_for("https://127.0.0.1:" + raw.endpoint().substr(raw.endpoint().rfind(':') + 1));
  config.request_timeout = 1s;
  config.verify_peer = false;
  s3::client client(config);
  const auto start = std::chrono::steady_clock::now();
  error_code ec;
  (void)client.head_object("b", "k", ec);
  const double took = seconds_since(start);
  CHECK(ec == asio::error::timed_out);
  CHECK(took >= 0.9);
  CHECK(took < 3.0);
  CHECK(raw.requests() == 0);  // the client hello is no HTTP request
}

TEST_CASE("s3 client xml: ListBucketResult, Initiate and Complete results, Error bodies, ISO 8601") {
  namespace xml = s3::xml;
  error_code ec;
  const auto page = xml::parse_list_objects_v2(
      R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://doc.s3.amazonaws.com/2006-03-01/">
  <Name>b</Name><Prefix>a%20b/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys>
  <Delimiter>/</Delimiter><IsTruncated>true</IsTruncated><EncodingType>url</EncodingType>
  <NextContinuationToken>tok+en/=</NextContinuationToken>
  <Contents><Key>a%20b/c%26d</Key><LastModified>2013-09-17T18:07:53.000Z</LastModified>
    <ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag><Size>42</Size><StorageClass>STANDARD</StorageClass>
    <Unknown><Nested/></Unknown></Contents>
  <CommonPrefixes><Prefix>a%20b/d/</Prefix></CommonPrefixes>
</ListBucketResult>)",
      ec);
  REQUIRE_FALSE(ec);
  CHECK(page.bucket == "b");
  CHECK(page.prefix == "a b/");
  CHECK(page.truncated);
  CHECK(page.max_keys == 2);
  CHECK(page.next_continuation_token == "tok+en/=");
  REQUIRE(page.objects.size() == 1);
  CHECK(page.objects[0].key == "a b/c&d");
  CHECK(page.objects[0].size == 42);
  CHECK(page.objects[0].attributes.etag == "9b2cf535f27731c974343645a3985328");
  CHECK(xml::iso8601(page.objects[0].last_modified) == "2013-09-17T18:07:53.000Z");
  CHECK(page.common_prefixes == std::vector<std::string>{"a b/d/"});

  (void)xml::parse_list_objects_v2("<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>", ec);
  CHECK(ec == s3::errc::malformed_xml);
  (void)xml::parse_list_objects_v2("<Other/>", ec);
  CHECK(ec == s3::errc::malformed_xml);
  (void)xml::parse_list_objects_v2("<ListBucketResult><MaxKeys>x</MaxKeys>", ec);
  CHECK(ec == s3::errc::malformed_xml);

  const auto initiated = xml::parse_initiate_multipart_upload(
      "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>u-1</UploadId>"
      "</InitiateMultipartUploadResult>",
      ec);
  CHECK_FALSE(ec);
  CHECK(initiated == xml::initiate_multipart_upload_result{"b", "k", "u-1"});
  (void)xml::parse_initiate_multipart_upload("<InitiateMultipartUploadResult/>", ec);
  CHECK(ec == s3::errc::malformed_xml);

  const auto completed =
      xml::parse_complete_multipart_upload_result(xml::complete_multipart_upload("/b/k", "b", "k", "abc-2"), ec);
  CHECK_FALSE(ec);
  CHECK(completed.etag == "abc-2");
  (void)xml::parse_complete_multipart_upload_result(xml::error_body("InternalError", "later", "/b/k", "1"), ec);
  CHECK(ec == s3::errc::internal_error);

  const auto error = xml::parse_error(xml::error_body("NoSuchKey", "The key does not exist", "/b/k", "r1"), ec);
  CHECK_FALSE(ec);
  CHECK(error.code == "NoSuchKey");
  CHECK(error.value() == s3::errc::no_such_key);
  CHECK(error.message == "The key does not exist");
  CHECK(error.request_id == "r1");
  (void)xml::parse_error("<Error><Message>no code</Message></Error>", ec);
  CHECK(ec == s3::errc::malformed_xml);

  const auto buckets = xml::parse_list_buckets(
      xml::list_buckets("id", "name", std::vector<sluice::bucket_info>{{"one", {}}, {"two", {}}}), ec);
  CHECK_FALSE(ec);
  REQUIRE(buckets.size() == 2);
  CHECK(buckets[1].name == "two");

  // ListMultipartUploads as the server writes it, and a truncated page of another server.
  const auto initiated_at = std::chrono::system_clock::time_point(std::chrono::seconds(1700000000));
  const std::vector<sluice::upload_info> in_progress{{"a/k", "u-1", initiated_at, {}}, {"b", "u-2", {}, {}}};
  const auto uploads =
      xml::parse_list_multipart_uploads(xml::list_multipart_uploads("bk", "", in_progress, "id", "name"), ec);
  CHECK_FALSE(ec);
  REQUIRE(uploads.uploads.size() == 2);
  CHECK(uploads.uploads[0].key == "a/k");
  CHECK(uploads.uploads[0].upload_id == "u-1");
  CHECK(uploads.uploads[0].initiated == initiated_at);
  CHECK(uploads.uploads[1].upload_id == "u-2");
  CHECK_FALSE(uploads.truncated);
  const auto uploads_page = xml::parse_list_multipart_uploads(
      "<ListMultipartUploadsResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><EncodingType>url</EncodingType>"
      "<IsTruncated>true</IsTruncated><NextKeyMarker>a%20b</NextKeyMarker><NextUploadIdMarker>u-9</NextUploadIdMarker>"
      "<Upload><Key>a%20b</Key><UploadId>u-9</UploadId></Upload></ListMultipartUploadsResult>",
      ec);
  CHECK_FALSE(ec);
  CHECK(uploads_page.truncated);
  CHECK(uploads_page.next_key_marker == "a b");
  CHECK(uploads_page.next_upload_id_marker == "u-9");
  REQUIRE(uploads_page.uploads.size() == 1);
  CHECK(uploads_page.uploads[0].key == "a b");
  (void)xml::parse_list_multipart_uploads(
      "<ListMultipartUploadsResult><Upload><Key>k</Key></Upload></ListMultipartUploadsResult>", ec);
  CHECK(ec == s3::errc::malformed_xml);  // an upload without its id
  (void)xml::parse_list_multipart_uploads("<ListBucketResult/>", ec);
  CHECK(ec == s3::errc::malformed_xml);

  // The request body the client writes is what the server parses.
  const std::vector<xml::completed_part> parts{{1, "aa", {}}, {2, "bb", {{"crc32", "AAAAAA=="}}}};
  const auto parsed = xml::parse_complete_multipart_upload(xml::complete_multipart_upload_request(parts), ec);
  CHECK_FALSE(ec);
  CHECK(parsed == parts);
  CHECK(xml::create_bucket_configuration("us-east-1").empty());
  CHECK(xml::parse_create_bucket_configuration(xml::create_bucket_configuration("eu-west-1"), ec) == "eu-west-1");

  CHECK(xml::parse_iso8601("2013-09-17T18:07:53Z"));
  CHECK(xml::parse_iso8601("2013-09-17T18:07:53.123456+00:00"));
  CHECK_FALSE(xml::parse_iso8601("2013-02-30T18:07:53Z"));
  CHECK_FALSE(xml::parse_iso8601("2013-09-17 18:07:53Z"));
  CHECK_FALSE(xml::parse_iso8601("2013-09-17T18:07:53"));
}
