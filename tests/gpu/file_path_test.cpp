// SPDX-License-Identifier: Apache-2.0
// Files into GPU memory as a path<N, R, T>: file::negotiator × cuda::device_registrar ×
// cuda::file_transport, every method through the transport conformance suite, and the path run
// asynchronously with its reads on a pool of their own.
#include <sluice/cuda/file.hpp>

#include <sluice/cuda/device_memory.hpp>
#include <sluice/file/negotiator.hpp>

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include <thread>
#include <vector>

#include "conformance/file_fixtures.hpp"
#include "conformance/transport_conformance.hpp"
#include "gpu_data.hpp"

namespace {

using namespace sluice;

// A small ring and small mapped chunks: the conformance sizes span several slots and chunks.
cuda::file_to_device_options small(cuda::file_method method) {
  cuda::file_to_device_options options;
  options.method = method;
  options.staging.slots = 4;
  options.staging.slot_bytes = 64 * 1024;
  options.mapped_chunk_bytes = 64 * 1024;
  return options;
}

template <cuda::file_method Method>
struct file_device_fixture {
  using transport_type = cuda::file_transport;
  using registrar_type = cuda::device_registrar;
  transport_type transport{small(Method)};
  registrar_type registrar;
  static testing::device_local make_local(std::size_t size) { return testing::device_local(size); }
  static testing::file_on_disk make_remote(std::span<const std::byte> initial) {
    return testing::file_on_disk(initial);
  }
};

using file_uring_fixture = file_device_fixture<cuda::file_method::uring>;
using file_buffered_fixture = file_device_fixture<cuda::file_method::buffered>;
using file_mapped_fixture = file_device_fixture<cuda::file_method::mapped>;
using file_automatic_fixture = file_device_fixture<cuda::file_method::automatic>;

}  // namespace

TEST_CASE_TEMPLATE_INVOKE(transport_conformance, file_uring_fixture, file_buffered_fixture, file_mapped_fixture,
                          file_automatic_fixture);

TEST_CASE("file path into device memory: the parts' names, the method the transport reports, ranges") {
  const auto data = testing::fast_random_bytes(3 * mib + 11, 21);
  const testing::file_on_disk file(data);
  cuda::file_to_device_report report;
  cuda::file_path reading(file::negotiator({.probe_residency = true}), cuda::device_registrar{},
                          cuda::file_transport(small(cuda::file_method::automatic), &report));
  testing::guarded_device device(data.size());
  error_code ec;
  const transfer_result result = reading.get({{}, file.path().string()}, device.inner(), ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK(result.bytes == data.size());
  CHECK(result.negotiator == "file");
  CHECK(result.transport == "file-to-device");
  CHECK(report.method == cuda::file_method::mapped);  // just written: resident
  CHECK(report.resident_fraction >= 0.9);
  CHECK(device.holds(data));

  testing::guarded_device part(1000);
  reading.get({{}, file.path().string()}, part.inner(), byte_range{mib + 1, 1000}, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK(part.holds({data.begin() + mib + 1, data.begin() + mib + 1001}));
  reading.get({{}, file.path().string()}, part.inner(), byte_range{data.size() - 999, 1000}, ec);
  CHECK(ec == errc::bad_range);
  reading.put({{}, file.path().string()}, part.inner(), ec);
  CHECK(ec == errc::invalid_argument);
  CHECK(file.contents() == data);
}

TEST_CASE("file path into device memory, asynchronous: reads on a pool of their own, completions on the caller's") {
  const auto data = testing::fast_random_bytes(2 * mib + 5, 22);
  const testing::file_on_disk file(data);
  boost::asio::thread_pool blocking(4);
  boost::asio::io_context context;
  cuda::file_path reading(context.get_executor(), file::negotiator{}, cuda::device_registrar{},
                          cuda::file_transport(small(cuda::file_method::uring), nullptr, blocking.get_executor()));
  constexpr int reads = 8;
  std::vector<testing::guarded_device> into;
  into.reserve(reads);
  for (int i = 0; i < reads; ++i) into.emplace_back(data.size());
  int completed = 0;
  const auto caller = std::this_thread::get_id();
  for (auto& device : into) {
    reading.async_get({{}, file.path().string()}, device.inner(), byte_range{},
                      [&](error_code ec, const transfer_result& r) {
                        CHECK_MESSAGE(!ec, ec.message());
                        CHECK(r.bytes == data.size());
                        CHECK(std::this_thread::get_id() == caller);
                        ++completed;
                      });
  }
  context.run();
  blocking.join();
  CHECK(completed == reads);
  for (const auto& device : into) CHECK(device.holds(data));
}
