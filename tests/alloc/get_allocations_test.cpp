// SPDX-License-Identifier: Apache-2.0
// Heap allocations per 4 KiB GET of the S3 server, counted: the test fails when they rise above
// the figure the server holds today (docs/performance.md "Many small objects" gives the figure; issue 43 the target).
//
// This executable replaces malloc, calloc, realloc and free with counting forwarders to glibc's
// allocator (everything the server allocates, OpenSSL and the C++ runtime included, comes through
// them). A real server (fs_store on disk, one io thread) answers presigned keep-alive GETs on
// loopback from a client that allocates nothing while it is counted. Not built under the
// sanitizers: they bring their own malloc.
#include <sluice/s3/fs_store.hpp>
#include <sluice/s3/server.hpp>
#include <sluice/s3/sigv4.hpp>

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

extern "C" {
void* __libc_malloc(std::size_t size);                 // NOLINT(bugprone-reserved-identifier)
void* __libc_calloc(std::size_t n, std::size_t size);  // NOLINT(bugprone-reserved-identifier)
void* __libc_realloc(void* p, std::size_t size);       // NOLINT(bugprone-reserved-identifier)
void __libc_free(void* p);                             // NOLINT(bugprone-reserved-identifier)
}

namespace {
std::atomic<bool> counting{false};
std::atomic<std::uint64_t> allocations{0};
void count() noexcept {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

extern "C" {
void* malloc(std::size_t size) {  // NOLINT(cert-dcl58-cpp)
  count();
  return __libc_malloc(size);
}
void* calloc(std::size_t n, std::size_t size) {  // NOLINT(cert-dcl58-cpp)
  count();
  return __libc_calloc(n, size);
}
void* realloc(void* p, std::size_t size) {  // NOLINT(cert-dcl58-cpp)
  count();
  return __libc_realloc(p, size);
}
void free(void* p) { __libc_free(p); }  // NOLINT(cert-dcl58-cpp)
}

namespace {

// Allocations per GET the server makes today: a change that adds one fails here. Lower it as the
// server sheds them (issue 43's target is 4). 2 in this debug build with Boost 1.81 (7 with 1.74,
// whose Asio recycled one block per thread): the store's mapping behind any_mapping, and one of
// Asio's handler operations. Coroutine frames and Beast's timer waits come from Asio's per-thread
// recycling cache.
constexpr double allowed_per_get = 2;

// A blocking client on one socket that sends a fixed request and reads one answer into a fixed
// buffer: nothing on the heap once connected.
class raw_client {
 public:
  explicit raw_client(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0);
  }
  ~raw_client() { ::close(fd_); }
  raw_client(const raw_client&) = delete;
  raw_client& operator=(const raw_client&) = delete;

  // Sends `request` and returns the status and the body of the answer (a view of the buffer).
  std::pair<int, std::string_view> exchange(std::string_view request) {
    for (std::size_t sent = 0; sent < request.size();) {
      const ssize_t n = ::send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return {0, {}};
      sent += static_cast<std::size_t>(n);
    }
    std::size_t have = 0;
    std::size_t header_end = std::string_view::npos;
    std::size_t length = 0;
    while (true) {
      const std::string_view seen(buffer_.data(), have);
      if (header_end == std::string_view::npos && (header_end = seen.find("\r\n\r\n")) != std::string_view::npos) {
        header_end += 4;
        const auto at = seen.find("Content-Length: ");
        if (at == std::string_view::npos || at > header_end) return {0, {}};
        const char* digits = seen.data() + at + 16;
        std::from_chars(digits, seen.data() + header_end, length);
      }
      if (header_end != std::string_view::npos && have >= header_end + length) break;
      if (have == buffer_.size()) return {0, {}};
      const ssize_t n = ::recv(fd_, buffer_.data() + have, buffer_.size() - have, 0);
      if (n <= 0) return {0, {}};
      have += static_cast<std::size_t>(n);
    }
    int status = 0;
    std::from_chars(buffer_.data() + 9, buffer_.data() + 12, status);  // "HTTP/1.1 200"
    return {status, std::string_view(buffer_.data() + header_end, length)};
  }

 private:
  int fd_ = -1;
  std::array<char, 64 * 1024> buffer_{};
};

std::string presigned_request(std::string_view method, std::string_view path, std::uint16_t port,
                              std::string_view body) {
  const std::string host = "127.0.0.1:" + std::to_string(port);
  const sluice::s3::credentials creds{"AKALLOCATIONS", "allocation-test-secret"};
  const std::string query = sluice::s3::presign(method, host, path, "", creds, "us-east-1",
                                                std::chrono::system_clock::now(), std::chrono::hours(1));
  std::string out;
  out.append(method).append(" ").append(path).append("?").append(query).append(" HTTP/1.1\r\n");
  out.append("Host: ").append(host).append("\r\nUser-Agent: alloc-test\r\nAccept: */*\r\n");
  if (method == "PUT") out.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
  out.append("\r\n").append(body);
  return out;
}

}  // namespace

TEST_CASE("a 4 KiB GET allocates no more than the server's figure") {
  const auto root = std::filesystem::temp_directory_path() / ("sluice-alloc-" + std::to_string(::getpid()));
  std::filesystem::remove_all(root);
  sluice::error_code ec;
  auto store = sluice::s3::fs_store::open({root, 5ULL << 40, false}, ec);
  REQUIRE_FALSE(ec);
  sluice::s3::server_config config;
  config.port = 0;
  config.users = {{"AKALLOCATIONS", "allocation-test-secret"}};
  config.io_threads = 1;
  sluice::s3::server server(*store, config);
  server.listen();
  const std::uint16_t port = server.local_endpoint().port();
  {
    raw_client client(port);
    REQUIRE(client.exchange(presigned_request("PUT", "/alloc", port, "")).first == 200);
    const std::string object(4096, 'x');
    REQUIRE(client.exchange(presigned_request("PUT", "/alloc/object", port, object)).first == 200);
    const std::string get = presigned_request("GET", "/alloc/object", port, "");
    for (int i = 0; i < 200; ++i) REQUIRE(client.exchange(get).second == object);  // warm: buffers grown

    constexpr int gets = 1000;
    int good = 0;
    allocations = 0;
    counting = true;
    for (int i = 0; i < gets; ++i) {
      const auto [status, body] = client.exchange(get);
      good += static_cast<int>(status == 200 && body.size() == object.size() && body.front() == 'x');
    }
    counting = false;
    CHECK(good == gets);
    const double per_get = static_cast<double>(allocations.load()) / gets;
    MESSAGE("heap allocations per 4 KiB GET: " << per_get << " (allowed " << allowed_per_get << ")");
    // The server's other work (timers, a thread's first use of a buffer) may allocate now and then
    // while the GETs run: 0.05 per GET of slack, against the 1 per GET that a new allocation adds.
    CHECK(per_get <= allowed_per_get + 0.05);
  }
  server.stop();
  store.reset();
  std::filesystem::remove_all(root);
}
