// SPDX-License-Identifier: Apache-2.0
// Fuzz target: whole byte streams (several requests, body bytes, garbage, cut anywhere) through
// the S3 server's real connection handling, over loopback TCP, in process. One
// sluice::s3::server is started on the first input (io_threads 1, timeouts 1 s,
// objects of at most 16 KiB, anonymous access as well as the user AK/SK, so that unsigned
// requests reach the operations and not only the authentication check) and serves every input.
//
// The input is one byte that picks how the stream is cut, then the bytes of the stream:
//   [0] split selector: mode = [0] % 4, n = [0] / 4 (the seeds start with a digit: '0' is one
//       send, '1' sends of 13 bytes, ...)
//       0: one send;   1: sends of n + 1 bytes;   2: sends of 1..64 bytes from a generator seeded
//       with n;   3: sends of n + 1 bytes with a 0.5 ms pause after each of the first 8, so that
//       the server sees (most of) those cuts as separate reads.
//   [1..] the stream, sent on one connection, then shutdown(SHUT_WR): the server sees its end.
// Before the stream is sent, same-length placeholders in it are filled in, so that the fuzzer
// can reach what it could not guess:
//   UPLOADIDUPLOADIDUPLOADIDUPLOADID  the id of the upload "fuzz/multi" (part 1: "part one\n",
//                                     ETag 514a1f417a54a06ee395d727cccf54b7)
//   YYYYMMDDTHHMMSSZ, YYYYMMDD        the current time and date (x-amz-date, credential scope)
//   64 '*'                            the SigV4 signature (secret SK) of the request whose header
//                                     section holds it, header or presigned query (streaming
//                                     chunk signatures are not computed: STREAMING-UNSIGNED-*)
// Every input starts from the same store: bucket "fuzz" holding "hello" ("hello, sluice\n") and
// the upload "multi"; the store is emptied after each input. (The server's own state, such as
// bucket owners, lives on.) Under a sanitizer, each input then waits (5 ms at most) for the
// server thread to free what the input allocated: libFuzzer runs a slow leak check after every
// input that allocated more than it freed.
//
// Invariants, each an abort() (a crash for libFuzzer):
//   - the answer is empty or starts with "HTTP/1.1 " and a 3-digit status (checked on the bytes
//     that arrived, so that an answer cut by a reset still counts);
//   - the server closes the connection within 2 s of the stream's end (libFuzzer's -timeout
//     catches a hang first; the corpus replay under GCC relies on this);
//   - after the input, a fresh connection gets "HTTP/1.1 200" for GET / (ListBuckets);
//   - the process never crashes (ASan, UBSan).
#include <sluice/memory_store.hpp>
#include <sluice/s3/checksum.hpp>
#include <sluice/s3/server.hpp>
#include <sluice/s3/sigv4.hpp>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using sluice::error_code;
using sluice::memory_store;
using steady = std::chrono::steady_clock;

constexpr std::string_view bucket_name = "fuzz";
constexpr std::string_view upload_slot = "UPLOADIDUPLOADIDUPLOADIDUPLOADID";
constexpr std::string_view amz_date_slot = "YYYYMMDDTHHMMSSZ";
constexpr std::string_view date_slot = "YYYYMMDD";
constexpr std::string_view signature_slot = "****************************************************************";
constexpr auto answer_deadline = 2s;

[[noreturn]] void fail(const char* what, std::string_view detail = {}) {
  std::fprintf(stderr, "server_stream: %s%s%.*s\n", what, detail.empty() ? "" : ": ",
               static_cast<int>(std::min<std::size_t>(detail.size(), 512)), detail.data());
  std::abort();
}

void check_ok(const error_code& ec, const char* what) {
  if (ec) fail(what, ec.message());
}

// Allocations not yet freed, counted by sanitizer hooks where a sanitizer runtime provides them
// (declared weak: a build without one has none, and nothing waits).
extern "C" int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void*, std::size_t),
                                                         void (*free_hook)(const volatile void*)) __attribute__((weak));
std::atomic<std::int64_t> allocations{0};
bool hooks_installed = false;
void count_malloc(const volatile void*, std::size_t) { allocations.fetch_add(1, std::memory_order_relaxed); }
void count_free(const volatile void*) { allocations.fetch_sub(1, std::memory_order_relaxed); }

