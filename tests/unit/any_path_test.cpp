// SPDX-License-Identifier: Apache-2.0
#include <sluice/any_path.hpp>

#include <sluice/host_registrar.hpp>
#include <sluice/local_negotiator.hpp>
#include <sluice/loopback.hpp>
#include <sluice/memory_store.hpp>

#include <doctest/doctest.h>

#include <vector>

#include "conformance/transport_conformance.hpp"

TEST_CASE("any_path erases a path and keeps its behaviour, names and errors") {
  using namespace sluice;
  memory_store store;
  error_code ec;
  store.create_bucket("bucket", ec);
  // Run-time choice: a vector of erased paths (here two of the same kind over different stores).
  memory_store other;
  other.create_bucket("bucket", ec);
  std::vector<any_path> paths;
  paths.emplace_back(path{local_negotiator<memory_store>{store}, host_registrar{}, loopback_transport{}});
  paths.emplace_back(path{local_negotiator<memory_store>{other}, host_registrar{}, loopback_transport{}});
  CHECK(paths[0].negotiator_name() == "local");
  CHECK(paths[0].transport_name() == "loopback");

  auto data = testing::random_bytes(3000, 3);
  CHECK(paths[0].put({"bucket", "k"}, host_region(data)).transport == "loopback");
  auto out = testing::poisoned(3000);
  CHECK(paths[0].get({"bucket", "k"}, host_region(out)).bytes == 3000);
  CHECK(out == data);
  paths[1].get({"bucket", "k"}, host_region(out), ec);
  CHECK(ec == errc::no_such_object);

  boost::asio::io_context context;
  int calls = 0;
  auto part = testing::poisoned(10);
  paths[0].async_get({"bucket", "k"}, host_region(part), byte_range{5, 10},
                     boost::asio::bind_executor(context, [&](error_code e, transfer_result r) {
                       CHECK(!e);
                       CHECK(r.bytes == 10);
                       CHECK(context.get_executor().running_in_this_thread());
                       ++calls;
                     }));
  context.run();
  CHECK(calls == 1);
  CHECK(std::equal(data.begin() + 5, data.begin() + 15, part.begin()));
}

TEST_CASE("a plain callback through any_path runs on the erased path's executor") {
  using namespace sluice;
  memory_store store;
  error_code ec;
  store.create_bucket("bucket", ec);
  boost::asio::io_context context;
  any_path erased{
      path{context.get_executor(), local_negotiator<memory_store>{store}, host_registrar{}, loopback_transport{}}};
  std::vector<std::byte> data(64, std::byte{4});
  bool ran_on_context = false;
  erased.async_put({"bucket", "k"}, host_region(data), [&](error_code e, transfer_result) {
    CHECK(!e);
    ran_on_context = context.get_executor().running_in_this_thread();
  });
  context.run();
  CHECK(ran_on_context);
}
