#include <sluice/fabric/registrar.hpp>

#include <sluice/fabric/endpoint.hpp>

#include <doctest/doctest.h>

#include "conformance/host_fixtures.hpp"
#include "conformance/registrar_conformance.hpp"

#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

// fabric::registrar in the registrar conformance suite, on each provider the tests run here, with
// its cache (capacity 64) and without one (capacity 0: each MR closes with its last registration).
// Its cache and invalidate() are tested in fabric_transport_test.cpp.

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

using tcp_cached = fabric_registrar_fixture<tcp_provider, 64>;
using tcp_uncached = fabric_registrar_fixture<tcp_provider, 0>;
using shm_cached = fabric_registrar_fixture<shm_provider, 64>;
using shm_uncached = fabric_registrar_fixture<shm_provider, 0>;

}  // namespace

TYPE_TO_STRING(tcp_cached);
TYPE_TO_STRING(tcp_uncached);
TYPE_TO_STRING(shm_cached);
TYPE_TO_STRING(shm_uncached);

TEST_CASE_TEMPLATE_INVOKE(registrar_conformance, tcp_cached, tcp_uncached, shm_cached, shm_uncached);
