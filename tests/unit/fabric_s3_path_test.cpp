// The S3 path's RDMA transport over a real libfabric provider (tcp;ofi_rxm, shm): the token
// protocol as a path<s3::negotiator, host_registrar, s3::rdma_transport>.
#include <sluice/fabric/s3_plane.hpp>

#include <sluice/host_registrar.hpp>
#include <sluice/memory_store.hpp>
#include <sluice/path.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/path.hpp>
#include <sluice/s3/server.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "conformance/host_fixtures.hpp"
#include "conformance/s3_fixtures.hpp"
#include "conformance/transport_conformance.hpp"

namespace {

using namespace sluice;
using testing::random_bytes;

// A server over a memory_store whose RDMA plane opens `provider` ("": none), and a client whose
// plane opens the same provider, in this process: the bytes cross a real libfabric provider.
struct rdma_server {
  explicit rdma_server(const std::string& provider, bool server_plane = true) {
    s3::server_config config;
    config.port = 0;
    config.users = {{"AK", "SK"}};
    error_code ec;
    if (server_plane) {
      fabric::server_plane_config plane;
      plane.fabric.provider = provider;
      plane.fabric.node = "127.0.0.1";
      plane.staging_buffer_bytes = 1 * mib;
      plane.staging_buffers = 8;
      config.rdma = fabric::server_plane::open(plane, ec);
      REQUIRE_MESSAGE(!ec, ec.message());
    }
    server = std::make_unique<s3::server<memory_store>>(store, config);
    server->listen();
    s3::client_config c;
    c.endpoint = "http://127.0.0.1:" + std::to_string(server->local_endpoint().port());
    c.creds = {"AK", "SK"};
    c.part_size = 5 * mib;
    c.multipart_threshold = 6 * mib;
    fabric::client_plane_config plane;
    plane.fabric.provider = provider;
    plane.fabric.node = "127.0.0.1";
    c.rdma = fabric::client_plane::open(plane, true, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    client = std::make_unique<s3::client>(c);
    client->create_bucket("bkt");
  }
  testing::s3_remote make_remote(std::span<const std::byte> initial) {
    return {*client, "bkt", "remote-" + std::to_string(next++), initial};
  }
  memory_store store;
  std::unique_ptr<s3::server<memory_store>> server;
  std::unique_ptr<s3::client> client;
  std::atomic<int> next{0};
};

template <class Provider>
struct rdma_fixture : rdma_server {
  using transport_type = s3::rdma_transport;
  using registrar_type = host_registrar;
  rdma_fixture() : rdma_server(Provider::name) {}
  transport_type transport{*client};
  registrar_type registrar;
  static testing::host_buffer make_local(std::size_t size) { return testing::host_buffer(size); }
};

struct tcp_provider {
  static constexpr const char* name = "tcp;ofi_rxm";
};
struct shm_provider {
  static constexpr const char* name = "shm";
};

using rdma_path = path<s3::negotiator, host_registrar, s3::rdma_transport>;
using http_path = path<s3::negotiator, host_registrar, s3::http_transport>;

}  // namespace

TEST_CASE_TEMPLATE_INVOKE(transport_conformance, rdma_fixture<tcp_provider>, rdma_fixture<shm_provider>);

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
