// SPDX-License-Identifier: Apache-2.0
#include <sluice/cuda/s3.hpp>

#include <sluice/fabric/s3_plane.hpp>
#include <sluice/memory_store.hpp>
#include <sluice/s3/server.hpp>

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>

#include "gpu_data.hpp"

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace sluice;

namespace {

/// An in-process server (memory_store) with an RDMA plane on `provider`, and a client whose
/// plane asks for FI_HMEM: the bytes still cross a real libfabric provider between endpoints.
struct gpu_pair {
  explicit gpu_pair(const std::string& provider) {
    s3::server_config config;
    config.port = 0;
    config.users = {{"AK", "SK"}};
    fabric::server_plane_config plane;
    plane.fabric.provider = provider;
    plane.fabric.node = "127.0.0.1";
    error_code ec;
    config.rdma = fabric::server_plane::open(plane, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    server = std::make_unique<s3::server>(store, config);
    server->listen();
    s3::client_config c;
    c.endpoint = "http://127.0.0.1:" + std::to_string(server->local_endpoint().port());
    c.creds = {"AK", "SK"};
    fabric::client_plane_config client_plane;
    client_plane.fabric.provider = provider;
    client_plane.fabric.node = "127.0.0.1";
    client_plane.fabric.hmem = true;
    auto opened = fabric::client_plane::open(client_plane, true, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    hmem = opened->get_endpoint()->traits().hmem;
    // A provider may advertise FI_HMEM and still fail to register CUDA memory (libfabric 1.17
    // loads libcuda.so and libcudart.so by their unversioned names): find out once.
    if (hmem) {
      auto probe = cuda::device_buffer::allocate(4096);
      (void)opened->get_endpoint()->register_memory(probe.region(), fabric::access::remote_write, ec);
      if (ec) {
        hmem_failure = ec.message();
        hmem = false;
      }
    }
    c.rdma = opened;
    client = std::make_unique<s3::client>(c);
    client->create_bucket("gpu");
  }
  memory_store store{memory_store_config{.max_bytes = 12 * gib, .max_object_bytes = 5 * gib}};
  std::unique_ptr<s3::server> server;
  std::unique_ptr<s3::client> client;
  bool hmem = false;         ///< device memory registers on this provider
  std::string hmem_failure;  ///< why not, when the provider advertised FI_HMEM
};

struct path_case {
  cuda::device_path path;
  s3::transfer_via via;
  const char* name;
};

void get_case(gpu_pair& pair, const path_case& c, std::size_t n) {
  CAPTURE(c.name);
  CAPTURE(n);
  const auto data = testing::fast_random_bytes(n, n + 11);
  auto source = data;
  pair.client->put_object("gpu", "obj", host_region(source));
  testing::guarded_device dst(n);
  cuda::device_transfer_options options;
  options.path = c.path;
  options.via = c.via;
  options.staging.slot_bytes = 1 << 20;  // small slots: every transfer above 1 MiB spans several
  cuda::device_transfer_report report;
  error_code ec;
  const auto got = cuda::get_object_to_device(*pair.client, "gpu", "obj", dst.inner(), options, &report, ec);
  if (c.path == cuda::device_path::direct && !pair.hmem) {
    CHECK(ec);  // direct is refused (no FI_HMEM, or registration fails), never faked
    CHECK(dst.holds(std::vector<std::byte>(n, testing::guarded_device::poison)));
    return;
  }
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK(got == n);
  CHECK(dst.holds(data));
  const bool expect_direct = c.path == cuda::device_path::direct ||
                             (c.path == cuda::device_path::automatic && pair.hmem && c.via != s3::transfer_via::http);
  CHECK(report.path == (expect_direct ? cuda::device_path::direct : cuda::device_path::staged));
  if (c.via == s3::transfer_via::http) {
    CHECK(report.http_bytes == n);
    CHECK(report.rdma_bytes == 0);
  } else {
    CHECK(report.rdma_bytes == n);
    CHECK(report.http_bytes == 0);
  }
  CHECK(report.pinned_bytes <= (64u << 20));
  if (report.path == cuda::device_path::direct) CHECK(report.pinned_bytes == 0);
}

void put_case(gpu_pair& pair, s3::transfer_via via, std::size_t n) {
  CAPTURE(n);
  const auto data = testing::fast_random_bytes(n, n + 5);
  auto device = cuda::device_buffer::allocate(n);
  REQUIRE(!cuda::copy(device.region(), testing::source_region(data)));
  cuda::device_transfer_options options;
  options.via = via;
  cuda::device_transfer_report report;
  error_code ec;
  (void)cuda::put_object_from_device(*pair.client, "gpu", "up", device.region(), options, &report, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  // Automatic: direct (one PUT the server RMA-reads out of device memory) where the provider
  // registers device memory, else staged.
  const bool direct = pair.hmem && via != s3::transfer_via::http;
  CHECK(report.path == (direct ? cuda::device_path::direct : cuda::device_path::staged));
  CHECK((via == s3::transfer_via::http ? report.http_bytes : report.rdma_bytes) == n);
  std::vector<std::byte> back(n);
  CHECK(pair.client->get_object("gpu", "up", host_region(back)) == n);
  CHECK(back == data);
}

}  // namespace

TEST_CASE("S3 GET into GPU memory: direct, staged (rdma, http), automatic; shm and tcp") {
  const path_case cases[] = {
      {cuda::device_path::direct, s3::transfer_via::rdma, "direct"},
      {cuda::device_path::staged, s3::transfer_via::rdma, "staged rdma"},
      {cuda::device_path::staged, s3::transfer_via::http, "staged http"},
      {cuda::device_path::automatic, s3::transfer_via::automatic, "automatic"},
  };
  for (const std::string provider : {"shm", "tcp;ofi_rxm"}) {
    CAPTURE(provider);
    gpu_pair pair(provider);
    std::printf(
        "  %s: device memory registers: %s: direct GETs %s\n", provider.c_str(),
        pair.hmem ? "yes" : ("no (" + (pair.hmem_failure.empty() ? "no FI_HMEM" : pair.hmem_failure) + ")").c_str(),
        pair.hmem ? "land in device memory" : "are refused, automatic stages");
    for (const auto& c : cases) {
      for (const std::size_t n : {std::size_t{1}, std::size_t{4095}, (std::size_t{8} << 20) + 1}) get_case(pair, c, n);
    }
  }
}

TEST_CASE("S3 GET of 4 GiB + 1 into GPU memory, each path, with ≤ 64 MiB pinned") {
  gpu_pair pair("shm");
  const std::size_t n = (std::size_t{4} << 30) + 1;
  const auto data = testing::fast_random_bytes(n, 44);
  auto source = data;
  pair.client->put_object("gpu", "big", host_region(source));
  source = {};
  testing::guarded_device dst(n);
  for (const path_case c : {path_case{cuda::device_path::staged, s3::transfer_via::rdma, "staged rdma"},
                            path_case{cuda::device_path::staged, s3::transfer_via::http, "staged http"},
                            path_case{cuda::device_path::automatic, s3::transfer_via::automatic, "automatic"}}) {
    CAPTURE(c.name);
    REQUIRE(!cuda::fill(dst.inner(), testing::guarded_device::poison));
    cuda::device_transfer_options options;
    options.path = c.path;
    options.via = c.via;
    cuda::device_transfer_report report;
    error_code ec;
    CHECK(cuda::get_object_to_device(*pair.client, "gpu", "big", dst.inner(), options, &report, ec) == n);
    REQUIRE_MESSAGE(!ec, ec.message());
    CHECK(dst.holds(data));
    CHECK(report.pinned_bytes <= (64u << 20));
  }
}

TEST_CASE("S3 PUT from GPU memory: direct or staged over rdma, staged over http, single and multipart") {
  gpu_pair pair("shm");
  for (const auto via : {s3::transfer_via::rdma, s3::transfer_via::http}) {
    for (const std::size_t n : {std::size_t{1}, std::size_t{4095}, (std::size_t{40} << 20) + 3}) put_case(pair, via, n);
  }
}

TEST_CASE("S3 GET into GPU memory: errors are values") {
  gpu_pair pair("shm");
  auto small = cuda::device_buffer::allocate(10);
  std::vector<std::byte> eleven(11, std::byte{1});
  pair.client->put_object("gpu", "eleven", host_region(eleven));
  cuda::device_transfer_options staged;
  staged.path = cuda::device_path::staged;
  error_code ec;
  (void)cuda::get_object_to_device(*pair.client, "gpu", "eleven", small.region(), staged, nullptr, ec);
  CHECK(ec == errc::region_too_small);
  (void)cuda::get_object_to_device(*pair.client, "gpu", "missing", small.region(), staged, nullptr, ec);
  CHECK(ec);
  std::vector<std::byte> host(16);
  (void)cuda::get_object_to_device(*pair.client, "gpu", "eleven", host_region(host), staged, nullptr, ec);
  CHECK(ec == errc::invalid_argument);
  // The plain client refuses an HTTP body into device memory.
  s3::get_options http;
  http.via = s3::transfer_via::http;
  (void)pair.client->get_object("gpu", "eleven", small.region(), http, ec);
  CHECK(ec == errc::unsupported_memory);
}

TEST_CASE("S3 into and out of GPU memory, asynchronous: transfers in flight at once on one thread") {
  gpu_pair pair("shm");
  constexpr int objects = 4;
  constexpr std::size_t n = (std::size_t{3} << 20) + 7;  // several 1 MiB parts when staged
  std::vector<std::vector<std::byte>> data;
  std::vector<testing::guarded_device> sources;
  sources.reserve(objects);
  for (int i = 0; i < objects; ++i) {
    data.push_back(testing::fast_random_bytes(n, 100 + static_cast<std::uint64_t>(i)));
    sources.emplace_back(n);
    REQUIRE(!cuda::copy(sources.back().inner(), testing::source_region(data.back())));
  }
  const auto caller = std::this_thread::get_id();
  for (const auto path : {cuda::device_path::staged, cuda::device_path::automatic}) {
    CAPTURE(cuda::to_string(path));
    cuda::device_transfer_options options;
    options.path = path;
    options.staging.slot_bytes = 1 << 20;
    boost::asio::io_context context;
    int put_done = 0;
    for (int i = 0; i < objects; ++i) {
      cuda::async_put_object_from_device(
          *pair.client, "gpu", "async-" + std::to_string(i), sources[static_cast<std::size_t>(i)].inner(), options,
          boost::asio::bind_executor(
              context, [&](error_code ec, const std::string& etag, const cuda::device_transfer_report& report) {
                CHECK_MESSAGE(!ec, ec.message());
                CHECK(!etag.empty());
                CHECK(report.rdma_bytes == n);
                CHECK(std::this_thread::get_id() == caller);
                ++put_done;
              }));
    }
    context.run();
    CHECK(put_done == objects);

    std::vector<testing::guarded_device> into;
    into.reserve(objects);
    for (int i = 0; i < objects; ++i) into.emplace_back(n);
    context.restart();
    int get_done = 0;
    for (int i = 0; i < objects; ++i) {
      cuda::async_get_object_to_device(
          *pair.client, "gpu", "async-" + std::to_string(i), into[static_cast<std::size_t>(i)].inner(), options,
          boost::asio::bind_executor(
              context, [&, path](error_code ec, std::uint64_t bytes, const cuda::device_transfer_report& report) {
                CHECK_MESSAGE(!ec, ec.message());
                CHECK(bytes == n);
                CHECK(report.path == (path == cuda::device_path::staged || !pair.hmem ? cuda::device_path::staged
                                                                                      : cuda::device_path::direct));
                CHECK(std::this_thread::get_id() == caller);
                ++get_done;
              }));
    }
    context.run();
    CHECK(get_done == objects);
    for (int i = 0; i < objects; ++i) CHECK(into[static_cast<std::size_t>(i)].holds(data[static_cast<std::size_t>(i)]));
  }

  // Errors before any request complete through the handler too, never inline.
  boost::asio::io_context context;
  std::vector<std::byte> host(16);
  bool called = false;
  cuda::async_get_object_to_device(
      *pair.client, "gpu", "async-0", host_region(host), {},
      boost::asio::bind_executor(context, [&](error_code ec, std::uint64_t bytes, const cuda::device_transfer_report&) {
        CHECK(ec == errc::invalid_argument);
        CHECK(bytes == 0);
        called = true;
      }));
  CHECK(!called);
  context.run();
  CHECK(called);
}
