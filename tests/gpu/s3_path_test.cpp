// SPDX-License-Identifier: Apache-2.0
// The S3 RDMA path into and out of GPU memory as a path<N, R, T>: s3::negotiator ×
// cuda::device_registrar × s3::rdma_transport, over shm with FI_HMEM (the client's plane registers
// the device memory; the server's RMA lands in HBM). Needs a libfabric with CUDA (run.sh carries
// one).
#include <sluice/cuda/device_registrar.hpp>
#include <sluice/cuda/s3_path.hpp>

#include <sluice/cuda/device_memory.hpp>
#include <sluice/path.hpp>
#include <sluice/s3/path.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "conformance/s3_rdma_fixtures.hpp"
#include "conformance/transport_conformance.hpp"
#include "gpu_data.hpp"

namespace {

using namespace sluice;

// shm on both ends, the client's plane registering device memory (FI_HMEM). Required, not
// skipped: the GPU suite runs with a libfabric built with CUDA.
struct hmem_server : testing::rdma_s3_server {
  hmem_server() : rdma_s3_server("shm", "shm", 1, true) {
    REQUIRE_MESSAGE(client_plane->get_endpoint()->traits().hmem,
                    "shm without FI_HMEM: run with a libfabric built with CUDA");
  }
};

struct device_rdma_fixture : hmem_server {
  using transport_type = s3::rdma_transport;
  using registrar_type = cuda::device_registrar;
  transport_type transport{*client};
  registrar_type registrar;
  static testing::device_local make_local(std::size_t size) { return testing::device_local(size); }
};

using device_path = cuda::direct_path;

// The staged transport with a small ring (4 slots of 64 KiB): every span above 64 KiB is several
// parts, and 16 reads in flight share the four slots.
constexpr cuda::stager_config small_ring{.slot_bytes = 64 << 10, .slots = 4};

template <s3::transfer_via Via>
struct staged_fixture : hmem_server {
  using transport_type = cuda::staged_transport<Via>;
  using registrar_type = cuda::device_registrar;
  transport_type transport{*client, small_ring};
  registrar_type registrar;
  static testing::device_local make_local(std::size_t size) { return testing::device_local(size); }
};
using staged_rdma_fixture = staged_fixture<s3::transfer_via::rdma>;
using staged_http_fixture = staged_fixture<s3::transfer_via::http>;

}  // namespace

TEST_CASE_TEMPLATE_INVOKE(transport_conformance, device_rdma_fixture, staged_rdma_fixture, staged_http_fixture);

TEST_CASE("staged paths into GPU memory: put and get through a small ring, by RDMA and in HTTP bodies") {
  hmem_server live;
  cuda::staged_path<s3::transfer_via::rdma> by_rdma{
      s3::negotiator{*live.client}, cuda::device_registrar{},
      cuda::staged_transport<s3::transfer_via::rdma>{*live.client, small_ring, 3}};
  cuda::staged_path<s3::transfer_via::http> by_http{
      s3::negotiator{*live.client}, cuda::device_registrar{},
      cuda::staged_transport<s3::transfer_via::http>{*live.client, small_ring, 8}};
  for (const std::size_t n : {std::size_t{1}, (std::size_t{64} << 10) + 1, std::size_t{24} << 20}) {
    CAPTURE(n);
    const auto data = testing::fast_random_bytes(n, n + 7);
    auto source = cuda::device_buffer::allocate(n);
    REQUIRE(!cuda::copy(source.region(), testing::source_region(data)));
    const auto before = live.client->statistics();
    const transfer_result put = by_rdma.put({"bkt", "staged"}, source.region());
    CHECK(put.transport == "s3-staged-rdma");
    CHECK(!put.version.empty());
    testing::guarded_device whole(n);
    const transfer_result got = by_http.get({"bkt", "staged"}, whole.inner());
    CHECK(got.bytes == n);
    CHECK(got.transport == "s3-staged-http");
    CHECK(got.version == put.version);
    CHECK(whole.holds(data));
    const auto middle = live.client->statistics();
    CHECK(middle.rdma_bytes - before.rdma_bytes == n);  // the put's parts
    CHECK(middle.http_bytes - before.http_bytes == n);  // the get's bodies
    if (n > 2) {
      testing::guarded_device part(n - 2);
      CHECK(by_rdma.get({"bkt", "staged"}, part.inner(), byte_range{1, n - 2}).bytes == n - 2);
      CHECK(part.holds(std::vector<std::byte>(data.begin() + 1, data.end() - 1)));
      CHECK(live.client->statistics().http_bytes == middle.http_bytes);  // by RDMA only
    }
  }
}

