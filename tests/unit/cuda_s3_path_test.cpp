// SPDX-License-Identifier: Apache-2.0
#include <sluice/cuda/s3_path.hpp>

#include <sluice/cuda/device.hpp>
#include <sluice/cuda/s3.hpp>
#include <sluice/host_registrar.hpp>

#include <doctest/doctest.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "conformance/s3_fixtures.hpp"

// Runs everywhere: what the device paths check before any request or any CUDA call, against a
// real server. Moving bytes to and from device memory is tests/gpu/s3_path_test.cpp's.

namespace {

using namespace sluice;
using staged_rdma = cuda::staged_transport<s3::transfer_via::rdma>;
using staged_http = cuda::staged_transport<s3::transfer_via::http>;

static_assert(transport<staged_rdma, cuda::device_registration>);
static_assert(transport<staged_http, cuda::device_registration>);
static_assert(negotiates_for<s3::negotiator, staged_http>);
static_assert(staged_http::writes_whole_objects);
static_assert(staged_rdma::name == "s3-staged-rdma" && staged_http::name == "s3-staged-http");

// The transport's completion, run on a private io_context.
error_code moved(staged_http& t, const region& local, const s3::object_remote& remote, transfer_span span,
                 direction dir) {
  error_code out = errc::protocol_violation;
  boost::asio::io_context io;
  const auto done = [&](error_code ec, std::size_t) { out = ec; };
  const host_registration reg(local);
  if (dir == direction::get) {
    t.async_read(reg, remote, span, boost::asio::bind_executor(io, done));
  } else {
    t.async_write(reg, remote, span, boost::asio::bind_executor(io, done));
  }
  io.run();
  return out;
}

}  // namespace

TEST_CASE_FIXTURE(testing::s3_memory_server, "staged transport: spans and memory are checked before any request") {
  staged_http t(*client, cuda::stager_config{});
  std::vector<std::byte> host(64);
  // Host bytes labelled as device memory: the checks never touch them, so this runs without a GPU.
  const region device{host.data(), host.size(), memory_kind::cuda_device, 0};
  const s3::object_remote remote{"bkt", "absent", 32, "\"etag\"", nullptr};
  const auto before = client->statistics().requests;

  CHECK(moved(t, device, remote, {60, 0, 8}, direction::get) == errc::region_too_small);
  CHECK(moved(t, device, remote, {0, 30, 8}, direction::get) == errc::bad_range);
  CHECK(moved(t, device, remote, {0, 0, 16}, direction::put) == errc::invalid_argument);  // not the whole object
  CHECK(moved(t, host_region(host), remote, {0, 0, 8}, direction::get) == errc::unsupported_memory);
  CHECK(moved(t, device, remote, {0, 0, 0}, direction::get) == error_code{});  // nothing to move
  CHECK(client->statistics().requests == before);
}

TEST_CASE_FIXTURE(testing::s3_memory_server, "device entry points refuse what no path could move") {
  std::vector<std::byte> host(64);
  cuda::device_transfer_options options;
  cuda::device_transfer_report report;
  error_code ec;
  (void)cuda::get_object_to_device(*client, "bkt", "k", host_region(host), options, &report, ec);
  CHECK(ec == errc::invalid_argument);  // host memory
  (void)cuda::put_object_from_device(*client, "bkt", "k", host_region(host), options, &report, ec);
  CHECK(ec == errc::invalid_argument);

  const region device{host.data(), host.size(), memory_kind::cuda_device, 0};
  options.path = cuda::device_path::direct;
  options.via = s3::transfer_via::http;  // direct is RDMA only
  (void)cuda::get_object_to_device(*client, "bkt", "k", device, options, &report, ec);
  CHECK(ec == errc::invalid_argument);
  options = {};
  options.staging.slot_bytes = 1000;  // not a multiple of 4096
  (void)cuda::get_object_to_device(*client, "bkt", "k", device, options, &report, ec);
  CHECK(ec == errc::invalid_config);
  CHECK(report.rdma_bytes + report.http_bytes == 0);
}

TEST_CASE_FIXTURE(testing::s3_memory_server,
                  "asynchronous device entry points: refusals complete through the handler") {
  std::vector<std::byte> host(64);
  boost::asio::io_context context;
  const auto before = client->statistics().requests;
  int completed = 0;
  cuda::async_get_object_to_device(*client, "bkt", "k", host_region(host), {},
                                   boost::asio::bind_executor(context, [&](error_code ec, std::uint64_t bytes,
                                                                           const cuda::device_transfer_report& r) {
                                     CHECK(ec == errc::invalid_argument);  // host memory
                                     CHECK(bytes == 0);
                                     CHECK(r.rdma_bytes + r.http_bytes == 0);
                                     ++completed;
                                   }));
  cuda::device_transfer_options bad;
  bad.staging.slot_bytes = 1000;
  const region device{host.data(), host.size(), memory_kind::cuda_device, 0};
  cuda::async_put_object_from_device(*client, "bkt", "k", device, bad,
                                     boost::asio::bind_executor(context, [&](error_code ec, const std::string& etag,
                                                                             const cuda::device_transfer_report&) {
                                       CHECK(ec == errc::invalid_config);
                                       CHECK(etag.empty());
                                       ++completed;
                                     }));
  CHECK(completed == 0);  // never inline
  context.run();
  CHECK(completed == 2);
  CHECK(client->statistics().requests == before);
}
