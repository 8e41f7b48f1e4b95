// SPDX-License-Identifier: Apache-2.0
// rdma_probe: one hand-made x-amz-rdma-token request against a running `sluice serve`, for the
// cases the sluice client never sends (tests/integration/rdma_test.py runs it). It opens a
// fabric::client_plane, registers a buffer poisoned with 0xA5, builds the token (grant_access,
// or decode/modify/encode), signs the request itself with s3::sign so that it decides which
// headers are signed, sends it over a plain socket and checks the answer and the buffer.
//
//   rdma_probe [--provider tcp|shm] [--access-key AK] [--secret-key SK] [--region R]
//              MODE ENDPOINT BUCKET KEY [OFFSET LENGTH [OUT]]
//
// Modes:
//   range OFFSET LENGTH [OUT]  ranged GET by RDMA: 206, x-amz-rdma-reply 206, bytes-transferred
//                              LENGTH, Content-Length 0, nothing written past LENGTH; the bytes
//                              go to OUT (default: stdout)
//   expired    a token that expired an hour ago, and one that expires this second: 400 InvalidRDMAToken
//   short      a token whose segment is one byte shorter than the object: 400 InvalidRDMAToken
//   tampered   signed with one token, sent with another: 403 SignatureDoesNotMatch
//   unsigned   the token header left out of SignedHeaders: 400 InvalidRDMAToken
//   vanish     a GET of the whole object by RDMA; _exit(0) once its first bytes landed (mid-transfer)
//   vanish-now as vanish, but _exit(0) right after the request is written
//   name       prints the client endpoint's address (what tokens carry), e.g. 10.77.0.2:41234
//   unreachable SECONDS THREADS
//              THREADS threads send GETs for SECONDS, each with a token naming the same peer
//              that nobody serves (tcp: a well-formed sockaddr_in for 127.0.0.1:1; shm: the
//              name of an endpoint of a process that has exited): every answer
//              must be an HTTP answer other than a transfer by RDMA, and the buffer untouched
// expired, short, tampered and unsigned also check that the buffer is untouched (all 0xA5).
// Exit status: 0 when the expectation holds, 1 when it does not (with a message), 2 on usage.
#include <sluice/fabric/s3_plane.hpp>

#include <sluice/s3/rdma_token.hpp>
#include <sluice/s3/sigv4.hpp>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using namespace sluice;
using namespace std::chrono_literals;

constexpr std::byte poison{0xA5};

struct options {
  std::string provider = "tcp";
  std::string access_key = "AK";
  std::string secret_key = "SK";
  std::string region = "us-east-1";
  std::vector<std::string> positional;
};

int usage() {
  std::fprintf(stderr,
               "usage: rdma_probe [--provider tcp|shm] [--access-key AK] [--secret-key SK] [--region R]\n"
               "                  range|expired|short|tampered|unsigned|vanish|vanish-now|stall|name|\n"
               "                  put-garbage-endpoint|put-far-address|put-vanish|unreachable ENDPOINT BUCKET KEY\n"
               "                  [OFFSET LENGTH [OUT] | SECONDS THREADS]\n");
  return 2;
}

/// A failed expectation: the message is printed and the probe exits 1.
struct failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void require(bool condition, const std::string& what) {
  if (!condition) throw failure(what);
  std::fprintf(stderr, "  ok: %s\n", what.c_str());
}

struct answer {
  unsigned status = 0;
  std::string body;
  std::map<std::string, std::string, std::less<>> fields;  // lower-case names
  [[nodiscard]] std::string field(std::string_view name) const {
    const auto it = fields.find(name);
    return it == fields.end() ? std::string() : it->second;
  }
  [[nodiscard]] std::string describe() const {
    return "HTTP " + std::to_string(status) + " x-amz-rdma-reply '" + field("x-amz-rdma-reply") + "' body '" +
           body.substr(0, 400) + "'";
  }
};

/// One HTTP/1.1 connection to the server; requests are signed by the caller.
class connection {
 public:
  connection(const std::string& host, const std::string& port) : stream_(io_) {
    asio::ip::tcp::resolver resolver(io_);
    stream_.connect(resolver.resolve(host, port));
  }

  /// Writes `headers` (already signed, in order) as a request.
  void send(http::verb method, const std::string& target,
            const std::vector<std::pair<std::string, std::string>>& headers) {
    http::request<http::empty_body> req{method, target, 11};
    for (const auto& [name, value] : headers) req.set(name, value);
    req.set(http::field::user_agent, "sluice-rdma-probe");
    http::write(stream_, req);
  }

