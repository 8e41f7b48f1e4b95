// SPDX-License-Identifier: Apache-2.0
#include <sluice/path.hpp>

#include <sluice/host_registrar.hpp>
#include <sluice/local_negotiator.hpp>
#include <sluice/loopback.hpp>
#include <sluice/memory_store.hpp>

#include <doctest/doctest.h>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_future.hpp>

#include <atomic>
#include <future>

#include "conformance/transport_conformance.hpp"

namespace {

using namespace sluice;
using testing::poisoned;
using testing::random_bytes;
using local_path = path<local_negotiator<memory_store>, host_registrar, loopback_transport>;

struct store_fixture {
  memory_store store;
  local_path p{local_negotiator<memory_store>{store}, host_registrar{}, loopback_transport{}};
  store_fixture() {
    error_code ec;
    store.create_bucket("bucket", ec);
    REQUIRE(!ec);
  }
};

}  // namespace

TEST_CASE_FIXTURE(store_fixture, "put then get round-trips every size and reports the path taken") {
  for (std::size_t n : testing::conformance_sizes) {
    CAPTURE(n);
    auto data = random_bytes(n, static_cast<std::uint32_t>(n) + 11);
    const object_ref obj{"bucket", "obj-" + std::to_string(n)};
    const transfer_result put = p.put(obj, host_region(data));
    CHECK(put.bytes == n);
    CHECK(put.negotiator == "local");
    CHECK(put.transport == "loopback");
    error_code ec;
    CHECK(store.head(obj, ec).size == n);

    auto out = poisoned(n + testing::guard_bytes);
    const transfer_result got = p.get(obj, host_region(out));
    CHECK(got.bytes == n);
    CHECK(std::equal(data.begin(), data.end(), out.begin()));
    CHECK(testing::all_poison(std::span(out).last(testing::guard_bytes)));
  }
}

TEST_CASE_FIXTURE(store_fixture, "a put reads a const source: host_region of const memory is a const_region") {
  const std::vector<std::byte> data = random_bytes(70000, 5);
  const const_region source = host_region(data);
  CHECK(p.put({"bucket", "const"}, source).bytes == data.size());
  auto out = poisoned(data.size());
  CHECK(p.get({"bucket", "const"}, host_region(out)).bytes == data.size());
  CHECK(out == data);
}

TEST_CASE_FIXTURE(store_fixture, "ranged get writes only the range, at the start of the destination") {
  auto data = random_bytes(100000, 1);
  p.put({"bucket", "k"}, host_region(data));
  auto out = poisoned(5000);
  const auto r = p.get({"bucket", "k"}, host_region(out), byte_range{70000, 4000});
  CHECK(r.bytes == 4000);
  CHECK(std::equal(data.begin() + 70000, data.begin() + 74000, out.begin()));
  CHECK(testing::all_poison(std::span(out).subspan(4000)));

  auto tail = poisoned(30000);  // open-ended range: to the end of the object
  CHECK(p.get({"bucket", "k"}, host_region(tail), byte_range{70000, std::nullopt}).bytes == 30000);
  CHECK(std::equal(data.begin() + 70000, data.end(), tail.begin()));
}

TEST_CASE_FIXTURE(store_fixture, "errors are error codes and leave the destination untouched") {
  auto data = random_bytes(4096, 2);
  p.put({"bucket", "k"}, host_region(data));
  error_code ec;

  auto small = poisoned(4095);
  p.get({"bucket", "k"}, host_region(small), ec);
  CHECK(ec == errc::region_too_small);
  CHECK(testing::all_poison(small));

  auto out = poisoned(8192);
  p.get({"bucket", "k"}, host_region(out), byte_range{4097, std::nullopt}, ec);
  CHECK(ec == errc::bad_range);
  p.get({"bucket", "k"}, host_region(out), byte_range{4000, 97}, ec);
  CHECK(ec == errc::bad_range);
  p.get({"bucket", "missing"}, host_region(out), ec);
  CHECK(ec == errc::no_such_object);
  p.get({"nobucket", "k"}, host_region(out), ec);
  CHECK(ec == errc::no_such_bucket);
  CHECK(testing::all_poison(out));

  CHECK_THROWS_AS(p.get({"bucket", "missing"}, host_region(out)), sluice::system_error);
  try {
    p.get({"bucket", "missing"}, host_region(out));
  } catch (const sluice::system_error& e) {
    CHECK(e.code() == errc::no_such_object);
  }
}

TEST_CASE_FIXTURE(store_fixture, "a failed put publishes nothing and keeps the old object") {
  auto old_data = random_bytes(1000, 3);
  p.put({"bucket", "k"}, host_region(old_data));
  const auto used = store.used_bytes();

  // The registrar refuses device memory: the negotiator must discard the staged put.
  std::vector<std::byte> fake(2000, std::byte{7});
  error_code ec;
  p.put({"bucket", "k"}, region{fake.data(), fake.size(), memory_kind::cuda_device, 0}, ec);
  CHECK(ec == errc::unsupported_memory);
  CHECK(store.used_bytes() == used);
  auto out = poisoned(1000);
  p.get({"bucket", "k"}, host_region(out));
  CHECK(out == old_data);

  p.put({"nobucket", "k"}, host_region(old_data), ec);
  CHECK(ec == errc::no_such_bucket);
  p.put({"bucket", ""}, host_region(old_data), ec);
  CHECK(ec == errc::invalid_name);
}

TEST_CASE_FIXTURE(store_fixture, "async_get with use_future on a thread pool, many at once") {
  auto data = random_bytes(1 << 20, 4);
  p.put({"bucket", "big"}, host_region(data));
  boost::asio::thread_pool pool(2);
  local_path pooled{pool.get_executor(), local_negotiator<memory_store>{store}, host_registrar{}, loopback_transport{}};
  constexpr std::size_t parts = 32;
  constexpr std::size_t part = (1 << 20) / parts;
  auto out = poisoned(1 << 20);
  std::vector<std::future<transfer_result>> futures;
  for (std::size_t i = 0; i < parts; ++i) {
    futures.push_back(pooled.async_get({"bucket", "big"},
                                       host_region(out).subregion(i * part, part, *std::make_unique<error_code>()),
                                       byte_range{i * part, part}, boost::asio::use_future));
  }
  std::uint64_t total = 0;
  for (auto& f : futures) total += f.get().bytes;
  pool.join();
  CHECK(total == data.size());
  CHECK(out == data);
}

TEST_CASE_FIXTURE(store_fixture, "completion runs on the handler's executor exactly once") {
  auto data = random_bytes(10, 5);
  p.put({"bucket", "k"}, host_region(data));
  boost::asio::io_context context;
  auto out = poisoned(10);
  int calls = 0;
  p.async_get({"bucket", "k"}, host_region(out), byte_range{},
              boost::asio::bind_executor(context, [&](error_code ec, transfer_result r) {
                CHECK(!ec);
                CHECK(r.bytes == 10);
                CHECK(context.get_executor().running_in_this_thread());
                ++calls;
              }));
  CHECK(calls == 0);
  context.run();
  CHECK(calls == 1);
  CHECK(out == data);
}
