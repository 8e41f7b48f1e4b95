// SPDX-License-Identifier: Apache-2.0
// The S3 path's RDMA transport over a real libfabric provider (tcp;ofi_rxm, shm): the token
// protocol as a path<s3::negotiator, host_registrar, s3::rdma_transport>.
#include <sluice/fallback_path.hpp>

#include <sluice/host_registrar.hpp>
#include <sluice/path.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/path.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "conformance/host_fixtures.hpp"
#include "conformance/s3_rdma_fixtures.hpp"
#include "conformance/transport_conformance.hpp"

namespace {

using namespace sluice;
using testing::random_bytes;

// The server's plane on `provider` (or none), the client's on the same provider.
struct rdma_server : testing::rdma_s3_server {
  explicit rdma_server(const std::string& provider, bool with_plane = true)
      : rdma_s3_server(with_plane ? provider : "", provider) {}
};

template <class Provider, class Transport = s3::rdma_transport>
struct rdma_fixture : rdma_server {
  using transport_type = Transport;
  using registrar_type = host_registrar;
  rdma_fixture() : rdma_server(Provider::name) {}
  transport_type transport{*client};
  registrar_type registrar;
  // The server reads a put's source by RMA: the client's provider answers with sendmsg.
  static testing::rma_source_buffer make_local(std::size_t size) { return testing::rma_source_buffer(size); }
};

struct tcp_provider {
  static constexpr const char* name = "tcp;ofi_rxm";
};
struct shm_provider {
  static constexpr const char* name = "shm";
};

using rdma_path = path<s3::negotiator, host_registrar, s3::rdma_transport>;
using http_path = path<s3::negotiator, host_registrar, s3::http_transport>;
using auto_path = path<s3::negotiator, host_registrar, s3::auto_transport>;

}  // namespace

TEST_CASE_TEMPLATE_INVOKE(transport_conformance, rdma_fixture<tcp_provider>, rdma_fixture<shm_provider>,
                          rdma_fixture<tcp_provider, s3::auto_transport>);

TEST_CASE("s3 path over RDMA: every byte moves by RMA, none in an HTTP body") {
  rdma_server live("tcp;ofi_rxm");
  rdma_path p{s3::negotiator{*live.client}, host_registrar{}, s3::rdma_transport{*live.client}};
  for (const std::size_t n : {std::size_t{1}, std::size_t{4097}, 7 * mib + 3}) {
    CAPTURE(n);
    auto data = random_bytes(n, static_cast<std::uint32_t>(n) + 5);
    const auto before = live.client->statistics();
    const transfer_result put = p.put({"bkt", "k"}, host_region(data));
    CHECK(put.transport == "s3-rdma");
    std::vector<std::byte> got(n);
    CHECK(p.get({"bkt", "k"}, host_region(got)).bytes == n);
    CHECK(got == data);
    const auto after = live.client->statistics();
    CHECK(after.rdma_bytes - before.rdma_bytes == 2 * n);
    CHECK(after.http_bytes == before.http_bytes);
  }
}

TEST_CASE("s3 path over RDMA: a server without a plane declines, and the HTTP path still serves") {
  rdma_server live("tcp;ofi_rxm", false);
  rdma_path rdma{s3::negotiator{*live.client}, host_registrar{}, s3::rdma_transport{*live.client}};
  http_path http{s3::negotiator{*live.client}, host_registrar{}, s3::http_transport{*live.client}};
  auto data = random_bytes(4096, 6);
  error_code ec;
  rdma.put({"bkt", "k"}, host_region(data), ec);
  CHECK(ec == s3::errc::rdma_not_supported);
  CHECK(ec == condition::declined);
  CHECK(live.client->statistics().http_bytes == 0);  // nothing went in a body behind the caller's back
  http.put({"bkt", "k"}, host_region(data));
  std::vector<std::byte> got(4096);
  rdma.get({"bkt", "k"}, host_region(got), ec);
  CHECK(ec == condition::declined);
  CHECK(http.get({"bkt", "k"}, host_region(got)).bytes == 4096);
  CHECK(got == data);
}

TEST_CASE("s3 fallback_path: RDMA first, HTTP when the server declines, the result says which ran and why") {
  auto data = random_bytes(100000, 8);
  for (const bool server_plane : {false, true}) {
    CAPTURE(server_plane);
    rdma_server live("tcp;ofi_rxm", server_plane);
    std::vector<any_path> paths;
    paths.emplace_back(rdma_path{s3::negotiator{*live.client}, host_registrar{}, s3::rdma_transport{*live.client}});
    paths.emplace_back(http_path{s3::negotiator{*live.client}, host_registrar{}, s3::http_transport{*live.client}});
    fallback_path p{std::move(paths)};

    const transfer_result put = p.put({"bkt", "k"}, host_region(data));
    std::vector<std::byte> got(data.size());
    const transfer_result get = p.get({"bkt", "k"}, host_region(got));
    CHECK(got == data);
    const auto stats = live.client->statistics();
    for (const transfer_result* r : {&put, &get}) {
      CHECK(r->bytes == data.size());
      if (server_plane) {
        CHECK(r->transport == "s3-rdma");
        CHECK(r->skipped.empty());
      } else {
        CHECK(r->transport == "s3-http");
        REQUIRE(r->skipped.size() == 1);
        CHECK(r->skipped[0].transport == "s3-rdma");
        CHECK(r->skipped[0].reason == s3::errc::rdma_not_supported);
      }
    }
    CHECK(stats.rdma_bytes == (server_plane ? 2 * data.size() : 0));
    CHECK(stats.http_bytes == (server_plane ? 0 : 2 * data.size()));

    // A missing object is the transfer's failure on every path: one HEAD, no second path.
    const auto before = live.client->statistics().requests;
    error_code ec;
    const transfer_result missing = p.get({"bkt", "missing"}, host_region(got), ec);
    CHECK(ec == condition::not_found);
    CHECK(missing.skipped.empty());
    CHECK(live.client->statistics().requests - before == 1);
  }
}

TEST_CASE("s3 auto_transport: RDMA when the server takes the token, else the body, in one request") {
  auto data = random_bytes(100000, 12);
  for (const bool server_plane : {false, true}) {
    CAPTURE(server_plane);
    rdma_server live("tcp;ofi_rxm", server_plane);
    auto_path p{s3::negotiator{*live.client, {.skip_head_for_ranges = true}}, host_registrar{},
                s3::auto_transport{*live.client}};
    const transfer_result put = p.put({"bkt", "k"}, host_region(data));
    CHECK(put.bytes == data.size());
    CHECK(put.transport == "s3-auto");
    CHECK(put.skipped.empty());
    std::vector<std::byte> got(data.size());
    const auto before = live.client->statistics();
    CHECK(p.get({"bkt", "k"}, host_region(got), byte_range{0, data.size()}).bytes == data.size());
    CHECK(got == data);
    const auto after = live.client->statistics();
    CHECK(after.requests - before.requests == 1);  // a declined token costs no second request
    CHECK(after.rdma_bytes - before.rdma_bytes == (server_plane ? data.size() : 0));
    CHECK(after.http_bytes - before.http_bytes == (server_plane ? 0 : data.size()));
  }
}