  answer receive(bool head) {
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 * 1024 * 1024);
    parser.skip(head);
    http::read(stream_, buffer, parser);
    answer out;
    const auto& res = parser.get();
    out.status = res.result_int();
    out.body = res.body();
    for (const auto& f : res) {
      std::string name(f.name_string());
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      out.fields[name] = std::string(f.value());
    }
    return out;
  }

 private:
  asio::io_context io_;
  beast::tcp_stream stream_;
};

struct target_object {
  std::string host;  // host[:port] as the Host header carries it
  std::string connect_host;
  std::string port;
  std::string path;  // /bucket/key, encoded
};

std::optional<target_object> parse_endpoint(std::string_view url, std::string_view bucket, std::string_view key) {
  if (!url.starts_with("http://")) return std::nullopt;
  url.remove_prefix(7);
  url = url.substr(0, url.find('/'));
  target_object t;
  t.host = std::string(url);
  const auto colon = url.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  t.connect_host = std::string(url.substr(0, colon));
  t.port = std::string(url.substr(colon + 1));
  t.path = "/" + s3::uri_encode(bucket, true) + "/" + s3::uri_encode(key, false);
  return t;
}

/// Signs `headers` (host first) for `method` on `path` with an empty payload.
void sign_request(const options& opt, std::string_view method, const std::string& path,
                  std::vector<std::pair<std::string, std::string>>& headers) {
  s3::sign(method, path, headers, s3::empty_payload_sha256, {opt.access_key, opt.secret_key}, opt.region,
           std::chrono::system_clock::now());
}

std::uint64_t object_size(const options& opt, const target_object& t) {
  std::vector<std::pair<std::string, std::string>> headers{{"host", t.host}};
  sign_request(opt, "HEAD", t.path, headers);
  connection c(t.connect_host, t.port);
  c.send(http::verb::head, t.path, headers);
  const answer a = c.receive(true);
  if (a.status != 200) throw failure("HEAD " + t.path + ": " + a.describe());
  return std::stoull(a.field("content-length"));
}

/// An endpoint name as "a.b.c.d:port" or "[v6]:port" when it is a socket address, as text when it
/// is a string, else hex.
std::string describe_name(std::span<const std::byte> name) {
  char text[INET6_ADDRSTRLEN] = {};
  if (name.size() >= sizeof(sockaddr_in) && name.size() < sizeof(sockaddr_in6)) {
    sockaddr_in in{};
    std::memcpy(&in, name.data(), sizeof in);
    if (in.sin_family == AF_INET && ::inet_ntop(AF_INET, &in.sin_addr, text, sizeof text) != nullptr) {
      return std::string(text) + ":" + std::to_string(ntohs(in.sin_port));
    }
  }
  if (name.size() >= sizeof(sockaddr_in6)) {
    sockaddr_in6 in6{};
    std::memcpy(&in6, name.data(), sizeof in6);
    if (in6.sin6_family == AF_INET6 && ::inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof text) != nullptr) {
      return "[" + std::string(text) + "]:" + std::to_string(ntohs(in6.sin6_port));
    }
  }
  // shm and other string-addressed providers: a NUL-terminated name, e.g. "fi_shm://1234:0:0".
  const bool text_name =
      !name.empty() && name.back() == std::byte{0} && std::all_of(name.begin(), name.end() - 1, [](std::byte b) {
        return std::to_integer<unsigned>(b) >= 0x20 && std::to_integer<unsigned>(b) < 0x7f;
      });
  if (text_name) return std::string(reinterpret_cast<const char*>(name.data()), name.size() - 1);
  std::string hex;
  for (const std::byte b : name) {
    constexpr std::string_view digits = "0123456789abcdef";
    hex += digits[std::to_integer<unsigned>(b) >> 4U];
    hex += digits[std::to_integer<unsigned>(b) & 0xFU];
  }
  return hex;
}

bool untouched(std::span<const std::byte> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == poison; });
}

