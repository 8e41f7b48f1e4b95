// SPDX-License-Identifier: Apache-2.0
// s3::client's copy_object and put_stream (s3_client_test.cpp holds the rest of the client's
// tests), against the in-process server over a memory_store and a one-answer raw server.
#include <sluice/s3/client.hpp>

#include <sluice/memory_store.hpp>
#include <sluice/s3/server.hpp>
#include <sluice/s3/xml.hpp>
#include <sluice/s3/xml_client.hpp>

#include <doctest/doctest.h>

#include "byte_pattern.hpp"
#include "s3_live_server.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace {

namespace asio = boost::asio;
namespace s3 = sluice::s3;
using sluice::error_code;
using sluice::mib;
using namespace std::chrono_literals;

using sluice::testing::config_for;
using sluice::testing::live_server;
using sluice::testing::pattern;

std::vector<std::byte> read_back(s3::client& client, const std::string& bucket, const std::string& key) {
  error_code ec;
  const sluice::object_info info = client.head_object(bucket, key, ec);
  REQUIRE_FALSE(ec);
  std::vector<std::byte> out(static_cast<std::size_t>(info.size));
  (void)client.get_object(bucket, key, sluice::region{out.data(), out.size()}, {}, ec);
  REQUIRE_FALSE(ec);
  return out;
}

// Writes `bytes` into a pipe from a thread of its own, then closes it (unless `hold`: then it
// waits until release() before closing, so the reader sees no end).
class pipe_writer {
 public:
  explicit pipe_writer(std::vector<std::byte> bytes, bool hold = false) : bytes_(std::move(bytes)) {
    REQUIRE(::pipe(fds_) == 0);
    thread_ = std::thread([this, hold] {
      for (std::size_t done = 0; done < bytes_.size();) {
        const ssize_t n = ::write(fds_[1], bytes_.data() + done, bytes_.size() - done);
        if (n <= 0) break;
        done += static_cast<std::size_t>(n);
      }
      if (hold) {
        while (!released_) std::this_thread::sleep_for(10ms);
      }
      ::close(fds_[1]);
    });
  }
  pipe_writer(const pipe_writer&) = delete;
  pipe_writer& operator=(const pipe_writer&) = delete;
  ~pipe_writer() {
    release();
    std::vector<char> sink(64 * 1024);  // drained to its end: a write into a closed pipe is SIGPIPE
    while (::read(fds_[0], sink.data(), sink.size()) > 0) {
    }
    thread_.join();
    ::close(fds_[0]);
  }
  [[nodiscard]] int read_end() const noexcept { return fds_[0]; }
  void release() { released_ = true; }

 private:
  std::vector<std::byte> bytes_;
  int fds_[2] = {-1, -1};
  std::atomic<bool> released_{false};
  std::thread thread_;
};

}  // namespace

TEST_CASE("s3 client xml: CopyObjectResult and CopyPartResult, and the <Error> of a 200") {
  namespace xml = s3::xml;
  error_code ec;
  const auto whole = xml::parse_copy_result(
      R"(<?xml version="1.0" encoding="UTF-8"?><CopyObjectResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">)"
      R"(<LastModified>2026-11-30T10:00:00.000Z</LastModified><ETag>&quot;abc&quot;</ETag></CopyObjectResult>)",
      ec);
  CHECK_FALSE(ec);
  CHECK(whole.etag == "abc");
  REQUIRE(whole.last_modified);
  CHECK(xml::iso8601(*whole.last_modified) == "2026-11-30T10:00:00.000Z");
  const auto part = xml::parse_copy_result("<CopyPartResult><ETag>\"d-1\"</ETag></CopyPartResult>", ec);
  CHECK_FALSE(ec);
  CHECK(part.etag == "d-1");
  CHECK_FALSE(part.last_modified);
  (void)xml::parse_copy_result(xml::error_body("InternalError", "copy failed", "/b/k", "1"), ec);
  CHECK(ec == s3::errc::internal_error);
  (void)xml::parse_copy_result(xml::error_body("SlowDown", "later", "/b/k", "1"), ec);
  CHECK(ec == s3::errc::slow_down);
  for (const char* bad : {"", "<CopyObjectResult/>", "<CopyObjectResult><ETag>\"\"</ETag></CopyObjectResult>",
                          "<Other><ETag>x</ETag></Other>", "<Error><Message>no code</Message></Error>"}) {
    (void)xml::parse_copy_result(bad, ec);
    CHECK(ec == s3::errc::malformed_xml);
  }
}

