// SPDX-License-Identifier: Apache-2.0
#include <sluice/s3/path.hpp>

#include <sluice/host_registrar.hpp>
#include <sluice/memory_store.hpp>
#include <sluice/path.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/server.hpp>

#include <doctest/doctest.h>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "conformance/host_fixtures.hpp"
#include "conformance/negotiator_conformance.hpp"
#include "conformance/registrar_conformance.hpp"
#include "conformance/s3_fixtures.hpp"
#include "conformance/transport_conformance.hpp"

namespace {

using namespace sluice;
using testing::random_bytes;

static_assert(negotiator<s3::negotiator>);
static_assert(transport<s3::http_transport, host_registration>);
static_assert(transport<s3::rdma_transport, host_registration>);
static_assert(transport<s3::auto_transport, host_registration>);
static_assert(negotiates_for<s3::negotiator, s3::http_transport>);
static_assert(s3::http_transport::writes_whole_objects);

using http_path = path<s3::negotiator, host_registrar, s3::http_transport>;

template <class Transport>
struct object_fixture : testing::s3_memory_server {
  using transport_type = Transport;
  using registrar_type = host_registrar;
  transport_type transport{*client};
  registrar_type registrar;
  static testing::host_buffer make_local(std::size_t size) { return testing::host_buffer(size); }
};
using http_fixture = object_fixture<s3::http_transport>;
using auto_fixture = object_fixture<s3::auto_transport>;  // no RDMA plane on the client: every byte in the body

struct http_path_fixture : testing::s3_memory_server {
  http_path p{s3::negotiator{*client}, host_registrar{}, s3::http_transport{*client}};
};

static_assert(registrar<s3::token_registrar>);
static_assert(transport<s3::http_transport, s3::token_registration>);

/// token_registrar in the registrar conformance suite, as the client's GET and PUT over HTTP use
/// it: host memory; device memory refused (no body comes from it).
struct token_registrar_fixture {
  using registrar_type = s3::token_registrar;
  static constexpr bool overlapping = true;
  static registrar_type make_registrar() { return registrar_type(s3::transfer_via::http); }
  static testing::page_buffer make_memory(std::size_t size) { return testing::page_buffer(size); }
  static region refused(std::span<std::byte> scratch) {
    return {scratch.data(), scratch.size(), memory_kind::cuda_device, 0};
  }
};

/// s3::negotiator (a HEAD per get) in the negotiator conformance suite, with the HTTP transport.
struct s3_negotiator_fixture : testing::s3_memory_server {
  using negotiator_type = s3::negotiator;
  using transport_type = s3::http_transport;
  using registrar_type = host_registrar;
  object_ref seed(std::span<const std::byte> data) {
    const object_ref obj = absent();
    std::vector<std::byte> copy(data.begin(), data.end());
    s3::put_options options;
    options.via = s3::transfer_via::http;
    error_code ec;
    client->put_object(obj.bucket, obj.key, host_region(copy), options, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    return obj;
  }
  object_ref absent() { return {"bkt", "negotiated-" + std::to_string(next++)}; }
  std::optional<std::vector<std::byte>> published(const object_ref& obj) {
    error_code ec;
    const object_info info = client->head_object(obj.bucket, obj.key, ec);
    if (ec) return std::nullopt;
    std::vector<std::byte> out(static_cast<std::size_t>(info.size));
    if (!out.empty()) {
      s3::get_options options;
      options.via = s3::transfer_via::http;
      client->get_object(obj.bucket, obj.key, host_region(out), options, ec);
      REQUIRE_MESSAGE(!ec, ec.message());
    }
    return out;
  }
  static testing::host_buffer make_local(std::size_t size) { return testing::host_buffer(size); }
  negotiator_type negotiator{*client};
  transport_type transport{*client};
  registrar_type registrar;
};

}  // namespace

TYPE_TO_STRING(s3_negotiator_fixture);
TEST_CASE_TEMPLATE_INVOKE(negotiator_conformance, s3_negotiator_fixture);
TEST_CASE_TEMPLATE_INVOKE(transport_conformance, http_fixture, auto_fixture);
TEST_CASE_TEMPLATE_INVOKE(registrar_conformance, token_registrar_fixture);

TEST_CASE("token_registrar: device memory goes by token (rdma, automatic), never in a body (http)") {
  std::array<std::byte, 64> scratch{};
  const region device{scratch.data(), scratch.size(), memory_kind::cuda_device, 0};
  error_code ec;
  for (const auto via : {s3::transfer_via::rdma, s3::transfer_via::automatic}) {
    CHECK(s3::token_registrar(via).register_region(device, ec).region() == device);
    CHECK(!ec);
  }
  CHECK(s3::token_registrar(s3::transfer_via::http).register_region(device, ec).region() == region{});
  CHECK(ec == errc::unsupported_memory);
}

TEST_CASE_FIXTURE(http_path_fixture, "s3 path over HTTP: put, get whole and in ranges, and the parts it names") {
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{4097}, 7 * mib + 3}) {
    CAPTURE(n);
    auto data = random_bytes(n, static_cast<std::uint32_t>(n) + 3);
    const object_ref obj{"bkt", "obj-" + std::to_string(n)};
    const transfer_result put = p.put(obj, host_region(data));
    CHECK(put.bytes == n);
    CHECK(put.negotiator == "s3");
    CHECK(put.transport == "s3-http");
    error_code ec;
    const object_info published = store.head(obj, ec);
    CHECK(published.size == n);  // published on the server
    CHECK(!ec);
    CHECK(!put.version.empty());  // the ETag the server gave the new object
    CHECK(put.version == published.attributes.etag);

    std::vector<std::byte> got(n);
    const transfer_result get = p.get(obj, host_region(got));
    CHECK(get.bytes == n);
    CHECK(get.version == put.version);  // the version it read
    CHECK(got == data);
    if (n > 2) {
      std::vector<std::byte> middle(n - 2);
      CHECK(p.get(obj, host_region(middle), byte_range{1, n - 2}).bytes == n - 2);
      CHECK(std::equal(middle.begin(), middle.end(), data.begin() + 1));
    }
  }
}

