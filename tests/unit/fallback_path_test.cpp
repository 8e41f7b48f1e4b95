// SPDX-License-Identifier: Apache-2.0
#include <sluice/fallback_path.hpp>

#include <sluice/host_registrar.hpp>
#include <sluice/local_negotiator.hpp>
#include <sluice/loopback.hpp>
#include <sluice/memory_store.hpp>

#include <doctest/doctest.h>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>

#include <stdexcept>
#include <vector>

#include "conformance/transport_conformance.hpp"

namespace {

using namespace sluice;

// Two in-process stores, each with the bucket, and a path to each: a cache in front of an
// origin, as a host would tier them.
struct two_stores {
  memory_store cache;
  memory_store origin;
  two_stores() {
    error_code ec;
    cache.create_bucket("bucket", ec);
    REQUIRE(!ec);
    origin.create_bucket("bucket", ec);
    REQUIRE(!ec);
  }
  std::vector<any_path> paths() {
    std::vector<any_path> out;
    out.emplace_back(path{local_negotiator<memory_store>{cache}, host_registrar{}, loopback_transport{}});
    out.emplace_back(path{local_negotiator<memory_store>{origin}, host_registrar{}, loopback_transport{}});
    return out;
  }
};

bool on_not_found(const error_code& ec) { return ec == condition::not_found; }

}  // namespace

TEST_CASE("fallback_path: no paths is refused at construction") {
  CHECK_THROWS_AS(fallback_path(std::vector<any_path>{}), std::invalid_argument);
}

TEST_CASE_FIXTURE(two_stores, "fallback_path: the first path that works runs, errors that are not the path's end it") {
  auto data = testing::random_bytes(5000, 1);
  error_code ec;
  path{local_negotiator<memory_store>{origin}, host_registrar{}, loopback_transport{}}.put({"bucket", "only-in-origin"},
                                                                                           host_region(data));

  SUBCASE("by default a missing object is the transfer's failure, not the path's: no fallback") {
    fallback_path p{paths()};
    auto out = testing::poisoned(5000);
    const transfer_result r = p.get({"bucket", "only-in-origin"}, host_region(out), ec);
    CHECK(ec == condition::not_found);
    CHECK(r.skipped.empty());
    CHECK(testing::all_poison(out));  // the origin's copy was never read
  }

  SUBCASE("with a rule that falls back on not_found, the next path serves it and the result says why") {
    fallback_path p{paths(), on_not_found};
    auto out = testing::poisoned(5000);
    const transfer_result r = p.get({"bucket", "only-in-origin"}, host_region(out));
    CHECK(r.bytes == 5000);
    CHECK(out == data);
    CHECK(r.transport == "loopback");
    REQUIRE(r.skipped.size() == 1);
    CHECK(r.skipped[0].negotiator == "local");
    CHECK(r.skipped[0].transport == "loopback");
    CHECK(r.skipped[0].reason == errc::no_such_object);
  }

  SUBCASE("the last path's error ends the transfer, with every earlier one recorded") {
    fallback_path p{paths(), on_not_found};
    auto out = testing::poisoned(10);
    p.get({"bucket", "nowhere"}, host_region(out), ec);
    CHECK(ec == errc::no_such_object);
    CHECK(testing::all_poison(out));
  }

  SUBCASE("a put goes to the first path that takes it, and only there") {
    error_code e;
    cache.remove_bucket("bucket", e);  // the cache cannot take it: no_such_bucket (not_found)
    REQUIRE(!e);
    fallback_path p{paths(), on_not_found};
    auto fresh = testing::random_bytes(300, 2);
    const transfer_result r = p.put({"bucket", "new"}, host_region(fresh));
    CHECK(r.bytes == 300);
    REQUIRE(r.skipped.size() == 1);
    CHECK(r.skipped[0].reason == errc::no_such_bucket);
    CHECK(origin.head({"bucket", "new"}, e).size == 300);
  }

  SUBCASE("many transfers in flight, each completes once through its handler's executor") {
    fallback_path p{paths(), on_not_found};
    boost::asio::io_context io;
    constexpr std::size_t parts = 10;
    constexpr std::size_t part = 500;
    auto out = testing::poisoned(parts * part);
    int done = 0;
    for (std::size_t i = 0; i < parts; ++i) {
      const region slice = host_region(out).subregion(i * part, part, ec);
      p.async_get({"bucket", "only-in-origin"}, slice, byte_range{i * part, part},
                  boost::asio::bind_executor(io, [&](error_code e, const transfer_result& r) {
                    CHECK(!e);
                    CHECK(r.skipped.size() == 1);
                    CHECK(io.get_executor().running_in_this_thread());
                    ++done;
                  }));
    }
    io.run();
    CHECK(done == static_cast<int>(parts));
    CHECK(out == data);
  }
}
