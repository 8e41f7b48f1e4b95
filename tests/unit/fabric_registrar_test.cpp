// SPDX-License-Identifier: Apache-2.0
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
#include <tuple>
#include <vector>

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
  registrar_type make_registrar() { return {sources, s3::rdma_source{{}, 0, 0, owner, {}}, nullptr}; }
  static testing::page_buffer make_memory(std::size_t size) { return testing::page_buffer(size); }
  static region refused(std::span<std::byte> scratch) {
    return {scratch.data(), scratch.size(), memory_kind::cuda_device, 0};
  }
};

/// The same with the provider's registration cache: the suite's memory is one version of a file
/// as the store maps it, so every registration comes from the cache's registration of it.
template <class Provider>
struct cached_mapping_fixture {
  using registrar_type = fabric::detail::mapping_registrar;
  static constexpr bool overlapping = true;
  struct view {
    sluice::region bytes;
    [[nodiscard]] sluice::region region() const { return bytes; }
  };
  fabric::registrar sources{endpoint_of(Provider::name), fabric::access::write_source, 0};
  fabric::detail::mapping_cache cache{16 * mib, 8};
  testing::page_buffer mapping{8 * 64 * 1024};
  registrar_type make_registrar() {
    s3::rdma_source source{mapping.region(), 0, mapping.region().size, std::make_shared<int>(7), {5, 9}};
    source.file = 0;
    return {sources, source, &cache};
  }
  view make_memory(std::size_t size) {
    REQUIRE(size <= mapping.region().size);
    return {{mapping.region().data, size, memory_kind::host_pageable, -1}};
  }
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
using tcp_mapping_cached = cached_mapping_fixture<tcp_provider>;
using shm_mapping_cached = cached_mapping_fixture<shm_provider>;

}  // namespace

TYPE_TO_STRING(tcp_cached);
TYPE_TO_STRING(tcp_uncached);
TYPE_TO_STRING(shm_cached);
TYPE_TO_STRING(shm_uncached);
TYPE_TO_STRING(tcp_mapping);
TYPE_TO_STRING(shm_mapping);
TYPE_TO_STRING(tcp_mapping_cached);
TYPE_TO_STRING(shm_mapping_cached);

TEST_CASE_TEMPLATE_INVOKE(registrar_conformance, tcp_cached, tcp_uncached, shm_cached, shm_uncached, tcp_mapping,
                          shm_mapping, tcp_mapping_cached, shm_mapping_cached);

TEST_CASE("mapping_registrar: a registration keeps the mapping's owner until its last share is gone") {
  fabric::registrar sources(endpoint_of("tcp;ofi_rxm"), fabric::access::write_source, 0);
  testing::page_buffer memory(8192);
  auto owner = std::make_shared<int>(1);
  const std::weak_ptr<int> watch = owner;
  fabric::detail::mapping_registrar registrar(sources, s3::rdma_source{{}, 0, 0, std::move(owner), {}}, nullptr);
  error_code ec;
  auto reg = registrar.register_region(memory.region(), ec);
  REQUIRE(!ec);
  auto share = reg.share();  // what an RMA still in flight holds
  registrar = fabric::detail::mapping_registrar(sources, s3::rdma_source{}, nullptr);
  reg = {};
  CHECK_FALSE(watch.expired());  // the share keeps the MR and the mapping
  CHECK(share->reg.region().data == memory.region().data);
  share.reset();
  CHECK(watch.expired());
}

namespace {

/// A GET's source as fs_store hands it over: one version of a file, mapped (here: page_buffer
/// memory standing in for the mapping; the cache never reads the descriptor, only its presence).
s3::rdma_source source_of(const testing::page_buffer& mapping, std::shared_ptr<const void> owner,
                          s3::object_version_id version, std::uint64_t file_offset = 0, int file = 0) {
  s3::rdma_source source{mapping.region(), 0, mapping.region().size, std::move(owner), version};
  source.file = file;
  source.file_offset = file_offset;
  return source;
}

}  // namespace

