// SPDX-License-Identifier: Apache-2.0
#include <sluice/loopback.hpp>

#include <sluice/host_registrar.hpp>

#include <doctest/doctest.h>

#include "conformance/host_fixtures.hpp"
#include "conformance/transport_conformance.hpp"

namespace {

struct loopback_fixture {
  using transport_type = sluice::loopback_transport;
  using registrar_type = sluice::host_registrar;
  transport_type transport;
  registrar_type registrar;
  static sluice::testing::host_buffer make_local(std::size_t size) { return sluice::testing::host_buffer(size); }
  static sluice::testing::host_remote make_remote(std::span<const std::byte> initial) {
    return sluice::testing::host_remote(initial);
  }
};

}  // namespace

TEST_CASE_TEMPLATE_INVOKE(transport_conformance, loopback_fixture);

TEST_CASE("loopback refuses device memory without touching it") {
  using namespace sluice;
  std::vector<std::byte> host(16, std::byte{1});
  // A device region the transport must reject before dereferencing (the pointer is host memory
  // labelled as device memory, so a wrong dereference would go unnoticed by a crash: check bytes).
  std::vector<std::byte> fake_device(16, std::byte{2});
  const region device{fake_device.data(), fake_device.size(), memory_kind::cuda_device, 0};
  error_code ec;
  const auto n = loopback_transport::copy(direction::get, host_region(host), device, {0, 0, 16}, ec);
  CHECK(ec == errc::unsupported_memory);
  CHECK(n == 0);
  CHECK(host == std::vector<std::byte>(16, std::byte{1}));
  loopback_transport::copy(direction::put, host_region(host), device, {0, 0, 16}, ec);
  CHECK(ec == errc::unsupported_memory);
  CHECK(fake_device == std::vector<std::byte>(16, std::byte{2}));
}

TEST_CASE("loopback completes on the handler's executor, not inside the initiating call") {
  using namespace sluice;
  loopback_transport t;
  host_registrar r;
  std::vector<std::byte> src(8, std::byte{3}), dst(8);
  error_code ec;
  auto reg = r.register_region(host_region(dst), ec);
  boost::asio::io_context context;
  bool done = false;
  t.async_read(reg, host_region(src), {0, 0, 8}, boost::asio::bind_executor(context, [&](error_code e, std::size_t n) {
                 CHECK(!e);
                 CHECK(n == 8);
                 done = true;
               }));
  CHECK_FALSE(done);  // not run inline
  context.run();
  CHECK(done);
}