/// The server and its store, started on the first input and kept for the process's life (never
/// destroyed: libFuzzer may exit from any thread).
struct fixture {
  memory_store* store = nullptr;
  sluice::s3::server* server = nullptr;
  std::uint16_t port = 0;
};

fixture& the_fixture() {
  static fixture f = [] {
    sluice::memory_store_config store_config;
    store_config.max_bytes = 1 * sluice::mib;
    store_config.max_object_bytes = 64 * sluice::kib;
    fixture made;
    made.store = new memory_store(store_config);
    sluice::s3::server_config config;
    config.port = 0;
    config.users = {{"AK", "SK"}};
    config.allow_anonymous = true;
    config.virtual_host_suffixes = {"localhost"};
    config.read_timeout = 1s;
    config.idle_timeout = 1s;
    config.max_object_bytes = 16 * sluice::kib;
    config.min_part_bytes = 4;  // so that a completion of several small parts can succeed
    config.io_threads = 1;
    config.rdma_threads = 1;
    made.server = new sluice::s3::server(*made.store, config);
    made.server->listen();
    made.port = made.server->local_endpoint().port();
    if (__sanitizer_install_malloc_and_free_hooks != nullptr) {
      hooks_installed = __sanitizer_install_malloc_and_free_hooks(count_malloc, count_free) != 0;
    }
    return made;
  }();
  return f;
}

void put_bytes(sluice::memory_store::writer writer, std::string_view bytes) {
  error_code ec;
  writer.write(std::as_bytes(std::span(bytes.data(), bytes.size())), ec);
  check_ok(ec, "store write");
  sluice::s3::digest md5(sluice::s3::digest_kind::md5);
  md5.update(bytes);
  sluice::object_attributes attributes;
  attributes.etag = sluice::s3::to_hex(md5.finish());
  (void)writer.commit(attributes, ec);
  check_ok(ec, "store commit");
}

/// Empties the store.
void clear_store(memory_store& store) {
  error_code ec;
  for (const auto& bucket : store.list_buckets(ec)) {
    for (;;) {
      const auto page = store.list({bucket.name, {}, {}, 1000}, ec);
      check_ok(ec, "store list");
      if (page.objects.empty()) break;
      for (const auto& object : page.objects) {
        store.remove({bucket.name, object.key}, ec);
        check_ok(ec, "store remove");
      }
    }
    for (const auto& upload : store.list_uploads(bucket.name, {}, ec)) {
      store.abort_upload({bucket.name, upload.key}, upload.upload_id, ec);
      check_ok(ec, "store abort_upload");
    }
    store.remove_bucket(bucket.name, ec);
    check_ok(ec, "store remove_bucket");
  }
  check_ok(ec, "store list_buckets");
}

/// Makes what every input starts from in an empty store; returns the upload's id.
std::string prepare_store(memory_store& store) {
  error_code ec;
  store.create_bucket(bucket_name, ec);
  check_ok(ec, "store create_bucket");
  const sluice::object_ref hello{std::string(bucket_name), "hello"};
  put_bytes(store.begin_put(hello, ec), "hello, sluice\n");
  const sluice::object_ref multi{std::string(bucket_name), "multi"};
  std::string id = store.create_upload(multi, {}, ec);
  check_ok(ec, "store create_upload");
  if (id.size() != upload_slot.size()) fail("upload id of an unexpected length", id);
  put_bytes(store.begin_part(multi, id, 1, ec), "part one\n");
  return id;
}

void replace_all(std::string& text, std::string_view slot, std::string_view value) {
  for (auto at = text.find(slot); at != std::string::npos; at = text.find(slot, at + value.size())) {
    text.replace(at, slot.size(), value);
  }
}

namespace http = boost::beast::http;

/// The SigV4 signature (secret SK) that `msg` claims to carry, or empty when it claims none.
std::string signature_for(const http::request<http::string_body>& msg) {
  sluice::s3::request_view view{
      {msg.method_string().data(), msg.method_string().size()}, {msg.target().data(), msg.target().size()}, {}};
  for (const auto& field : msg) {
    view.headers.emplace_back(std::string_view(field.name_string().data(), field.name_string().size()),
                              std::string_view(field.value().data(), field.value().size()));
  }
  error_code claim_error;
  const auto claim = sluice::s3::parse_authorization(view, claim_error);
  if (claim_error) return {};
  const std::string canonical =
      sluice::s3::canonical_request(view, claim.signed_headers, claim.payload_hash, claim.presigned);
  const auto key = sluice::s3::signing_key("SK", claim.date, claim.region, claim.service);
  return sluice::s3::signature(key, sluice::s3::string_to_sign(claim.amz_date, claim.scope(), canonical));
}

