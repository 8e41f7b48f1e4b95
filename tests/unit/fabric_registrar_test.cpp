#include <sluice/fabric/registrar.hpp>

#include <sluice/fabric/endpoint.hpp>

#include <doctest/doctest.h>

#include "conformance/host_fixtures.hpp"
#include "conformance/registrar_conformance.hpp"
#include "fabric/server_path.hpp"

#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

// fabric::registrar in the registrar conformance suite, on each provider the tests run here, with
// its cache (capacity 64) and without one (capacity 0: each MR closes with its last registration).
// Its cache and invalidate() are tested in fabric_transport_test.cpp. The server path's registrar
// (src/fabric/server_path.hpp: a store's mapping for RMA writes, keeping the mapping's owner) too.

namespace {

using namespace sluice;

std::shared_ptr<fabric::endpoint> endpoint_of(const std::string& provider) {
  static std::map<std::string, std::shared_ptr<fabric::endpoint>> opened;
  auto& ep = opened[provider];
  if (!ep) {
    fabric::fabric_config config;
    config.node = provider == "shm" ? "" : "127.0.0.1";
    error_code ec;
    ep = fabric::endpoint::open(provider, config, ec);
    REQUIRE_MESSAGE(!ec, provider, ": ", ec.message());
  }
  return ep;
}

template <class Provider, std::size_t Capacity>
struct fabric_registrar_fixture {
  using registrar_type = fabric::registrar;
  static constexpr bool overlapping = true;
  registrar_type make_registrar() {
    return registrar_type(endpoint_of(Provider::name), fabric::access::remote_read_write, Capacity);
  }
  static testing::page_buffer make_memory(std::size_t size) { return testing::page_buffer(size); }
  // Device memory on a provider opened without FI_HMEM (the endpoints here never ask for it).
  static region refused(std::span<std::byte> scratch) {
    return {scratch.data(), scratch.size(), memory_kind::cuda_device, 0};
  }
};

struct tcp_provider {
  static constexpr const char* name = "tcp;ofi_rxm";
};
struct shm_provider {
  static constexpr const char* name = "shm";
};

/// The server path's mapping_registrar over an uncached fabric::registrar (access::write_source,
/// as the server registers a GET's mapping).
template <class Provider>
struct mapping_registrar_fixture {
  using registrar_type = fabric::detail::mapping_registrar;
  static constexpr bool overlapping = true;
  fabric::registrar sources{endpoint_of(Provider::name), fabric::access::write_source, 0};
  std::shared_ptr<const void> owner = std::make_shared<int>(7);
  registrar_type make_registrar() { return {sources, owner}; }
  static testing::page_buffer make_memory(std::size_t size) { return testing::page_buffer(size); }
  static region refused(std::span<std::byte> scratch) {
    return {scratch.data(), scratch.size(), memory_kind::cuda_device, 0};
  }
};

using tcp_cached = fabric_registrar_fixture<tcp_provider, 64>;
using tcp_uncached = fabric_registrar_fixture<tcp_provider, 0>;
using shm_cached = fabric_registrar_fixture<shm_provider, 64>;
using shm_uncached = fabric_registrar_fixture<shm_provider, 0>;
using tcp_mapping = mapping_registrar_fixture<tcp_provider>;
using shm_mapping = mapping_registrar_fixture<shm_provider>;

}  // namespace

TYPE_TO_STRING(tcp_cached);
TYPE_TO_STRING(tcp_uncached);
TYPE_TO_STRING(shm_cached);
TYPE_TO_STRING(shm_uncached);
TYPE_TO_STRING(tcp_mapping);
TYPE_TO_STRING(shm_mapping);

TEST_CASE_TEMPLATE_INVOKE(registrar_conformance, tcp_cached, tcp_uncached, shm_cached, shm_uncached, tcp_mapping,
                          shm_mapping);

TEST_CASE("mapping_registrar: a registration keeps the mapping's owner until its last share is gone") {
  fabric::registrar sources(endpoint_of("tcp;ofi_rxm"), fabric::access::write_source, 0);
  testing::page_buffer memory(8192);
  auto owner = std::make_shared<int>(1);
  const std::weak_ptr<int> watch = owner;
  fabric::detail::mapping_registrar registrar(sources, std::move(owner));
  error_code ec;
  auto reg = registrar.register_region(memory.region(), ec);
  REQUIRE(!ec);
  auto share = reg.share();  // what an RMA still in flight holds
  registrar = fabric::detail::mapping_registrar(sources, nullptr);
  reg = {};
  CHECK_FALSE(watch.expired());  // the share keeps the MR and the mapping
  CHECK(share->reg.region().data == memory.region().data);
  share.reset();
  CHECK(watch.expired());
}
