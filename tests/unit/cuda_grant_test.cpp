// SPDX-License-Identifier: Apache-2.0
#include <sluice/cuda/grant.hpp>

#include <sluice/cuda/device.hpp>
#include <sluice/cuda/device_memory.hpp>
#include <sluice/detail/registration_cache.hpp>
#include <sluice/pinned_budget.hpp>
#include <sluice/s3/error.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <random>
#include <thread>
#include <vector>

// Runs everywhere: without a GPU the opener answers no_device and the exporter refuses; with one,
// hostile descriptions are refused without a crash and a real allocation exports its base and size.
TEST_CASE("cuda grants: opener and exporter on this host") {
  using namespace sluice;
  error_code ec;
  CHECK(cuda::grant_opener_config{}.validate() == std::nullopt);
  cuda::grant_opener_config bad;
  bad.chunk_bytes = 12345;
  CHECK(bad.validate());
  CHECK(!cuda::make_grant_opener(bad, ec));
  CHECK(ec == errc::invalid_config);

  auto exporter = cuda::make_grant_exporter();
  std::vector<std::byte> host(4096);
  (void)exporter->export_allocation(host_region(host), ec);
  CHECK(ec == errc::unsupported_memory);  // host memory is never described as device memory

  auto opener = cuda::make_grant_opener({}, ec);
  if (cuda::device_count(ec) == 0) {
    MESSAGE("no CUDA device here: " << cuda::no_device_reason());
    CHECK(!opener);
    return;
  }
  REQUIRE(opener);
  // The page cache registers in a context of its own (else the first GET of an object registers
  // and copies in turn, at half the rate: it went unnoticed once, when a driver entry point's
  // signature changed).
  CHECK(cuda::stats_of(*opener).registration_context);
  // Hostile descriptions: wrong sizes, wrong magic, random bytes. Refused, never opened.
  std::mt19937 gen(5);
  for (const std::size_t n : {0UL, 1UL, 95UL, 96UL, 97UL, 512UL}) {
    std::vector<std::byte> junk(n);
    for (auto& b : junk) b = static_cast<std::byte>(gen() & 0xFFU);
    CHECK(!opener->open(junk, ec));
    CHECK(ec);
  }
  auto device = cuda::device_buffer::allocate(3 << 20, 0, ec);
  REQUIRE(!ec);
  const region middle{static_cast<std::byte*>(device.native_handle()) + 4096, 1 << 20, memory_kind::cuda_device, 0};
  const auto exported = exporter->export_allocation(middle, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK(exported.base == device.native_handle());
  CHECK(exported.size >= (3u << 20));
  CHECK(exported.description.size() == 96);
  // The same process cannot open its own IPC handle: refused as not openable here.
  CHECK(!opener->open(exported.description, ec));
  CHECK(ec == s3::errc::rdma_not_supported);
  std::vector<std::byte> wrong_uuid = exported.description;
  wrong_uuid[8 + 64] ^= std::byte{0xff};
  CHECK(!opener->open(wrong_uuid, ec));
  CHECK(ec == s3::errc::rdma_not_supported);
  CHECK(cuda::stats_of(*opener).open_handles == 0);
}

// Register on write: a version a store publishes is registered in the background, before its
// first GET; one under the least size, one without a version, or with the feature off, is not.
TEST_CASE("cuda grants: a published version is registered before its first GET") {
  using namespace sluice;
  error_code ec;
  if (cuda::device_count(ec) == 0) {
    MESSAGE("skipped: no CUDA device here: " << cuda::no_device_reason());
    return;
  }
  const auto source_of = [](std::size_t bytes, std::uint64_t version) {
    auto owner = std::make_shared<std::vector<std::byte>>(bytes, std::byte{7});
    s3::rdma_source source;
    source.mapping = {owner->data(), owner->size(), memory_kind::host_pageable, -1};
    source.length = owner->size();
    source.owner = owner;
    source.version = {version == 0 ? std::uint64_t{0} : std::uint64_t{1}, version};  // {0, 0}: no version
    return source;
  };
  cuda::grant_opener_config config;
  config.chunk_bytes = 4 << 20;
  config.copy_threads = 0;
  auto opener = cuda::make_grant_opener(config, ec);
  REQUIRE(opener);
  CHECK(opener->published_min_bytes() == config.register_on_write_min_bytes);
  opener->published(source_of(1 << 20, 1));   // under 8 MiB
  opener->published(source_of(16 << 20, 0));  // no version: nothing to find it by later
  CHECK(cuda::stats_of(*opener).registered_on_write == 0);
  opener->published(source_of(16 << 20, 2));
  CHECK(cuda::stats_of(*opener).registered_on_write == 1);
  // Registered by the registering thread meanwhile (16 MiB: well under a second).
  for (int i = 0; i < 500 && cuda::stats_of(*opener).registered_bytes < (16u << 20); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(cuda::stats_of(*opener).registered_bytes >= (16u << 20));
  CHECK(cuda::stats_of(*opener).registrations >= 4);

  // The budget holds while versions keep coming: the least recently used one goes, on the
  // registering thread, before more is registered.
  cuda::grant_opener_config small = config;
  small.registration_budget = 20 << 20;
  auto bounded = cuda::make_grant_opener(small, ec);
  REQUIRE(bounded);
  for (std::uint64_t v = 10; v < 14; ++v) {
    bounded->published(source_of(16 << 20, v));
    for (int i = 0; i < 500 && cuda::stats_of(*bounded).registrations < (v - 9) * 4; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      CHECK(cuda::stats_of(*bounded).registered_bytes <= small.registration_budget);
    }
  }
  CHECK(cuda::stats_of(*bounded).registered_bytes <= small.registration_budget);
  CHECK(cuda::stats_of(*bounded).evictions > 0);
  // And the count of versions kept (each holds its file open): 3 published, at most 2 kept.
  cuda::grant_opener_config few = config;
  few.max_cached_versions = 2;
  auto counted = cuda::make_grant_opener(few, ec);
  REQUIRE(counted);
  for (std::uint64_t v = 20; v < 23; ++v) {
    counted->published(source_of(9 << 20, v));
    for (int i = 0; i < 500 && cuda::stats_of(*counted).registrations < (v - 19) * 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  CHECK(cuda::stats_of(*counted).cached_versions <= 2);

  config.register_on_write = false;
  auto off = cuda::make_grant_opener(config, ec);
  REQUIRE(off);
  CHECK(off->published_min_bytes() == std::numeric_limits<std::uint64_t>::max());
  off->published(source_of(16 << 20, 3));
  CHECK(cuda::stats_of(*off).registered_on_write == 0);
}

TEST_CASE("cuda grants: one pinned budget over the opener and another cache, 3x its worth published") {
  using namespace sluice;
  error_code ec;
  if (cuda::device_count(ec) == 0) {
    MESSAGE("skipped: no CUDA device here: " << cuda::no_device_reason());
    return;
  }
  // 32 MiB over both: a cache of the fabric plane's kind holds 8 MiB of it for a transfer, the
  // opener (registration_budget far above) gets the rest; 96 MiB of versions are published.
  auto budget = std::make_shared<pinned_budget>(32 << 20);
  sluice::detail::registration_cache<int, const int> other(1 << 30, 8, budget);
  REQUIRE(other.insert(1, std::make_shared<const int>(1), 8 << 20, [](int, int) { return false; }));
  const auto held = other.find([](int k, int) { return k == 1; });
  cuda::grant_opener_config config;
  config.chunk_bytes = 4 << 20;
  config.copy_threads = 0;
  config.registration_budget = std::uint64_t{1} << 30;
  config.pinned = budget;
  auto opener = cuda::make_grant_opener(config, ec);
  REQUIRE(opener);
  std::vector<std::shared_ptr<std::vector<std::byte>>> kept;
  std::uint64_t most = 0;
  for (std::uint64_t v = 1; v <= 12; ++v) {
    auto owner = std::make_shared<std::vector<std::byte>>(8 << 20, std::byte{7});
    s3::rdma_source source;
    source.mapping = {owner->data(), owner->size(), memory_kind::host_pageable, -1};
    source.length = owner->size();
    source.owner = owner;
    source.version = {1, v};
    opener->published(source);
    kept.push_back(owner);
    for (int i = 0; i < 200 && cuda::stats_of(*opener).registrations + budget->stats().refused < v * 2; ++i) {
      most = std::max(most, budget->used());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  // Until the registration pool is done (no change for 0.2 s).
  for (std::uint64_t before = ~std::uint64_t{0}, now = 0; now != before;) {
    before = now;
    for (int i = 0; i < 40; ++i) {
      most = std::max(most, budget->used());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    now = cuda::stats_of(*opener).registrations + budget->stats().refused;
  }
  CHECK(most <= budget->limit());
  CHECK(cuda::stats_of(*opener).registered_bytes <= budget->limit() - (8u << 20));
  CHECK(cuda::stats_of(*opener).evictions > 0);                     // the least recently used versions made room
  CHECK(other.find([](int k, int) { return k == 1; }) != nullptr);  // the other cache's entry stayed
  MESSAGE("pinned at most " << (most >> 20) << " MiB of a " << (budget->limit() >> 20)
                            << " MiB budget; opener registered " << (cuda::stats_of(*opener).registered_bytes >> 20)
                            << " MiB, budget refusals " << budget->stats().refused);
  opener.reset();
  other.clear();
  CHECK(budget->used() == 0);  // everything unregistered gave its bytes back
}