TEST_CASE_FIXTURE(http_path_fixture, "s3 path: errors of every step come back as codes") {
  std::vector<std::byte> data(100, std::byte{1});
  p.put({"bkt", "k"}, host_region(data));
  error_code ec;
  std::vector<std::byte> small(10);
  p.get({"bkt", "missing"}, host_region(small), ec);
  CHECK(ec == s3::errc::no_such_key);
  CHECK(ec == condition::not_found);  // the same test body as against an in-process store
  p.get({"bkt", "k"}, host_region(small), ec);
  CHECK(ec == errc::region_too_small);
  p.get({"bkt", "k"}, host_region(small), byte_range{95, 10}, ec);
  CHECK(ec == errc::bad_range);
  p.get({"bkt", "k"}, host_region(small), byte_range{101, 0}, ec);
  CHECK(ec == errc::bad_range);
  p.put({"no-such-bucket", "k"}, host_region(data), ec);
  CHECK(ec == s3::errc::no_such_bucket);
}

TEST_CASE_FIXTURE(http_path_fixture, "s3 path: a get reads the version it negotiated, or fails") {
  auto first = random_bytes(4096, 1);
  auto second = random_bytes(4096, 2);
  p.put({"bkt", "v"}, host_region(first));

  // Negotiate the read, replace the object behind the session's back, then move.
  boost::asio::io_context io;
  std::optional<s3::negotiator::session_type> session;
  p.get_negotiator().async_negotiate(transfer_request{{"bkt", "v"}, {}, direction::get},
                                     boost::asio::bind_executor(io, [&](error_code ec, s3::negotiator::session_type s) {
                                       REQUIRE_MESSAGE(!ec, ec.message());
                                       session.emplace(std::move(s));
                                     }));
  io.run();
  REQUIRE(session);
  CHECK(session->span() == transfer_span{0, 0, 4096});
  p.put({"bkt", "v"}, host_region(second));

  std::vector<std::byte> got(4096, std::byte{0xA5});
  error_code ec;
  const host_registration reg = p.get_registrar().register_region(host_region(got), ec);
  REQUIRE(!ec);
  io.restart();
  p.get_transport().async_read(reg, session->remote(), session->span(),
                               boost::asio::bind_executor(io, [&](error_code e, std::size_t) { ec = e; }));
  io.run();
  CHECK(ec == s3::errc::precondition_failed);
  CHECK(testing::all_poison(got));  // not a byte of the new version
}

TEST_CASE_FIXTURE(http_path_fixture, "s3 path: many transfers in flight on one io_context") {
  auto data = random_bytes(std::size_t{1} << 20, 4);
  p.put({"bkt", "many"}, host_region(data));
  boost::asio::io_context io;
  std::vector<std::byte> out(data.size());
  constexpr std::size_t parts = 16;
  const std::size_t part = data.size() / parts;
  int done = 0;
  for (std::size_t i = 0; i < parts; ++i) {
    error_code ec;
    const region slice = host_region(out).subregion(i * part, part, ec);
    p.async_get({"bkt", "many"}, slice, byte_range{i * part, part},
                boost::asio::bind_executor(io, [&](error_code e, transfer_result r) {
                  CHECK(!e);
                  CHECK(r.bytes == part);
                  ++done;
                }));
  }
  io.run();
  CHECK(done == static_cast<int>(parts));
  CHECK(out == data);
}