/// Fills in the placeholders (see the top of this file); every value has its slot's length, so
/// the stream keeps its framing and its cuts.
void fill_placeholders(std::string& stream, std::string_view upload_id) {
  replace_all(stream, upload_slot, upload_id);
  const std::string now = sluice::s3::format_amz_date(std::chrono::system_clock::now());
  replace_all(stream, amz_date_slot, now);
  replace_all(stream, date_slot, std::string_view(now).substr(0, date_slot.size()));
  if (stream.find(signature_slot) == std::string::npos) return;
  // Walk the requests as the server frames them (Beast's parser, bodies by Content-Length or
  // chunked), each parsed with its signature slots as zeros; a slot in a request's header
  // section (request line included) gets that request's signature. Stops where the framing
  // fails, as the server does.
  std::string zeroed = stream;
  const std::string dummy(signature_slot.size(), '0');
  replace_all(zeroed, signature_slot, dummy);
  for (std::size_t begin = 0; begin < zeroed.size();) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(16 * 1024);
    parser.body_limit(zeroed.size());
    boost::system::error_code ec;
    std::size_t end = begin;
    while (!ec && !parser.is_done() && end < zeroed.size()) {
      const std::size_t used = parser.put(boost::asio::buffer(zeroed.data() + end, zeroed.size() - end), ec);
      if (used == 0 && !ec) break;
      end += used;
    }
    if (ec == http::error::need_more) ec = {};
    if (ec || !parser.is_header_done() || end == begin) return;
    const auto header_end = zeroed.find("\r\n\r\n", begin);
    const std::size_t last = header_end == std::string::npos ? end : std::min(end, header_end + 4);
    for (auto at = stream.find(signature_slot, begin); at != std::string::npos && at + signature_slot.size() <= last;
         at = stream.find(signature_slot, at + signature_slot.size())) {
      const std::string sig = signature_for(parser.get());
      if (sig.size() == signature_slot.size()) stream.replace(at, sig.size(), sig);
    }
    if (!parser.is_done()) return;
    begin = end;
  }
}

/// Where the sends of the stream end, as the selector byte says.
std::vector<std::size_t> cut_points(std::uint8_t selector, std::size_t size) {
  const unsigned mode = selector % 4U;
  const unsigned n = selector / 4U;
  std::vector<std::size_t> ends;
  std::uint32_t state = n * 2654435761U + 1U;
  for (std::size_t at = 0; at < size;) {
    std::size_t step = size;
    if (mode == 1 || mode == 3) step = n + 1U;
    if (mode == 2) {
      state = state * 1664525U + 1013904223U;
      step = 1U + ((state >> 16U) % 64U);
    }
    at = std::min(size, at + step);
    ends.push_back(at);
  }
  return ends;
}

/// What came back on one connection.
struct answer {
  std::string head;  // the first bytes (enough for the status line's start)
  std::size_t size = 0;
  bool reset = false;  // ended by ECONNRESET rather than an orderly close
};

/// A non-blocking socket connected to the server. Connecting does not block either: libFuzzer's
/// timer signal (-timeout) would interrupt a blocking connect().
int connect_to(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) fail("socket", std::strerror(errno));
  const int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) return fd;
  if (errno != EINPROGRESS && errno != EINTR) fail("connect to the server", std::strerror(errno));
  const auto deadline = steady::now() + answer_deadline;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()).count();
    if (left <= 0) fail("no connection to the server within 2 s (a hang)");
    pollfd p{fd, POLLOUT, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno != EINTR) fail("poll", std::strerror(errno));
    if (ready > 0) break;
  }
  int error = 0;
  socklen_t length = sizeof error;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0) {
    fail("connect to the server", std::strerror(error));
  }
  return fd;
}

