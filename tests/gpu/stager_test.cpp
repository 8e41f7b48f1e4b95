// SPDX-License-Identifier: Apache-2.0
#include <sluice/cuda/stager.hpp>

#include <sluice/cuda/device_memory.hpp>

#include <doctest/doctest.h>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>

#include "gpu_data.hpp"

#include <cstring>
#include <functional>
#include <thread>
#include <vector>

using namespace sluice;

namespace {

/// Streams `data` through the ring into `dst`: what every staged path does.
void stage(cuda::stager& ring, const std::vector<std::byte>& data, const region& dst) {
  const std::size_t slot = ring.config().slot_bytes;
  for (std::size_t offset = 0; offset < data.size(); offset += slot) {
    const std::size_t n = std::min(slot, data.size() - offset);
    error_code ec;
    const auto held = ring.acquire(ec);
    REQUIRE_MESSAGE(held, ec.message());
    CHECK(held->host.kind == memory_kind::host_pinned);
    CHECK(reinterpret_cast<std::uintptr_t>(held->host.data) % 4096 == 0);
    std::memcpy(held->host.data, data.data() + offset, n);
    const region target{static_cast<std::byte*>(dst.data) + offset, n, memory_kind::cuda_device, dst.device};
    REQUIRE(!ring.to_device(*held, target));
  }
  REQUIRE(!ring.drain());
}

}  // namespace

TEST_CASE("device_buffer, copy and fill") {
  auto buffer = cuda::device_buffer::allocate(1 << 20);
  CHECK(buffer.region().kind == memory_kind::cuda_device);
  CHECK(buffer.region().device == 0);
  const auto data = testing::fast_random_bytes(1 << 20, 1);
  REQUIRE(!cuda::copy(buffer.region(), testing::source_region(data)));
  std::vector<std::byte> back(1 << 20);
  REQUIRE(!cuda::copy(host_region(back), buffer.region()));
  CHECK(back == data);
  REQUIRE(!cuda::fill(buffer.region(), std::byte{7}));
  REQUIRE(!cuda::copy(host_region(back), buffer.region()));
  CHECK(std::all_of(back.begin(), back.end(), [](std::byte b) { return b == std::byte{7}; }));
  CHECK(cuda::copy(buffer.region(), host_region(std::span(back).first(10))) == errc::invalid_argument);
  error_code ec;
  auto huge = cuda::device_buffer::allocate(std::size_t{1} << 50, 0, ec);  // 1 PiB
  CHECK(ec);
  CHECK(huge.native_handle() == nullptr);
  auto moved = std::move(buffer);
  CHECK(buffer.native_handle() == nullptr);
  CHECK(moved.size() == std::size_t{1} << 20);
}

TEST_CASE("stager config is validated") {
  CHECK(!cuda::stager_config{}.validate());
  CHECK(cuda::stager_config{}.slot_bytes * cuda::stager_config{}.slots <= 64u << 20);  // the default bound
  CHECK(cuda::stager_config{.slot_bytes = 4097}.validate()->field == "slot_bytes");
  CHECK(cuda::stager_config{.slots = 1}.validate()->field == "slots");
  error_code ec;
  CHECK(!cuda::stager::create({.slots = 1}, ec));
  CHECK(ec == errc::invalid_config);
}

TEST_CASE("stager: any size lands exactly, guards untouched, pinned memory bounded") {
  error_code ec;
  auto ring = cuda::stager::create({.slot_bytes = 1 << 20, .slots = 4}, ec);
  REQUIRE_MESSAGE(ring, ec.message());
  CHECK(ring->pinned_bytes() == 4u << 20);
  for (const std::size_t n : {std::size_t{1}, std::size_t{4095}, std::size_t{4096}, (std::size_t{8} << 20) + 1,
                              (std::size_t{256} << 20) + 3}) {
    CAPTURE(n);
    const auto data = testing::fast_random_bytes(n, n);
    testing::guarded_device dst(n);
    stage(*ring, data, dst.inner());
    CHECK(dst.holds(data));
  }
  CHECK(ring->pinned_bytes() == 4u << 20);
}

