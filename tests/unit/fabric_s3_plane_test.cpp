// SPDX-License-Identifier: Apache-2.0
#include <sluice/fabric/s3_plane.hpp>

#include <sluice/memory_store.hpp>
#include <sluice/s3/client.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/server.hpp>
#include "s3/server/support.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "conformance/s3_rdma_fixtures.hpp"

namespace {

using namespace sluice;
using namespace std::chrono_literals;

std::vector<std::byte> random_bytes(std::size_t n, std::uint32_t seed) {
  std::vector<std::byte> out(n);
  std::mt19937 gen(seed);
  for (auto& b : out) b = static_cast<std::byte>(gen() & 0xFFU);
  return out;
}

/// A server (memory_store) whose RDMA plane opens `server_provider` ("" : no plane), and a
/// client whose plane uses `client_provider`, in this process: the bytes still cross a real
/// libfabric provider between two endpoints.
using rdma_pair = testing::rdma_s3_server;

void round_trip(rdma_pair& pair, std::size_t size) {
  CAPTURE(size);
  const auto data = random_bytes(size, static_cast<std::uint32_t>(size) + 7);
  auto source = data;
  s3::transfer_report put_report;
  s3::put_options put;
  put.via = s3::transfer_via::rdma;
  put.report = &put_report;
  error_code ec;
  pair.client->put_object("bkt", "k", host_region(source), put, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK(put_report.rdma_bytes == size);
  CHECK(put_report.http_bytes == 0);

  std::vector<std::byte> got(size + 64, std::byte{0xA5});
  s3::transfer_report get_report;
  s3::get_options get;
  get.via = s3::transfer_via::rdma;
  get.report = &get_report;
  const auto n = pair.client->get_object("bkt", "k", region{got.data(), size, memory_kind::host_pageable, -1}, get, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK(n == size);
  CHECK(std::equal(data.begin(), data.end(), got.begin()));
  CHECK(std::all_of(got.begin() + static_cast<std::ptrdiff_t>(size), got.end(),
                    [](std::byte b) { return b == std::byte{0xA5}; }));
  CHECK(get_report.rdma_bytes == size);
  CHECK(get_report.http_bytes == 0);
}

}  // namespace

TEST_CASE("S3 over RDMA: GET and PUT round trips on shm and tcp (ofi_rxm)") {
  for (const std::string provider : {"shm", "tcp;ofi_rxm"}) {
    CAPTURE(provider);
    rdma_pair pair(provider, provider);
    for (const std::size_t size : {std::size_t{1}, std::size_t{4095}, std::size_t{8 * mib + 1}}) round_trip(pair, size);
  }
}

TEST_CASE("server plane statistics: RMAs, their bytes, registrations and the staging pool, per provider") {
  rdma_pair pair("tcp;ofi_rxm", "tcp;ofi_rxm");
  const auto before = pair.server_plane->statistics();
  REQUIRE(before.size() == 1);
  CHECK(before[0].provider == "tcp;ofi_rxm");
  CHECK(before[0].staging_buffers == 8);
  CHECK(before[0].staging_buffers_free == 8);
  CHECK(before[0].endpoint.registrations == 8);  // the staging buffers
  CHECK(before[0].endpoint.operations == 0);
  CHECK(before[0].endpoint.bytes == 0);
  const std::size_t size = 3 * mib + 5;
  round_trip(pair, size);  // PUT: RMA reads into staging buffers; GET: RMA writes from the registered object
  const auto after = pair.server_plane->statistics();
  REQUIRE(after.size() == 1);
  CHECK(after[0].endpoint.bytes == 2 * size);
  CHECK(after[0].endpoint.operations >= 2 * 4);  // 1 MiB pieces each way
  CHECK(after[0].endpoint.errors == 0);
  CHECK(after[0].endpoint.registrations == 9);  // and the GET's source, for that request
  CHECK(after[0].staging_buffers_free == 8);    // all back in the pool
}

TEST_CASE("S3 over RDMA: a ranged GET lands only the range") {
  rdma_pair pair("shm", "shm");
  const auto data = random_bytes(3 * mib, 3);
  auto source = data;
  pair.client->put_object("bkt", "r", host_region(source));
  std::vector<std::byte> got(1000);
  s3::transfer_report report;
  s3::get_options get(byte_range{12345, 1000});
  get.via = s3::transfer_via::rdma;
  get.report = &report;
  CHECK(pair.client->get_object("bkt", "r", host_region(got), get) == 1000);
  CHECK(std::equal(got.begin(), got.end(), data.begin() + 12345));
  CHECK(report.rdma_bytes == 1000);
}

TEST_CASE("S3 over RDMA: a server without a plane declines, automatic falls back to HTTP, rdma fails") {
  rdma_pair pair("", "shm");
  const auto data = random_bytes(7 * mib, 4);  // multipart: every part is declined
  auto source = data;
  error_code ec;
  s3::put_options strict_put;
  strict_put.via = s3::transfer_via::rdma;
  pair.client->put_object("bkt", "k", host_region(source), strict_put, ec);
  CHECK(ec == s3::errc::rdma_not_supported);
  CHECK(pair.store.list({"bkt"}, ec).objects.empty());

  s3::transfer_report put_report;
  s3::put_options put;
  put.report = &put_report;
  pair.client->put_object("bkt", "k", host_region(source), put, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK(put_report.http_bytes == data.size());
  CHECK(put_report.rdma_bytes == 0);
  CHECK(put_report.declined == 2);

  std::vector<std::byte> got(data.size());
  s3::transfer_report get_report;
  s3::get_options get;
  get.report = &get_report;
  CHECK(pair.client->get_object("bkt", "k", host_region(got), get, ec) == data.size());
  CHECK(!ec);
  CHECK(got == data);
  CHECK(get_report.http_bytes == data.size());
  CHECK(get_report.declined >= 1);

  s3::get_options strict_get;
  strict_get.via = s3::transfer_via::rdma;
  pair.client->get_object("bkt", "k", host_region(got), strict_get, ec);
  CHECK(ec == s3::errc::rdma_not_supported);
}

TEST_CASE("S3 over RDMA: a token for a provider the server lacks is declined") {
  rdma_pair pair("shm", "tcp;ofi_rxm");
  std::vector<std::byte> data = random_bytes(100, 5);
  s3::transfer_report report;
  s3::put_options put;
  put.report = &report;
  pair.client->put_object("bkt", "k", host_region(data), put);
  CHECK(report.declined == 1);
  CHECK(report.http_bytes == 100);
}

TEST_CASE("S3 over RDMA: multipart upload with RDMA parts and parallel ranged GETs") {
  rdma_pair pair("tcp;ofi_rxm", "tcp;ofi_rxm");
  const auto data = random_bytes(17 * mib + 3, 6);
  auto source = data;
  s3::transfer_report put_report;
  s3::put_options put;
  put.via = s3::transfer_via::rdma;
  put.report = &put_report;
  const std::string etag = pair.client->put_object("bkt", "big", host_region(source), put);
  CHECK(etag.ends_with("-4"));
  CHECK(put_report.rdma_requests == 4);
  std::vector<std::byte> got(data.size());
  s3::transfer_report get_report;
  s3::get_options get;
  get.via = s3::transfer_via::rdma;
  get.report = &get_report;
  CHECK(pair.client->get_object("bkt", "big", host_region(got), get) == data.size());
  CHECK(got == data);
  CHECK(get_report.rdma_bytes == data.size());
  CHECK(get_report.rdma_requests >= 3);
}

TEST_CASE("a token must name an endpoint on the host the request came from") {
  namespace asio = boost::asio;
  s3::rdma_token token;
  token.provider = "tcp;ofi_rxm";
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(4242);
  in.sin_addr.s_addr = htonl(0x7F000001);  // 127.0.0.1
  token.endpoint.resize(sizeof in);
  std::memcpy(token.endpoint.data(), &in, sizeof in);
  CHECK(s3::detail::token_names_host(token, asio::ip::make_address("127.0.0.1")));
  CHECK(s3::detail::token_names_host(token, asio::ip::make_address("::ffff:127.0.0.1")));
  CHECK_FALSE(s3::detail::token_names_host(token, asio::ip::make_address("10.0.0.7")));
  token.provider = "shm";
  CHECK(s3::detail::token_names_host(token, asio::ip::make_address("127.0.0.1")));
  CHECK_FALSE(s3::detail::token_names_host(token, asio::ip::make_address("10.0.0.7")));
  // tcp endpoints are sockaddrs: garbage (all 0xff), a short name or port 0 never reach the provider.
  token.provider = "tcp;ofi_rxm";
  const auto loopback = asio::ip::make_address("127.0.0.1");
  std::vector<std::byte> good = token.endpoint;
  token.endpoint.assign(sizeof in, std::byte{0xff});
  CHECK_FALSE(s3::detail::token_names_host(token, loopback));
  token.endpoint.assign(good.begin(), good.begin() + 4);
  CHECK_FALSE(s3::detail::token_names_host(token, loopback));
  token.endpoint.assign(1, std::byte{2});
  CHECK_FALSE(s3::detail::token_names_host(token, loopback));
  in.sin_port = 0;
  std::memcpy(token.endpoint.data(), &in, 1);
  token.endpoint.resize(sizeof in);
  std::memcpy(token.endpoint.data(), &in, sizeof in);
  CHECK_FALSE(s3::detail::token_names_host(token, loopback));
  token.endpoint = good;
  CHECK(s3::detail::token_names_host(token, loopback));
}

TEST_CASE("S3 over RDMA: a client plane with several endpoints spreads its grants over them") {
  for (const std::string provider : {"shm", "tcp;ofi_rxm"}) {
    CAPTURE(provider);
    rdma_pair pair(provider, provider, 3);
    REQUIRE(pair.client_plane->endpoint_count() == 3);
    std::vector<std::byte> memory(4096);
    std::set<std::vector<std::byte>> names;
    for (int i = 0; i < 6; ++i) {
      error_code ec;
      auto grant = pair.client_plane->grant_access(host_region(memory), s3::rdma_op::write,
                                                   std::chrono::system_clock::now() + 1min, ec);
      REQUIRE_MESSAGE(grant, ec.message());
      const auto token = s3::decode_rdma_token(grant->token(), ec);
      REQUIRE(!ec);
      names.insert(token.endpoint);
    }
    CHECK(names.size() == 3);
    // Parts of one GET land through different endpoints, all byte-exact.
    round_trip(pair, 3 * mib + 1);
  }
  fabric::client_plane_config none;
  none.endpoints = 0;
  CHECK(none.validate()->field == "endpoints");
}

TEST_CASE("server plane: the blocking write_from and read, and more reads at once than staging buffers") {
  for (const std::string provider : {"shm", "tcp;ofi_rxm"}) {
    CAPTURE(provider);
    rdma_pair pair(provider, provider);  // 8 staging buffers of 1 MiB, 4 per transfer
    const auto deadline = std::chrono::system_clock::now() + 5min;
    const s3::rdma_requester who{"alice"};
    const std::size_t size = 3 * mib + 7;

    // write_from: the source's bytes land in the granted memory, nothing past them.
    const auto data = random_bytes(size, 11);
    auto owner = std::make_shared<std::vector<std::byte>>(data);
    std::vector<std::byte> into(size + 64, std::byte{0xA5});
    error_code ec;
    auto grant = pair.client_plane->grant_access(region{into.data(), size, memory_kind::host_pageable, -1},
                                                 s3::rdma_op::write, deadline, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    s3::rdma_token token = s3::decode_rdma_token(grant->token(), ec);
    REQUIRE(!ec);
    const s3::rdma_source source{host_region(std::as_const(*owner)), 0, size, owner, {}};
    CHECK(!pair.server_plane->write_from(who, token, source));
    CHECK(std::equal(data.begin(), data.end(), into.begin()));
    CHECK(std::all_of(into.begin() + static_cast<std::ptrdiff_t>(size), into.end(),
                      [](std::byte b) { return b == std::byte{0xA5}; }));
    // A token whose memory is one byte short of the source: refused, nothing moved.
    s3::rdma_token short_token = token;
    short_token.segments[0].length = size - 1;
    CHECK(pair.server_plane->write_from(who, short_token, source) == s3::errc::invalid_rdma_token);

    // read: six transfers of 3 MiB + 7 at once need 24 buffers over their lives, 8 exist: the
    // pool hands them out as they come back; every sink sees its bytes in order.
    constexpr int transfers = 6;
    std::vector<std::vector<std::byte>> sources;
    std::vector<std::unique_ptr<s3::rdma_client_plane::grant>> grants;
    std::vector<s3::rdma_token> tokens;
    for (int i = 0; i < transfers; ++i) {
      sources.push_back(random_bytes(size, 100 + static_cast<std::uint32_t>(i)));
      grants.push_back(pair.client_plane->grant_access(host_region(sources.back()), s3::rdma_op::read, deadline, ec));
      REQUIRE(!ec);
      tokens.push_back(s3::decode_rdma_token(grants.back()->token(), ec));
      REQUIRE(!ec);
    }
    std::vector<std::vector<std::byte>> received(transfers);
    std::vector<error_code> results(transfers);
    std::vector<std::thread> threads;
    for (int i = 0; i < transfers; ++i) {
      threads.emplace_back([&, i] {
        results[i] = pair.server_plane->read(who, tokens[i], size, [&, i](std::span<const std::byte> bytes) {
          received[i].insert(received[i].end(), bytes.begin(), bytes.end());
          return error_code{};
        });
      });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < transfers; ++i) {
      CAPTURE(i);
      CHECK(!results[i]);
      CHECK(received[i] == sources[i]);
    }
    // A sink's error ends the transfer with it; the buffers all come back.
    const error_code full = make_error_code(boost::system::errc::no_space_on_device);
    std::size_t seen = 0;
    CHECK(pair.server_plane->read(who, tokens[0], size, [&](std::span<const std::byte> bytes) {
      seen += bytes.size();
      return full;
    }) == full);
    CHECK(seen == 1 * mib);
    // Buffers whose reads were in flight when the sink failed come back when those complete.
    const auto until = std::chrono::steady_clock::now() + 10s;
    std::size_t free = 0;
    while ((free = pair.server_plane->statistics().at(0).staging_buffers_free) != 8 &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(10ms);
    }
    CHECK(free == 8);
  }
}

TEST_CASE("server plane: a version's later GETs go from the registration kept for it, a new version from its own") {
  for (const std::string provider : {"shm", "tcp;ofi_rxm"}) {
    CAPTURE(provider);
    rdma_pair pair(provider, provider);
    const auto deadline = std::chrono::system_clock::now() + 5min;
    const s3::rdma_requester who{"alice"};
    const std::size_t size = 2 * mib + 3;
    // A GET's source as fs_store hands it over: a version of a file, mapped (here: memory
    // standing in for the mapping; the plane never reads the descriptor).
    const auto source_of = [&](const std::shared_ptr<const std::vector<std::byte>>& mapping, s3::object_version_id v,
                               std::uint64_t offset, std::uint64_t length) {
      s3::rdma_source source{host_region(*mapping), offset, length, mapping, v};
      source.file = 0;
      source.file_offset = 4096;
      return source;
    };
    // Moves `source` into fresh memory by RDMA; what landed.
    const auto get = [&](const s3::rdma_source& source) {
      std::vector<std::byte> into(source.length + 64, std::byte{0xA5});
      error_code ec;
      auto grant = pair.client_plane->grant_access(region{into.data(), source.length, memory_kind::host_pageable, -1},
                                                   s3::rdma_op::write, deadline, ec);
      REQUIRE_MESSAGE(!ec, ec.message());
      const s3::rdma_token token = s3::decode_rdma_token(grant->token(), ec);
      REQUIRE(!ec);
      CHECK(!pair.server_plane->write_from(who, token, source));
      CHECK(std::all_of(into.begin() + static_cast<std::ptrdiff_t>(source.length), into.end(),
                        [](std::byte b) { return b == std::byte{0xA5}; }));
      into.resize(source.length);
      return into;
    };
    const auto stats = [&] { return pair.server_plane->statistics().at(0); };
    const std::uint64_t registered = stats().endpoint.registrations;

    const auto data = random_bytes(size, 21);
    auto first = std::make_shared<const std::vector<std::byte>>(data);
    const std::weak_ptr<const std::vector<std::byte>> first_watch = first;
    CHECK(get(source_of(first, {7, 1}, 0, size)) == data);
    first.reset();
    CHECK_FALSE(first_watch.expired());  // kept, with its registration
    CHECK(stats().registration_cache_misses == 1);
    CHECK(stats().registration_cache_entries == 1);
    CHECK(stats().registration_cache_bytes == size);
    CHECK(stats().endpoint.registrations == registered + 1);

    // The same version mapped again (its next GET), a range of it: no registration, the bytes exact.
    auto again = std::make_shared<const std::vector<std::byte>>(data);
    const auto range = get(source_of(again, {7, 1}, mib - 5, mib + 2));
    CHECK(std::equal(range.begin(), range.end(), data.begin() + static_cast<std::ptrdiff_t>(mib - 5)));
    CHECK(stats().registration_cache_hits == 1);
    CHECK(stats().endpoint.registrations == registered + 1);

    // A new version of the key (other bytes, another file): its own bytes, never the kept ones.
    const auto replaced = random_bytes(size, 22);
    auto next = std::make_shared<const std::vector<std::byte>>(replaced);
    CHECK(get(source_of(next, {7, 2}, 0, size)) == replaced);
    CHECK(stats().registration_cache_misses == 2);
    CHECK(stats().endpoint.registrations == registered + 2);

    // Closing the plane lets the kept mappings go.
    pair.server_plane->close();
    CHECK(first_watch.expired());
  }
}