/// Sends one GET whose headers are `headers` after signing `signed_headers` (which start with
/// host): headers the caller adds after signing are sent unsigned, and `replace` swaps values.
answer get(const options& opt, const target_object& t, std::vector<std::pair<std::string, std::string>> headers,
           const std::vector<std::pair<std::string, std::string>>& unsigned_extra = {},
           const std::optional<std::pair<std::string, std::string>>& replace = std::nullopt) {
  sign_request(opt, "GET", t.path, headers);
  for (const auto& h : unsigned_extra) headers.push_back(h);
  if (replace) {
    for (auto& [name, value] : headers) {
      if (name == replace->first) value = replace->second;
    }
  }
  connection c(t.connect_host, t.port);
  c.send(http::verb::get, t.path, headers);
  return c.receive(false);
}

std::string with_expiry(const std::string& token_text, std::uint64_t expires) {
  error_code ec;
  s3::rdma_token token = s3::decode_rdma_token(token_text, ec);
  if (ec) throw failure("the plane's own token does not decode: " + ec.message());
  token.expires = expires;
  return s3::encode_rdma_token(token);
}

std::uint64_t unix_now() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

void expect_error(const answer& a, unsigned status, std::string_view code, std::span<const std::byte> buffer,
                  const std::string& what) {
  require(a.status == status && a.body.find("<Code>" + std::string(code) + "</Code>") != std::string::npos,
          what + ": " + std::to_string(status) + " " + std::string(code) + " (got " + a.describe() + ")");
  require(a.field("x-amz-rdma-bytes-transferred").empty(), what + ": no x-amz-rdma-bytes-transferred");
  // Any RMA would have completed before the answer; wait a little anyway for a stray one.
  std::this_thread::sleep_for(100ms);
  require(untouched(buffer), what + ": the buffer is untouched (all 0xA5)");
}