TEST_CASE("stager: 4 GiB + 1 through 64 MiB of pinned slots") {
  const std::size_t n = (std::size_t{4} << 30) + 1;
  const auto data = testing::fast_random_bytes(n, 4);
  testing::guarded_device dst(n);
  error_code ec;
  auto ring = cuda::stager::create({}, ec);
  REQUIRE_MESSAGE(ring, ec.message());
  stage(*ring, data, dst.inner());
  CHECK(dst.holds(data));
  CHECK(ring->pinned_bytes() == 64u << 20);
}

TEST_CASE("stager: producers on several threads, slots reused only after their copy") {
  error_code ec;
  auto ring = cuda::stager::create({.slot_bytes = 64 << 10, .slots = 3}, ec);
  REQUIRE(ring);
  const std::size_t parts = 512, slot = 64 << 10;
  const auto data = testing::fast_random_bytes(parts * slot, 9);
  testing::guarded_device dst(data.size());
  std::atomic<std::size_t> next{0};
  std::atomic<int> failures{0};
  auto work = [&] {
    for (std::size_t i; (i = next++) < parts;) {
      error_code e;
      auto held = ring->acquire(e);
      if (!held) {
        ++failures;
        return;
      }
      std::memcpy(held->host.data, data.data() + i * slot, slot);
      const region target{static_cast<std::byte*>(dst.inner().data) + i * slot, slot, memory_kind::cuda_device, 0};
      if (ring->to_device(*held, target)) ++failures;
    }
  };
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < 4; ++t) threads.emplace_back(work);
  }
  REQUIRE(!ring->drain());
  CHECK(failures == 0);
  CHECK(dst.holds(data));
}

TEST_CASE("stager: from_device copies back into a held slot; bad targets are refused") {
  error_code ec;
  auto ring = cuda::stager::create({.slot_bytes = 1 << 20, .slots = 2}, ec);
  REQUIRE(ring);
  const auto data = testing::fast_random_bytes(1 << 20, 5);
  auto device = cuda::device_buffer::allocate(1 << 20);
  REQUIRE(!cuda::copy(device.region(), testing::source_region(data)));
  auto held = ring->acquire(ec);
  REQUIRE(held);
  REQUIRE(!ring->from_device(*held, device.region()));
  CHECK(std::memcmp(held->host.data, data.data(), data.size()) == 0);
  std::vector<std::byte> host(16);
  CHECK(ring->to_device(*held, host_region(host)) == errc::invalid_argument);  // host memory is no target
  held = ring->acquire(ec);
  REQUIRE(held);
  auto big = cuda::device_buffer::allocate(2 << 20);
  CHECK(ring->from_device(*held, big.region()) == errc::invalid_argument);  // larger than a slot
  ring->release(*held);
}

TEST_CASE("stager: async_acquire hands a slot on only after its copy, and blocks no thread") {
  error_code ec;
  auto ring = cuda::stager::create({.slot_bytes = 64 << 10, .slots = 2}, ec);
  REQUIRE(ring);
  const std::size_t parts = 256, slot = 64 << 10;
  const auto data = testing::fast_random_bytes(parts * slot, 17);
  testing::guarded_device dst(data.size());
  // Four chains on one thread, two slots: every acquire past the second waits for a slot whose
  // copy may still be running, without blocking the thread that runs the others.
  boost::asio::io_context io;
  std::size_t next = 0;
  int failures = 0;
  std::function<void()> chain = [&] {
    if (next >= parts) return;
    const std::size_t i = next++;
    ring->async_acquire(boost::asio::bind_executor(io, [&, i](error_code e, cuda::stager::slot held) {
      if (e) {
        ++failures;
        return;
      }
      std::memcpy(held.host.data, data.data() + i * slot, slot);
      const region target{static_cast<std::byte*>(dst.inner().data) + i * slot, slot, memory_kind::cuda_device, 0};
      if (ring->to_device(held, target)) ++failures;
      chain();
    }));
  };
  for (int lane = 0; lane < 4; ++lane) chain();
  bool drained = false;
  io.run();  // returns only when every chain ended: a pending acquire keeps the context busy
  ring->async_drain(boost::asio::bind_executor(io, [&](error_code e) {
    drained = true;
    if (e) ++failures;
  }));
  io.restart();
  io.run();
  CHECK(drained);
  CHECK(next == parts);
  CHECK(failures == 0);
  CHECK(dst.holds(data));
}