/// Sends `stream` in the sends that end at `ends` (pausing after the first `pauses` of them),
/// shuts the sending side, and reads until the server closes. Reading and sending interleave,
/// so that a server answering a long pipeline never waits for us to finish sending.
answer exchange(std::uint16_t port, std::string_view stream, const std::vector<std::size_t>& ends, std::size_t pauses) {
  const int fd = connect_to(port);
  answer got;
  std::size_t sent = 0;
  std::size_t next_end = 0;  // index into ends
  bool send_done = stream.empty();
  if (send_done) ::shutdown(fd, SHUT_WR);
  const auto deadline = steady::now() + answer_deadline;
  char buffer[16 * 1024];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()).count();
    if (left <= 0) {
      fail(send_done ? "no end of the answer within 2 s of the stream's end (a hang)"
                     : "the server took no more of the stream for 2 s (a hang)",
           got.head);
    }
    pollfd p{fd, static_cast<short>(POLLIN | (send_done ? 0 : POLLOUT)), 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left));
    if (ready < 0) {
      if (errno == EINTR) continue;
      fail("poll", std::strerror(errno));
    }
    if (ready == 0) continue;
    if ((p.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n > 0) {
        const auto count = static_cast<std::size_t>(n);
        if (got.head.size() < 64) got.head.append(buffer, std::min<std::size_t>(count, 64 - got.head.size()));
        got.size += count;
      } else if (n == 0) {
        break;
      } else if (errno == ECONNRESET || errno == EPIPE) {
        got.reset = true;
        break;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        fail("recv", std::strerror(errno));
      }
    }
    if (!send_done && (p.revents & POLLOUT) != 0) {
      const std::size_t end = ends[next_end];
      const ssize_t n = ::send(fd, stream.data() + sent, end - sent, MSG_NOSIGNAL);
      if (n >= 0) {
        sent += static_cast<std::size_t>(n);
        if (sent == end) {
          if (next_end < pauses) std::this_thread::sleep_for(500us);
          ++next_end;
        }
      } else if (errno == EPIPE || errno == ECONNRESET) {
        sent = stream.size();  // the server closed early: the rest of the stream is moot
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        fail("send", std::strerror(errno));
      }
      if (sent == stream.size()) {
        send_done = true;
        ::shutdown(fd, SHUT_WR);
      }
    }
  }
  ::close(fd);
  return got;
}

/// Whether `head` (the first bytes of an answer, maybe cut short) can start "HTTP/1.1 NNN ".
bool starts_like_a_response(std::string_view head) {
  constexpr std::string_view prefix = "HTTP/1.1 ";
  for (std::size_t i = 0; i < head.size() && i < prefix.size() + 4; ++i) {
    const char c = head[i];
    if (i < prefix.size()) {
      if (c != prefix[i]) return false;
    } else if (i < prefix.size() + 3) {
      if (c < '0' || c > '9') return false;
    } else if (c != ' ') {
      return false;
    }
  }
  return true;
}

/// Runs one input against the server and checks the invariants.
void run_input(const fixture& f, const std::uint8_t* data, std::size_t size) {
  clear_store(*f.store);  // a no-op unless the previous input ended early
  const std::string upload_id = prepare_store(*f.store);

  const std::uint8_t selector = size > 0 ? data[0] : 0;
  std::string stream = size > 1 ? std::string(reinterpret_cast<const char*>(data) + 1, size - 1) : std::string();
  fill_placeholders(stream, upload_id);
  const auto ends = cut_points(selector, stream.size());
  const std::size_t pauses = selector % 4U == 3 ? 8 : 0;

  const answer got = exchange(f.port, stream, ends, pauses);
  if (!starts_like_a_response(got.head)) fail("an answer that is not an HTTP/1.1 response", got.head);

  // The server must still serve a fresh connection.
  constexpr std::string_view probe = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  const answer alive = exchange(f.port, probe, {probe.size()}, 0);
  if (!std::string_view(alive.head).starts_with("HTTP/1.1 200 ")) {
    fail("GET / after the input did not answer 200", alive.head);
  }
  clear_store(*f.store);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fixture& f = the_fixture();
  const std::int64_t outstanding = allocations.load();
  run_input(f, data, size);
  // The server frees a connection on its own thread just after closing it. libFuzzer runs a
  // (slow) leak check after every input that allocated more than it freed, so give the server
  // a moment to finish; an allocation that is never freed still shows, 5 ms later.
  if (hooks_installed) {
    const auto give_up = steady::now() + 5ms;
    while (allocations.load() > outstanding && steady::now() < give_up) std::this_thread::sleep_for(20us);
  }
  return 0;
}