TEST_CASE("s3 path into GPU memory: put from and get into device memory, every byte by RMA") {
  hmem_server live;
  device_path p{s3::negotiator{*live.client}, cuda::device_registrar{}, s3::rdma_transport{*live.client}};
  for (const std::size_t n : {std::size_t{1}, std::size_t{4097}, std::size_t{24} << 20}) {
    CAPTURE(n);
    const auto data = testing::fast_random_bytes(n, n + 3);
    auto source = cuda::device_buffer::allocate(n);
    REQUIRE(!cuda::copy(source.region(), testing::source_region(data)));
    const auto before = live.client->statistics();
    const transfer_result put = p.put({"bkt", "seg"}, source.region());
    CHECK(put.bytes == n);
    CHECK(put.transport == "s3-rdma");

    testing::guarded_device whole(n);
    CHECK(p.get({"bkt", "seg"}, whole.inner()).bytes == n);
    CHECK(whole.holds(data));
    if (n > 2) {
      testing::guarded_device middle(n - 2);
      CHECK(p.get({"bkt", "seg"}, middle.inner(), byte_range{1, n - 2}).bytes == n - 2);
      CHECK(middle.holds(std::vector<std::byte>(data.begin() + 1, data.end() - 1)));
    }
    const auto after = live.client->statistics();
    CHECK(after.http_bytes == before.http_bytes);  // nothing in an HTTP body
  }
}

TEST_CASE("s3 path into GPU memory: host memory is the registrar's refusal, not a silent copy") {
  hmem_server live;
  device_path p{s3::negotiator{*live.client}, cuda::device_registrar{}, s3::rdma_transport{*live.client}};
  std::vector<std::byte> host(4096, std::byte{1});
  p.put({"bkt", "h"}, cuda::device_buffer::allocate(4096).region());
  error_code ec;
  p.get({"bkt", "h"}, host_region(host), ec);
  CHECK(ec == errc::unsupported_memory);
  CHECK(host == std::vector<std::byte>(4096, std::byte{1}));
}

TEST_CASE("staged transport into GPU memory: a stale version or a wrong length fails, and the next read works") {
  hmem_server live;
  cuda::staged_transport<s3::transfer_via::http> t{*live.client, small_ring};
  const std::size_t n = (std::size_t{64} << 10) * 3 + 5;  // several parts
  const auto first = testing::fast_random_bytes(n, 91);
  auto remote = live.make_remote(first);
  const s3::object_remote stale = remote.descriptor();
  const auto second = testing::fast_random_bytes(n, 92);
  auto replaced = second;
  live.client->put_object("bkt", stale.key, host_region(replaced));  // a new version under the key
  testing::guarded_device dst(n);
  const cuda::device_registration reg(dst.inner());
  const auto read = [&](const s3::object_remote& r) {
    return testing::run_move([&](auto h) { t.async_read(reg, r, {0, 0, n}, std::move(h)); });
  };
  CHECK(read(stale).ec == s3::errc::precondition_failed);  // If-Match the negotiated ETag
  s3::object_remote longer = stale;                        // a size the object does not have
  longer.size = 2 * n;
  longer.etag.clear();
  testing::guarded_device wide(2 * n);
  const cuda::device_registration wide_reg(wide.inner());
  CHECK(testing::run_move([&](auto h) { t.async_read(wide_reg, longer, {0, 0, 2 * n}, std::move(h)); }).ec);
  // The same transport and ring serve the next, correct read.
  s3::object_remote fresh = stale;
  fresh.etag = live.client->head_object("bkt", stale.key).attributes.etag;
  const auto ok = read(fresh);
  REQUIRE_MESSAGE(!ok.ec, ok.ec.message());
  CHECK(ok.bytes == n);
  CHECK(dst.holds(second));
}