TEST_CASE("s3 client: copy_object within and across buckets, odd keys, a missing source, If-Match") {
  live_server server;
  s3::client client(config_for(server.endpoint()));
  client.create_bucket("one");
  client.create_bucket("two");
  const auto bytes = pattern(300'000, 1);
  const std::string odd =
      "a/../b//c/\xc3\xbcnic\xc3\xb8"
      "de/" +
      std::string(990, 'k');
  s3::put_options put;
  put.attributes.content_type = "text/x-sluice";
  put.attributes.metadata = {{"origin", "test"}};
  const std::string etag = client.put_object("one", odd, sluice::const_region{bytes.data(), bytes.size()}, put);
  CHECK(client.copy_object("one", odd, "one", odd + "-copy") == etag);  // the MD5 of the same bytes
  CHECK(read_back(client, "one", odd + "-copy") == bytes);
  s3::copy_options options;
  options.source_size = bytes.size();
  options.if_match = etag;
  CHECK(client.copy_object("one", odd, "two", "x", options) == etag);
  const sluice::object_info info = client.head_object("two", "x");
  CHECK(info.attributes.content_type == "text/x-sluice");
  CHECK(info.attributes.metadata.at("origin") == "test");
  CHECK(read_back(client, "two", "x") == bytes);

  error_code ec;
  (void)client.copy_object("one", "missing", "two", "y", {}, ec);
  CHECK(ec == s3::errc::no_such_key);
  options.if_match = "0123456789abcdef0123456789abcdef";
  (void)client.copy_object("one", odd, "two", "y", options, ec);
  CHECK(ec == s3::errc::precondition_failed);
  (void)client.copy_object("one", odd, "nobucket", "y", {}, ec);
  CHECK(ec == s3::errc::no_such_bucket);
  (void)client.head_object("two", "y", ec);
  CHECK(ec == s3::errc::no_such_key);
}

TEST_CASE("s3 client: copy_object above multipart_threshold copies by UploadPartCopy parts") {
  live_server server;
  s3::client client(config_for(server.endpoint()));
  client.create_bucket("big");
  const auto bytes = pattern(12 * mib + 17, 2);
  s3::put_options put;
  put.attributes.content_type = "application/x-parts";
  (void)client.put_object("big", "src", sluice::const_region{bytes.data(), bytes.size()}, put);
  s3::copy_options options;
  options.multipart_threshold = 5 * mib;
  std::uint64_t reported = 0;
  options.progress = [&](std::uint64_t done, std::uint64_t total) {
    CHECK(total == bytes.size());
    reported = done;
  };
  const std::string etag = client.copy_object("big", "src", "big", "dst", options);
  CHECK(etag.ends_with("-3"));  // three parts of 5 MiB
  CHECK(reported == bytes.size());
  CHECK(read_back(client, "big", "dst") == bytes);
  CHECK(client.head_object("big", "dst").attributes.content_type == "application/x-parts");
  CHECK(client.list_multipart_uploads("big").empty());
  // A stale ETag fails before an upload is made.
  options.if_match = "0123456789abcdef0123456789abcdef";
  error_code ec;
  (void)client.copy_object("big", "src", "big", "dst2", options, ec);
  CHECK(ec == s3::errc::precondition_failed);
  CHECK(client.list_multipart_uploads("big").empty());
}

TEST_CASE("s3 client: copy_object fails on a 200 whose body is an <Error>") {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  std::thread server([&] {
    asio::ip::tcp::socket socket = acceptor.accept();
    std::string head;
    asio::read_until(socket, asio::dynamic_buffer(head), "\r\n\r\n");
    const std::string body = s3::xml::error_body("InternalError", "We encountered an internal error.", "/b/k", "r");
    const std::string answer =
        "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\nConnection: close\r\n\r\n" + body;
    asio::write(socket, asio::buffer(answer));
  });
  s3::client_config config;
  config.endpoint = "http://127.0.0.1:" + std::to_string(acceptor.local_endpoint().port());
  config.creds = {sluice::testing::s3_access_key, sluice::testing::s3_secret_key};
  config.max_retries = 0;
  s3::client client(config);
  s3::copy_options options;
  options.source_size = 10;
  error_code ec;
  const std::string etag = client.copy_object("b", "k", "b", "k2", options, ec);
  server.join();
  CHECK(ec == s3::errc::internal_error);
  CHECK(etag.empty());
}

TEST_CASE("s3 client: put_stream of 0 B to several parts, on and off a part's boundary") {
  live_server server;
  s3::client client(config_for(server.endpoint()));
  client.create_bucket("pipe");
  for (const std::size_t size : {std::size_t{0}, std::size_t{100}, 5 * mib, 10 * mib, 17 * mib + 3}) {
    CAPTURE(size);
    const auto bytes = pattern(size, size + 3);
    pipe_writer writer(bytes);
    std::uint64_t reported = 0;
    s3::put_options put;
    put.progress = [&](std::uint64_t done, std::uint64_t) { reported = done; };
    error_code ec;
    const std::string etag = client.put_stream("pipe", "k", writer.read_end(), put, ec);
    REQUIRE_FALSE(ec);
    CHECK(read_back(client, "pipe", "k") == bytes);
    CHECK(reported == size);
    // A stream of exactly one part is read to its end only after the part: an upload of one part.
    CHECK(etag.ends_with("-" + std::to_string((size + 5 * mib - 1) / (5 * mib))) == (size >= 5 * mib));
  }
  CHECK(client.list_multipart_uploads("pipe").empty());
}

TEST_CASE("s3 client: a cancelled put_stream aborts its upload: no object, no upload") {
  live_server server;
  s3::client client(config_for(server.endpoint()));
  client.create_bucket("cut");
  pipe_writer writer(pattern(12 * mib, 9), true);  // two parts sent, then no end
  std::promise<error_code> finished;
  client.async_put_stream("cut", "k", writer.read_end(), {},
                          [&](error_code ec, const std::string&) { finished.set_value(ec); });
  for (int i = 0; i < 500 && client.list_multipart_uploads("cut").empty(); ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(client.list_multipart_uploads("cut").size() == 1);
  client.cancel();
  auto done = finished.get_future();
  REQUIRE(done.wait_for(20s) == std::future_status::ready);
  CHECK(done.get() == asio::error::operation_aborted);
  CHECK(client.list_multipart_uploads("cut").empty());
  error_code ec;
  (void)client.head_object("cut", "k", ec);
  CHECK(ec == s3::errc::no_such_key);
}
