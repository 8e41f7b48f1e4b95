// SPDX-License-Identifier: Apache-2.0
#include <sluice/file/transport.hpp>

#include <doctest/doctest.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include <algorithm>
#include <filesystem>
#include <thread>
#include <vector>

#include "conformance/file_fixtures.hpp"
#include "conformance/host_fixtures.hpp"
#include "conformance/transport_conformance.hpp"

namespace {

using sluice::errc;
using sluice::error_code;
using sluice::mib;

// Small chunks and a shallow queue: the conformance sizes span several chunks, and 16 reads in
// flight each open a ring of their own.
struct file_uring_fixture {
  using transport_type = sluice::file::uring_transport;
  using registrar_type = sluice::host_registrar;
  transport_type transport{sluice::file::uring_config{.queue_depth = 2, .chunk_bytes = 64 * 1024}};
  registrar_type registrar;
  static sluice::testing::host_buffer make_local(std::size_t size) { return sluice::testing::host_buffer(size); }
  static sluice::testing::file_on_disk make_remote(std::span<const std::byte> initial) {
    return sluice::testing::file_on_disk(initial);
  }
};

// The same with buffered reads (through the page cache).
struct file_uring_buffered_fixture : file_uring_fixture {
  file_uring_buffered_fixture() {
    transport = transport_type{sluice::file::uring_config{.queue_depth = 2, .chunk_bytes = 64 * 1024, .direct = false}};
  }
};

}  // namespace

TEST_CASE_TEMPLATE_INVOKE(transport_conformance, file_uring_fixture, file_uring_buffered_fixture);

TEST_CASE("file host path: a file's bytes and ranges into host memory, and the reasons it refuses") {
  using namespace sluice;
  const auto data = testing::random_bytes(3 * mib + 5, 12);
  const testing::file_on_disk file(data);
  const object_ref object{{}, file.path().string()};
  file::host_path reading(file::negotiator{}, host_registrar{}, file::uring_transport{});

  std::vector<std::byte> whole(data.size() + testing::guard_bytes, testing::poison);
  error_code ec;
  transfer_result result = reading.get(object, host_region(whole), ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK(result.bytes == data.size());
  CHECK(result.negotiator == "file");
  CHECK(result.transport == "file-uring");
  CHECK(std::equal(data.begin(), data.end(), whole.begin()));
  CHECK(testing::all_poison(std::span(whole).last(testing::guard_bytes)));

  std::vector<std::byte> part(1000, testing::poison);
  result = reading.get(object, host_region(part), byte_range{mib + 3, 1000}, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK(std::equal(part.begin(), part.end(), data.begin() + static_cast<std::ptrdiff_t>(mib + 3)));

  std::fill(part.begin(), part.end(), testing::poison);
  reading.get(object, host_region(part), byte_range{data.size() - 999, 1000}, ec);
  CHECK(ec == errc::bad_range);
  reading.get(object, host_region(part), byte_range{0, 1001}, ec);
  CHECK(ec == errc::region_too_small);
  reading.get({{}, (std::filesystem::temp_directory_path() / "sluice-no-such-file").string()}, host_region(part), ec);
  CHECK(ec == std::errc::no_such_file_or_directory);
  reading.put(object, host_region(part), ec);
  CHECK(ec == errc::invalid_argument);  // files are read only: nothing written
  CHECK(testing::all_poison(part));
  CHECK(file.contents() == data);
}

TEST_CASE(
    "file host path, asynchronous: the reads run on the executor given for them, the completion on the caller's") {
  using namespace sluice;
  const auto data = testing::random_bytes(2 * mib + 17, 13);
  const testing::file_on_disk file(data);
  boost::asio::thread_pool blocking(2);
  boost::asio::io_context context;
  file::host_path reading(context.get_executor(), file::negotiator{}, host_registrar{},
                          file::uring_transport({}, blocking.get_executor()));
  constexpr int reads = 8;
  std::vector<std::vector<std::byte>> into(reads, std::vector<std::byte>(data.size()));
  int completed = 0;
  const auto caller = std::this_thread::get_id();
  for (auto& buffer : into) {
    reading.async_get({{}, file.path().string()}, host_region(buffer), byte_range{},
                      [&](error_code ec, const transfer_result& r) {
                        CHECK(!ec);
                        CHECK(r.bytes == data.size());
                        CHECK(std::this_thread::get_id() == caller);
                        ++completed;
                      });
  }
  context.run();
  blocking.join();
  CHECK(completed == reads);
  for (const auto& buffer : into) CHECK(buffer == data);
}

TEST_CASE("file uring transport refuses device memory without touching it") {
  using namespace sluice;
  const auto data = testing::random_bytes(4096, 14);
  const testing::file_on_disk file(data);
  std::vector<std::byte> fake_device(4096, testing::poison);
  const region device{fake_device.data(), fake_device.size(), memory_kind::cuda_device, 0};
  error_code ec;
  CHECK(file::uring_transport{}.read(device, file.descriptor(), {0, 0, 4096}, ec) == 0);
  CHECK(ec == errc::unsupported_memory);
  CHECK(testing::all_poison(fake_device));
}