TEST_CASE_FIXTURE(http_path_fixture, "s3 path: skip_head_for_ranges agrees an explicit range without a request") {
  auto data = random_bytes(10000, 11);
  p.put({"bkt", "r"}, host_region(data));
  http_path ranged{s3::negotiator{*client, {.skip_head_for_ranges = true}}, host_registrar{},
                   s3::http_transport{*client}};
  std::vector<std::byte> got(100);

  // One request (the GET) instead of HEAD then GET; no version, since nothing asked for it.
  auto before = client->statistics().requests;
  const transfer_result r = ranged.get({"bkt", "r"}, host_region(got), byte_range{5000, 100});
  CHECK(r.bytes == 100);
  CHECK(std::equal(got.begin(), got.end(), data.begin() + 5000));
  CHECK(r.version.empty());
  CHECK(client->statistics().requests - before == 1);
  before = client->statistics().requests;
  const transfer_result headed = p.get({"bkt", "r"}, host_region(got), byte_range{5000, 100});
  CHECK(headed.bytes == 100);
  CHECK(!headed.version.empty());
  CHECK(client->statistics().requests - before == 2);

  // The GET answers what the HEAD would have.
  error_code ec;
  ranged.get({"bkt", "missing"}, host_region(got), byte_range{0, 10}, ec);
  CHECK(ec == s3::errc::no_such_key);
  CHECK(ec == condition::not_found);
  ranged.get({"bkt", "r"}, host_region(got), byte_range{9950, 100}, ec);  // ends past the object
  CHECK(ec == errc::bad_range);
  ranged.get({"bkt", "r"}, host_region(got), byte_range{10000, 1}, ec);  // starts at its end
  CHECK(ec == errc::bad_range);
  before = client->statistics().requests;
  ranged.get({"bkt", "r"}, host_region(got), byte_range{~std::uint64_t{0} - 5, 10}, ec);  // the end passes 2^64
  CHECK(ec == errc::bad_range);
  CHECK(client->statistics().requests == before);  // refused before any request
  ranged.get({"bkt", "r"}, host_region(got), byte_range{0, 101}, ec);
  CHECK(ec == errc::region_too_small);

  // The whole object, a range to the end and a range of no bytes still HEAD: the size decides.
  std::vector<std::byte> all(10000);
  const transfer_result whole = ranged.get({"bkt", "r"}, host_region(all));
  CHECK(whole.bytes == 10000);
  CHECK(all == data);
  CHECK(!whole.version.empty());
  CHECK(ranged.get({"bkt", "r"}, host_region(got), byte_range{9900, std::nullopt}).bytes == 100);
  ranged.get({"bkt", "r"}, host_region(got), byte_range{10001, 0}, ec);
  CHECK(ec == errc::bad_range);
}

TEST_CASE_FIXTURE(http_path_fixture,
                  "s3 path: never_head agrees every get without a request, as the client's GET does") {
  auto data = random_bytes(10000, 12);
  p.put({"bkt", "n"}, host_region(data));
  std::vector<std::byte> room(16384, std::byte{0x5A});
  auto unseen = [&](std::uint64_t up_to) {
    return http_path{s3::negotiator{*client, {.never_head = true, .up_to = up_to}}, host_registrar{},
                     s3::http_transport{*client}};
  };

  // The whole object into more room than it needs: one request, the object's bytes, no version.
  auto before = client->statistics().requests;
  const transfer_result whole = unseen(room.size()).get({"bkt", "n"}, host_region(room));
  CHECK(whole.bytes == 10000);
  CHECK(std::equal(data.begin(), data.end(), room.begin()));
  CHECK(std::all_of(room.begin() + 10000, room.end(), [](std::byte b) { return b == std::byte{0x5A}; }));
  CHECK(whole.version.empty());
  CHECK(client->statistics().requests - before == 1);

  // The client's own GET is this path: one request for a small object too.
  before = client->statistics().requests;
  CHECK(client->get_object("bkt", "n", host_region(room)) == 10000);
  CHECK(client->statistics().requests - before == 1);

  // What a HEAD would have said, the GET says: too little room, a missing key, ranges outside.
  error_code ec;
  std::vector<std::byte> small(9999);
  unseen(small.size()).get({"bkt", "n"}, host_region(small), {}, ec);
  CHECK(ec == errc::region_too_small);
  unseen(room.size()).get({"bkt", "missing"}, host_region(room), {}, ec);
  CHECK(ec == s3::errc::no_such_key);
  unseen(room.size()).get({"bkt", "n"}, host_region(room), byte_range{10001, 0}, ec);
  CHECK(ec == errc::bad_range);  // a read of no bytes is still checked against the object
  CHECK(unseen(room.size()).get({"bkt", "n"}, host_region(room), byte_range{10000, 0}).bytes == 0);
  CHECK(unseen(room.size()).get({"bkt", "n"}, host_region(room), byte_range{9990, std::nullopt}).bytes == 10);
  before = client->statistics().requests;
  unseen(room.size()).get({"bkt", "n"}, host_region(room), byte_range{~std::uint64_t{0} - 5, 10}, ec);
  CHECK(ec == errc::bad_range);  // the end passes 2^64: refused before any request
  CHECK(client->statistics().requests == before);
}