TEST_CASE("mapping_cache: a version's later GETs send from the registration kept, whatever their own mapping") {
  auto ep = endpoint_of("tcp;ofi_rxm");
  fabric::registrar sources(ep, fabric::access::write_source, 0);
  fabric::detail::mapping_cache cache(1 * mib, 8);
  const s3::object_version_id v1{3, 42};
  testing::page_buffer first(64 * 1024);
  auto first_owner = std::make_shared<int>(1);
  const std::weak_ptr<int> first_watch = first_owner;
  const auto registrations = [&] { return ep->statistics().registrations; };
  const std::uint64_t before = registrations();
  error_code ec;
  {
    fabric::detail::mapping_registrar registrar(sources, source_of(first, std::move(first_owner), v1, 4096), &cache);
    auto reg = registrar.register_region(first.region().subregion(8192, 4096, ec), ec);
    REQUIRE(!ec);
    CHECK(reg.region().data == first.region().bytes() + 8192);
    CHECK(reg.offset_in_mr() == 8192);  // the whole mapping is registered
    CHECK(reg.share()->reg.region().size == 64 * 1024);
  }
  CHECK(registrations() == before + 1);
  CHECK(cache.stats().misses == 1);
  CHECK(cache.stats().entries == 1);
  CHECK(cache.stats().bytes == 64 * 1024);
  CHECK_FALSE(first_watch.expired());  // the cache keeps the mapping it registered

  // The same version mapped again elsewhere (the next GET's own mapping): its range is sent from
  // the kept mapping, at the same place in the file; no registration, and the new mapping's
  // owner is not kept.
  testing::page_buffer second(64 * 1024);
  auto second_owner = std::make_shared<int>(2);
  const std::weak_ptr<int> second_watch = second_owner;
  {
    fabric::detail::mapping_registrar registrar(sources, source_of(second, std::move(second_owner), v1, 4096), &cache);
    auto reg = registrar.register_region(second.region().subregion(100, 5000, ec), ec);
    REQUIRE(!ec);
    CHECK(reg.region().data == first.region().bytes() + 100);
    CHECK(reg.region().size == 5000);
    CHECK(reg.offset_in_mr() == 100);
  }
  CHECK(registrations() == before + 1);
  CHECK(cache.stats().hits == 1);
  CHECK(second_watch.expired());

  // The same file id but bytes the kept mapping does not hold (a mapping that starts further on
  // in the file, as a gateway's range part does): registered and kept anew.
  testing::page_buffer further(8192);
  {
    fabric::detail::mapping_registrar registrar(
        sources, source_of(further, std::make_shared<int>(3), v1, 4096 + 64 * 1024), &cache);
    auto reg = registrar.register_region(further.region(), ec);
    REQUIRE(!ec);
    CHECK(reg.region().data == further.region().data);
  }
  CHECK(registrations() == before + 2);
  CHECK(cache.stats().entries == 2);

  // Another version: its own registration, never the first one's bytes.
  testing::page_buffer other(8192);
  {
    fabric::detail::mapping_registrar registrar(sources, source_of(other, std::make_shared<int>(4), {3, 43}, 4096),
                                                &cache);
    auto reg = registrar.register_region(other.region(), ec);
    REQUIRE(!ec);
    CHECK(reg.region().data == other.region().data);
  }
  CHECK(registrations() == before + 3);

  // Sources the cache does not take: no version, no file, larger than the byte bound. Each is
  // registered for its request alone, and its owner goes with that registration.
  for (const auto& [version, file, size] : {std::tuple{s3::object_version_id{}, 0, std::size_t{8192}},
                                            std::tuple{s3::object_version_id{3, 44}, -1, std::size_t{8192}},
                                            std::tuple{s3::object_version_id{3, 45}, 0, std::size_t{2 * mib}}}) {
    CAPTURE(file);
    CAPTURE(size);
    testing::page_buffer alone(size);
    auto owner = std::make_shared<int>(5);
    const std::weak_ptr<int> watch = owner;
    fabric::detail::mapping_registrar registrar(sources, source_of(alone, std::move(owner), version, 0, file), &cache);
    auto reg = registrar.register_region(alone.region().subregion(0, 4096, ec), ec);
    REQUIRE(!ec);
    CHECK(reg.share()->reg.region().size == 4096);  // only the bytes asked for
    registrar = fabric::detail::mapping_registrar(sources, s3::rdma_source{}, nullptr);
    reg = {};
    CHECK(watch.expired());
  }
  CHECK(cache.stats().entries == 3);

  cache.clear();
  CHECK(first_watch.expired());
  CHECK(cache.stats().entries == 0);
  CHECK(cache.stats().bytes == 0);
}

TEST_CASE("mapping_cache: bounded by bytes and entries, least recently used first, never what a transfer uses") {
  auto ep = endpoint_of("tcp;ofi_rxm");
  fabric::registrar sources(ep, fabric::access::write_source, 0);
  fabric::detail::mapping_cache cache(64 * 1024, 3);  // three entries or 64 KiB
  std::vector<testing::page_buffer> mappings;
  std::vector<std::weak_ptr<int>> watches;
  error_code ec;
  const auto get = [&](std::size_t i) {
    auto owner = std::make_shared<int>(static_cast<int>(i));
    fabric::detail::mapping_registrar registrar(
        sources, source_of(mappings[i], std::move(owner), {1, static_cast<std::uint64_t>(i + 1)}), &cache);
    auto reg = registrar.register_region(mappings[i].region(), ec);
    REQUIRE(!ec);
    return reg;
  };
  for (std::size_t i = 0; i < 5; ++i) mappings.emplace_back(16 * 1024);
  for (std::size_t i = 0; i < 3; ++i) (void)get(i);
  CHECK(cache.stats().entries == 3);
  (void)get(0);  // a hit: 0 is now the most recently used
  CHECK(cache.stats().hits == 1);
  {
    auto in_flight = get(1);  // 1 held by a transfer still going
    (void)get(3);             // a fourth entry: 2, the least recently used one free, goes
    CHECK(cache.stats().entries == 3);
    CHECK(cache.stats().misses == 4);
    (void)get(1);
    CHECK(cache.stats().hits == 3);  // 1 is still there
    (void)get(2);                    // evicted before: registered again, 0 goes
    CHECK(cache.stats().misses == 5);
    (void)get(0);
    CHECK(cache.stats().misses == 6);  // 0 was evicted
  }
  // Bytes: 16 KiB each, 64 KiB at most, three entries at most: the entry bound binds here; a
  // mapping of 64 KiB + 1 is not kept at all.
  testing::page_buffer big(64 * 1024 + 1);
  fabric::detail::mapping_registrar registrar(sources, source_of(big, std::make_shared<int>(9), {2, 1}), &cache);
  (void)registrar.register_region(big.region(), ec);
  REQUIRE(!ec);
  CHECK(cache.stats().entries == 3);
  CHECK(cache.stats().bytes == 48 * 1024);
  // A cache of 0 bytes or 0 entries keeps nothing.
  fabric::detail::mapping_cache none(0, 0);
  fabric::detail::mapping_registrar uncached(sources, source_of(mappings[4], std::make_shared<int>(9), {2, 2}), &none);
  (void)uncached.register_region(mappings[4].region(), ec);
  REQUIRE(!ec);
  CHECK(none.stats().entries == 0);
  CHECK(none.stats().misses == 0);
}