int run(const options& opt) {
  const auto& p = opt.positional;
  if (p.size() < 4) return usage();
  const std::string& mode = p[0];
  const auto t = parse_endpoint(p[1], p[2], p[3]);
  if (!t) return usage();

  fabric::client_plane_config plane_config;
  plane_config.fabric.provider = opt.provider == "tcp" ? "tcp;ofi_rxm" : opt.provider;
  const bool local = t->connect_host.starts_with("127.") || t->connect_host == "localhost";
  if (local) plane_config.fabric.node = "127.0.0.1";  // as the CLI does
  error_code ec;
  const auto plane = fabric::client_plane::open(plane_config, local, ec);
  if (ec) throw failure("cannot open the client plane on " + plane_config.fabric.provider + ": " + ec.message());
  const auto expires_soon = std::chrono::system_clock::now() + 5min;

  if (mode == "name") {
    // The address a server would RMA to: the endpoint name the plane puts in its tokens.
    std::cout << describe_name(plane->get_endpoint()->name()) << "\n";
    return 0;
  }
  if (mode == "range") {
    if (p.size() < 6) return usage();
    const std::uint64_t offset = std::stoull(p[4]);
    const std::uint64_t length = std::stoull(p[5]);
    if (length == 0) return usage();
    // The grant covers a guard page past the range: the server must move exactly LENGTH bytes.
    std::vector<std::byte> buffer(length + 4096, poison);
    const auto grant = plane->grant_access(host_region(buffer), s3::rdma_op::write, expires_soon, ec);
    if (ec) throw failure("grant_access: " + ec.message());
    const answer a = get(opt, *t,
                         {{"host", t->host},
                          {"range", "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + length - 1)},
                          {"x-amz-rdma-token", grant->token()}});
    require(a.status == 206, "ranged GET: 206 (got " + a.describe() + ")");
    require(a.field("x-amz-rdma-reply") == "206", "x-amz-rdma-reply: 206");
    require(a.field("x-amz-rdma-bytes-transferred") == std::to_string(length),
            "x-amz-rdma-bytes-transferred: " + std::to_string(length) + " (got '" +
                a.field("x-amz-rdma-bytes-transferred") + "')");
    require(a.field("content-length") == "0" && a.body.empty(), "Content-Length: 0 and no body");
    require(a.field("content-range")
                .starts_with("bytes " + std::to_string(offset) + "-" + std::to_string(offset + length - 1) + "/"),
            "Content-Range names the range (got '" + a.field("content-range") + "')");
    require(untouched(std::span(buffer).subspan(length)), "nothing written past the range (guard page all 0xA5)");
    const auto* data = reinterpret_cast<const char*>(buffer.data());
    if (p.size() > 6 && p[6] != "-") {
      std::ofstream out(p[6], std::ios::binary);
      out.write(data, static_cast<std::streamsize>(length));
      if (!out) throw failure("cannot write " + p[6]);
    } else {
      std::cout.write(data, static_cast<std::streamsize>(length));
      std::cout.flush();
    }
    return 0;
  }

  const std::uint64_t size = object_size(opt, *t);
  if (size < 2) throw failure("the probe needs an object of at least 2 bytes");
  std::vector<std::byte> buffer(size, poison);
  const auto whole = host_region(buffer);

  if (mode == "expired") {
    const auto grant = plane->grant_access(whole, s3::rdma_op::write, std::chrono::system_clock::now() - 1h, ec);
    if (ec) throw failure("grant_access: " + ec.message());
    const answer a = get(opt, *t, {{"host", t->host}, {"x-amz-rdma-token", grant->token()}});
    expect_error(a, 400, "InvalidRDMAToken", buffer, "a token that expired an hour ago");
    // The token is invalid from its `expires` second on: this second is already too late.
    const answer b = get(opt, *t, {{"host", t->host}, {"x-amz-rdma-token", with_expiry(grant->token(), unix_now())}});
    expect_error(b, 400, "InvalidRDMAToken", buffer, "a token that expires this second");
    return 0;
  }
  if (mode == "short") {
    const auto grant = plane->grant_access(whole, s3::rdma_op::write, expires_soon, ec);
    if (ec) throw failure("grant_access: " + ec.message());
    s3::rdma_token token = s3::decode_rdma_token(grant->token(), ec);
    if (ec || token.segments.size() != 1) throw failure("the plane's own token does not decode to one segment");
    token.segments[0].length -= 1;
    const answer a = get(opt, *t, {{"host", t->host}, {"x-amz-rdma-token", s3::encode_rdma_token(token)}});
    expect_error(a, 400, "InvalidRDMAToken", buffer, "a segment one byte shorter than the object");
    return 0;
  }
  if (mode == "tampered") {
    // Both tokens lie inside the registered memory; only the signed one may be used.
    std::vector<std::byte> bigger(size + 4096, poison);
    const auto grant = plane->grant_access(host_region(bigger), s3::rdma_op::write, expires_soon, ec);
    if (ec) throw failure("grant_access: " + ec.message());
    s3::rdma_token token = s3::decode_rdma_token(grant->token(), ec);
    if (ec || token.segments.size() != 1) throw failure("the plane's own token does not decode to one segment");
    token.segments[0].address += 4096;
    token.segments[0].length -= 4096;
    const std::string other = s3::encode_rdma_token(token);
    const answer a = get(opt, *t, {{"host", t->host}, {"x-amz-rdma-token", grant->token()}}, {},
                         std::pair<std::string, std::string>{"x-amz-rdma-token", other});
    expect_error(a, 403, "SignatureDoesNotMatch", bigger, "a token swapped after signing");
    return 0;
  }
  if (mode == "unsigned") {
    const auto grant = plane->grant_access(whole, s3::rdma_op::write, expires_soon, ec);
    if (ec) throw failure("grant_access: " + ec.message());
    const answer a = get(opt, *t, {{"host", t->host}}, {{"x-amz-rdma-token", grant->token()}});
    expect_error(a, 400, "InvalidRDMAToken", buffer, "a token header outside SignedHeaders");
    return 0;
  }
  if (mode == "garbage-endpoint" || mode == "wrong-key" || mode == "far-address") {
    // Tokens the server cannot serve, signed by a real user: an endpoint name of all 0xff bytes
    // (of the provider's length), a key the memory was not registered with, an address 1 GiB
    // past the registered memory. The request may fail or be declined (the body then comes over
    // HTTP); it must not hang, crash the server or spoil later requests (rdma_test.py checks).
    const auto grant = plane->grant_access(whole, s3::rdma_op::write, expires_soon, ec);
    if (ec) throw failure("grant_access: " + ec.message());
    s3::rdma_token token = s3::decode_rdma_token(grant->token(), ec);
    if (ec || token.segments.size() != 1) throw failure("the plane's own token does not decode to one segment");
    if (mode == "garbage-endpoint") std::fill(token.endpoint.begin(), token.endpoint.end(), std::byte{0xff});
    if (mode == "wrong-key") token.segments[0].key ^= 0x5a5a5a5aULL;
    if (mode == "far-address") token.segments[0].address += 1ULL << 30;
    const auto start = std::chrono::steady_clock::now();
    const answer a = get(opt, *t, {{"host", t->host}, {"x-amz-rdma-token", s3::encode_rdma_token(token)}});
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "  %s: %s, x-amz-rdma-reply '%s', %.1f s\n", mode.c_str(), a.describe().c_str(),
                 a.field("x-amz-rdma-reply").c_str(), took);
    require(a.status != 0, mode + ": the server answered");
    const bool by_rdma = a.field("x-amz-rdma-reply") == "200";
    // shm (libfabric 1.17) does not check keys: the server's write then lands where the client's
    // own token said, in this buffer (nobody else's memory). Every other case must not land.
    if (!(mode == "wrong-key" && opt.provider == "shm")) {
      require(!by_rdma, mode + ": not answered as moved by RDMA");
      std::this_thread::sleep_for(100ms);
      require(untouched(buffer), mode + ": the buffer is untouched (all 0xA5)");
    }
    return 0;
  }
  if (mode == "unreachable") {
    // Concurrent requests whose tokens name one peer that refuses every connection: the
    // server's transfers to it fail (or time out) at once, each on the same address-vector entry
    // and endpoint while others still use them.
    if (p.size() < 6) return usage();
    const double seconds = std::stod(p[4]);
    const int threads = std::stoi(p[5]);
    const auto grant = plane->grant_access(whole, s3::rdma_op::write, expires_soon, ec);
    if (ec) throw failure("grant_access: " + ec.message());
    s3::rdma_token token = s3::decode_rdma_token(grant->token(), ec);
    if (ec) throw failure("the plane's own token does not decode");
    if (opt.provider == "tcp") {
      if (token.endpoint.size() < sizeof(sockaddr_in)) throw failure("the plane's own token has no sockaddr_in");
      sockaddr_in nobody{};
      nobody.sin_family = AF_INET;
      nobody.sin_port = htons(1);
      nobody.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      std::fill(token.endpoint.begin(), token.endpoint.end(), std::byte{0});
      std::memcpy(token.endpoint.data(), &nobody, sizeof nobody);
    } else {
      // shm: the name of an endpoint of a process that is gone (a child that exited at once).
      const pid_t child = ::fork();
      if (child == 0) ::_exit(0);
      int status = 0;
      ::waitpid(child, &status, 0);
      const std::string name = "fi_shm://" + std::to_string(child) + ":0:0";
      token.endpoint.resize(name.size() + 1);
      std::memcpy(token.endpoint.data(), name.c_str(), name.size() + 1);
    }
    const std::string text = s3::encode_rdma_token(token);
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    std::atomic<std::uint64_t> answered{0};
    std::atomic<bool> wrong{false};
    std::string first_wrong;
    std::mutex wrong_mutex;
    std::vector<std::thread> senders;
    for (int i = 0; i < threads; ++i) {
      senders.emplace_back([&] {
        while (std::chrono::steady_clock::now() < until && !wrong) {
          answer a;
          try {
            a = get(opt, *t, {{"host", t->host}, {"x-amz-rdma-token", text}});
          } catch (const std::exception& e) {
            a.body = std::string("no answer: ") + e.what();
          }
          if (a.status == 0 || a.field("x-amz-rdma-reply") == "200") {
            const std::lock_guard lock(wrong_mutex);
            if (!wrong.exchange(true)) first_wrong = a.describe();
          }
          ++answered;
        }
      });
    }
    for (auto& s : senders) s.join();
    std::fprintf(stderr, "  unreachable: %llu requests answered in %.0f s by %d threads\n",
                 static_cast<unsigned long long>(answered.load()), seconds, threads);
    require(!wrong, "unreachable: every request answered, none as moved by RDMA" +
                        (first_wrong.empty() ? std::string() : " (got " + first_wrong + ")"));
    require(untouched(buffer), "unreachable: the buffer is untouched (all 0xA5)");
    return 0;
  }
  if (mode == "put-garbage-endpoint" || mode == "put-far-address" || mode == "put-vanish") {
    // PUTs by RDMA of the object's own size over the object, which the server cannot complete:
    // an endpoint name of all 0xff bytes, an address 1 GiB past the registered memory, a client
    // that exits right after sending the request (the server reads from a process that is gone).
    // The request fails or is declined; the object must stay as it was (no part of a PUT is ever
    // published) and the server must serve on (rdma_test.py checks both). put-vanish races the
    // server's reads: when they finish before this process is gone (a loaded machine), the PUT is
    // whole and published, all 0x3c.
    std::fill(buffer.begin(), buffer.end(), std::byte{0x3c});
    const auto grant = plane->grant_access(whole, s3::rdma_op::read, expires_soon, ec);
    if (ec) throw failure("grant_access: " + ec.message());
    s3::rdma_token token = s3::decode_rdma_token(grant->token(), ec);
    if (ec || token.segments.size() != 1) throw failure("the plane's own token does not decode to one segment");
    if (mode == "put-garbage-endpoint") std::fill(token.endpoint.begin(), token.endpoint.end(), std::byte{0xff});
    if (mode == "put-far-address") token.segments[0].address += 1ULL << 30;
    std::vector<std::pair<std::string, std::string>> headers{{"host", t->host},
                                                             {"x-amz-decoded-content-length", std::to_string(size)},
                                                             {"x-amz-rdma-token", s3::encode_rdma_token(token)}};
    sign_request(opt, "PUT", t->path, headers);
    const auto start = std::chrono::steady_clock::now();
    connection c(t->connect_host, t->port);
    c.send(http::verb::put, t->path, headers);
    if (mode == "put-vanish") {
      std::fprintf(stderr, "  put-vanish: vanishing right after the request\n");
      std::fflush(stderr);
      ::_exit(0);
    }
    const answer a = c.receive(false);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "  %s: %s, %.1f s\n", mode.c_str(), a.describe().c_str(), took);
    require(a.status != 0 && a.status != 200, mode + ": the server answered, not with 200");
    return 0;
  }
  if (mode == "vanish" || mode == "vanish-now" || mode == "stall") {
    const auto grant = plane->grant_access(whole, s3::rdma_op::write, expires_soon, ec);
    if (ec) throw failure("grant_access: " + ec.message());
    std::vector<std::pair<std::string, std::string>> headers{{"host", t->host}, {"x-amz-rdma-token", grant->token()}};
    sign_request(opt, "GET", t->path, headers);
    connection c(t->connect_host, t->port);
    c.send(http::verb::get, t->path, headers);
    if (mode == "vanish-now") {
      std::fprintf(stderr, "  vanishing right after the request\n");
      std::fflush(stderr);
      ::_exit(0);
    }
    // Gone once the first bytes landed, while the rest is still on its way.
    const std::span<const std::byte> head = std::span(buffer).first(std::min<std::size_t>(buffer.size(), 64));
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (untouched(head)) {
      if (std::chrono::steady_clock::now() > deadline) throw failure("vanish: no byte landed within 20 s");
      std::this_thread::sleep_for(1ms);
    }
    const bool tail_untouched = untouched(std::span(buffer).last(64));
    std::fprintf(stderr, "  %s after the first bytes landed (%s)\n",
                 mode == "stall" ? "stopping itself (SIGSTOP)" : "vanishing",
                 tail_untouched ? "the last bytes had not: mid-transfer" : "the last bytes too: transfer done");
    std::fflush(stderr);
    // stall: alive, its endpoint and memory still there, but no thread of it runs (a tcp peer's
    // receive window closes): the server's transfer neither completes nor fails until it times
    // out, unless something cuts it. The test kills it.
    if (mode == "stall") ::raise(SIGSTOP);
    ::_exit(0);
  }
  return usage();
}

}  // namespace

int main(int argc, char** argv) {
  options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string_view word = argv[i];
    const auto value = [&](std::string& into) {
      if (i + 1 >= argc) return false;
      into = argv[++i];
      return true;
    };
    bool ok = true;
    if (word == "--provider") {
      ok = value(opt.provider);
    } else if (word == "--access-key") {
      ok = value(opt.access_key);
    } else if (word == "--secret-key") {
      ok = value(opt.secret_key);
    } else if (word == "--region") {
      ok = value(opt.region);
    } else if (word.starts_with("--")) {
      ok = false;
    } else {
      opt.positional.emplace_back(word);
    }
    if (!ok) return usage();
  }
  try {
    const int status = run(opt);
    if (status == 0) std::fprintf(stderr, "PASSED: rdma_probe %s\n", opt.positional[0].c_str());
    return status;
  } catch (const failure& f) {
    std::fprintf(stderr, "FAILED: rdma_probe: %s\n", f.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED: rdma_probe: %s\n", e.what());
  }
  return 1;
}
