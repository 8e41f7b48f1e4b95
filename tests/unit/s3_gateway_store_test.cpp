// SPDX-License-Identifier: Apache-2.0
#include <sluice/s3/gateway_store.hpp>

#include <doctest/doctest.h>
#include <boost/asio/error.hpp>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace {

using sluice::s3::detail::cache_index;
using entry = cache_index::entry;

}  // namespace

TEST_CASE("gateway cache_index: insert, find, replace and erase keep the byte count") {
  cache_index index(100);
  index.insert("b/one", entry{40, "e1", std::nullopt});
  index.insert("b/two", entry{30, "e2", std::nullopt});
  CHECK(index.used() == 70);
  CHECK(index.size() == 2);
  REQUIRE(index.find("b/one") != nullptr);
  CHECK(index.find("b/one")->etag == "e1");
  CHECK(index.find("b/three") == nullptr);
  index.insert("b/one", entry{10, "e3", std::nullopt});  // a new version replaces the old
  CHECK(index.used() == 40);
  CHECK(index.find("b/one")->etag == "e3");
  CHECK(index.order() == std::vector<std::string>{"b/two", "b/one"});
  CHECK(index.erase("b/two"));
  CHECK_FALSE(index.erase("b/two"));
  CHECK(index.used() == 10);
}

TEST_CASE("gateway cache_index: victims are the least recently used, touch moves an entry up") {
  cache_index index(100);
  index.insert("b/a", entry{30, "a", std::nullopt});
  index.insert("b/b", entry{30, "b", std::nullopt});
  index.insert("b/c", entry{30, "c", std::nullopt});
  CHECK(index.fits(10));
  CHECK_FALSE(index.fits(11));
  CHECK(index.victims(10).empty());
  CHECK(index.victims(11) == std::vector<std::string>{"b/a"});
  CHECK(index.touch("b/a"));
  CHECK(index.victims(11) == std::vector<std::string>{"b/b"});
  CHECK(index.victims(40) == std::vector<std::string>{"b/b"});  // 90 - 30 + 40 fits
  CHECK(index.victims(41) == std::vector<std::string>{"b/b", "b/c"});
  // The entry being fetched is never its own victim.
  CHECK(index.victims(41, "b/b") == std::vector<std::string>{"b/c", "b/a"});
  CHECK(index.oldest() == std::optional<std::string>("b/b"));
  CHECK(index.oldest("b/b") == std::optional<std::string>("b/c"));
  CHECK_FALSE(index.touch("b/zzz"));
}

TEST_CASE("gateway cache_index: more than the budget evicts everything and still does not fit") {
  cache_index index(100);
  index.insert("b/a", entry{60, "a", std::nullopt});
  CHECK_FALSE(index.fits(101));
  CHECK(index.victims(101) == std::vector<std::string>{"b/a"});
  CHECK(index.victims(100) == std::vector<std::string>{"b/a"});
  CHECK(index.victims(40).empty());
}

TEST_CASE("gateway cache_index: touch renews the validation time only when given") {
  cache_index index(100);
  index.insert("b/a", entry{1, "a", std::nullopt});
  CHECK_FALSE(index.find("b/a")->validated.has_value());
  index.touch("b/a");
  CHECK_FALSE(index.find("b/a")->validated.has_value());
  const auto now = cache_index::clock::now();
  index.touch("b/a", now);
  CHECK(index.find("b/a")->validated == now);
  CHECK_FALSE(index.find("b/a")->last_modified.has_value());
  const auto upstream_time = std::chrono::system_clock::now() - std::chrono::hours(5);
  index.touch("b/a", now, upstream_time);
  CHECK(index.find("b/a")->last_modified == upstream_time);
  index.touch("b/a", now);  // a touch without one keeps the upstream's time
  CHECK(index.find("b/a")->last_modified == upstream_time);
}

TEST_CASE("gateway cache_index: reserved bytes count against the budget until released") {
  cache_index index(100);
  index.insert("b/a", entry{30, "a", std::nullopt});
  index.reserve(50);
  CHECK(index.fits(20));
  CHECK_FALSE(index.fits(21));
  CHECK(index.victims(40) == std::vector<std::string>{"b/a"});  // 30 + 50 + 40 > 100
  index.release(50);
  CHECK(index.fits(70));
  CHECK(index.reserved() == 0);
  index.release(10);  // more than reserved: stays at zero
  CHECK(index.reserved() == 0);
}

TEST_CASE("gateway cache_index: names split back into bucket and key, slashes in the key kept") {
  const sluice::object_ref object{"bucket", "dir/sub/key"};
  CHECK(cache_index::name_of(object) == "bucket/dir/sub/key");
  CHECK(cache_index::object_of("bucket/dir/sub/key") == object);
}

namespace {

// What a waiter was answered, and on which thread.
struct answered {
  int calls = 0;
  sluice::error_code ec;
  std::thread::id thread;
  sluice::s3::detail::fill_progress::waiter waiter() {
    return [this](sluice::error_code e) {
      ++calls;
      ec = e;
      thread = std::this_thread::get_id();
    };
  }
};

}  // namespace

TEST_CASE("gateway fill_progress: a wait for bytes already written is answered at once") {
  sluice::s3::detail::fill_progress fill;
  CHECK(fill.ready(0));
  CHECK_FALSE(fill.ready(1));
  answered nothing;
  fill.async_wait_until(0, nothing.waiter());
  CHECK(nothing.calls == 1);
  CHECK(!nothing.ec);
  fill.advance(60);
  answered some;
  fill.async_wait_until(60, some.waiter());
  CHECK(some.calls == 1);
  CHECK(!some.ec);
  CHECK(some.thread == std::this_thread::get_id());
}

TEST_CASE("gateway fill_progress: waiters are answered by the advance that reaches their end, in any order") {
  sluice::s3::detail::fill_progress fill;
  std::vector<answered> waiting(5);
  const std::uint64_t ends[] = {100, 10, 50, 50, 101};
  for (std::size_t i = 0; i < waiting.size(); ++i) fill.async_wait_until(ends[i], waiting[i].waiter());
  for (const answered& a : waiting) CHECK(a.calls == 0);
  fill.advance(50);
  CHECK(waiting[0].calls == 0);
  CHECK(waiting[1].calls == 1);
  CHECK(waiting[2].calls == 1);
  CHECK(waiting[3].calls == 1);
  CHECK(waiting[4].calls == 0);
  fill.advance(40);  // never backwards, and nobody is answered twice
  CHECK(fill.ready(50));
  CHECK(waiting[1].calls == 1);
  // From the filling thread, as the fetch's advance() on an upstream client thread would.
  std::thread([&] { fill.advance(100); }).join();
  CHECK(waiting[0].calls == 1);
  CHECK(!waiting[0].ec);
  CHECK(waiting[0].thread != std::this_thread::get_id());
  CHECK(waiting[4].calls == 0);
  fill.finish(101);
  CHECK(waiting[4].calls == 1);
  for (const answered& a : waiting) CHECK(!a.ec);
}

TEST_CASE("gateway fill_progress: a fill that finishes short of a waiter's end answers it with an error") {
  sluice::s3::detail::fill_progress fill;
  answered within;
  answered beyond;
  fill.async_wait_until(80, within.waiter());
  fill.async_wait_until(120, beyond.waiter());
  fill.finish(100);
  CHECK(within.calls == 1);
  CHECK(!within.ec);
  CHECK(beyond.calls == 1);
  CHECK(beyond.ec == sluice::errc::protocol_violation);
  answered later;  // after the end: at once
  fill.async_wait_until(101, later.waiter());
  CHECK(later.calls == 1);
  CHECK(later.ec == sluice::errc::protocol_violation);
  fill.advance(200);  // ignored once ended
  CHECK_FALSE(fill.ready(101));
}

TEST_CASE("gateway fill_progress: a failure answers the waiters with its error, bytes written before stay readable") {
  sluice::s3::detail::fill_progress fill;
  fill.advance(10);
  answered waiting;
  fill.async_wait_until(20, waiting.waiter());
  fill.fail(sluice::errc::no_such_object);
  CHECK(waiting.calls == 1);
  CHECK(waiting.ec == sluice::errc::no_such_object);
  answered before;
  fill.async_wait_until(10, before.waiter());
  CHECK(before.calls == 1);
  CHECK(!before.ec);
  answered after;
  fill.async_wait_until(11, after.waiter());
  CHECK(after.ec == sluice::errc::no_such_object);
  fill.finish(100);  // the first end stands
  CHECK_FALSE(fill.ready(11));

  sluice::s3::detail::fill_progress unexplained;
  answered told;
  unexplained.async_wait_until(1, told.waiter());
  unexplained.fail({});
  CHECK(told.ec == sluice::errc::protocol_violation);
}

TEST_CASE("gateway fill_progress: a fill dropped with waiters answers them operation_aborted") {
  answered waiting;
  {
    sluice::s3::detail::fill_progress fill;
    fill.advance(5);
    fill.async_wait_until(10, waiting.waiter());
    CHECK(waiting.calls == 0);
  }
  CHECK(waiting.calls == 1);
  CHECK(waiting.ec == boost::asio::error::operation_aborted);
}

TEST_CASE("gateway fill_progress: a waiter may wait again from its callback") {
  sluice::s3::detail::fill_progress fill;
  answered second;
  int first_calls = 0;
  fill.async_wait_until(10, [&](sluice::error_code ec) {
    ++first_calls;
    CHECK(!ec);
    fill.async_wait_until(20, second.waiter());  // not under the fill's lock
  });
  fill.advance(10);
  CHECK(first_calls == 1);
  CHECK(second.calls == 0);
  fill.advance(20);
  CHECK(second.calls == 1);
}

TEST_CASE("gateway fetch_plan: steps cover the object once, in order, a ramp starts small and doubles") {
  using sluice::s3::detail::fetch_plan;
  constexpr std::uint64_t mib = std::uint64_t{1} << 20;
  // Contiguous from 0, each step 1..chunk bytes, ending at the size.
  const auto covers = [](const fetch_plan& plan, std::uint64_t size, std::uint64_t chunk) {
    std::uint64_t at = 0;
    for (std::uint64_t step = 0; step < plan.steps(); ++step) {
      if (plan.offset(step) != at || plan.length(step) == 0 || plan.length(step) > chunk) return false;
      at += plan.length(step);
    }
    return at == size;
  };

  const fetch_plan plain(1024 * mib, 16 * mib, 8, false);
  CHECK(plain.steps() == 64);
  CHECK(plain.length(0) == 16 * mib);
  CHECK(plain.offset(63) == 1008 * mib);

  const fetch_plan ramp(1024 * mib, 16 * mib, 8, true);
  CHECK(ramp.steps() == 89);  // 8 × 1, 2, 4, 8 MiB (120 MiB), then 57 × 16 MiB
  CHECK(ramp.length(0) == mib);
  CHECK(ramp.length(7) == mib);
  CHECK(ramp.length(8) == 2 * mib);
  CHECK(ramp.offset(8) == 8 * mib);
  CHECK(ramp.length(31) == 8 * mib);
  CHECK(ramp.offset(32) == 120 * mib);
  CHECK(ramp.length(32) == 16 * mib);
  CHECK(ramp.length(88) == 8 * mib);  // 1024 - 120 = 56 × 16 + 8
  CHECK(ramp.longest() == 16 * mib);

  // An object that ends inside the ramp: 8 × 1, 2, 4 MiB (56 MiB), then 8 MiB steps to 100 MiB.
  const fetch_plan short_ramp(100 * mib, 16 * mib, 8, true);
  CHECK(short_ramp.steps() == 30);
  CHECK(short_ramp.length(29) == 4 * mib);
  // 1 MiB chunks cannot ramp; one stream does not need to.
  CHECK(fetch_plan(24 * mib, mib, 8, true).steps() == 24);
  CHECK(fetch_plan(1024 * mib, 16 * mib, 1, true).steps() == 64);
  CHECK(fetch_plan(0, 16 * mib, 8, true).steps() == 0);

  for (const std::uint64_t size : {std::uint64_t{1}, mib - 1, mib, 5 * mib + 3, 17 * mib, 100 * mib, 120 * mib,
                                   120 * mib + 1, 1000 * mib + 12345, std::uint64_t{5} << 40}) {
    for (const std::uint64_t chunk : {mib, 3 * mib, 16 * mib, std::uint64_t{1} << 32}) {
      for (const std::size_t streams : {std::size_t{1}, std::size_t{3}, std::size_t{8}, std::size_t{64}}) {
        for (const bool ramped : {false, true}) {
          const std::uint64_t c = std::min(chunk, size);
          if (size > (std::uint64_t{1} << 36) && c < (std::uint64_t{1} << 32)) continue;  // too many steps to walk
          CAPTURE(size);
          CAPTURE(chunk);
          CAPTURE(streams);
          CAPTURE(ramped);
          CHECK(covers(fetch_plan(size, c, streams, ramped), size, c));
        }
      }
    }
  }
}

TEST_CASE("gateway growing_file: maps the final size of a file still being written, and outlives it") {
  const auto path = std::filesystem::temp_directory_path() / ("sluice-growing-" + std::to_string(::getpid()));
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  sluice::error_code ec;
  auto file = sluice::s3::detail::growing_file::open(fd, 100, 3 << 20, ec);
  REQUIRE(!ec);
  REQUIRE(file != nullptr);
  CHECK(file->region().size == std::size_t{3} << 20);
  CHECK(file->data_offset() == 100);
  CHECK(std::filesystem::file_size(path) == 100 + (3u << 20));
  const char text[] = "written later";
  REQUIRE(::pwrite(fd, text, sizeof text, 100 + (2 << 20)) == static_cast<ssize_t>(sizeof text));
  ::close(fd);
  std::filesystem::remove(path);  // the mapping keeps its own descriptor
  CHECK(std::string(reinterpret_cast<const char*>(file->region().bytes()) + (2 << 20)) == "written later");
  CHECK(file->region().bytes()[0] == std::byte{0});  // a hole reads as zeros, never SIGBUS
}

TEST_CASE("gateway_store_config: validate names the field") {
  sluice::s3::gateway_store_config config;
  CHECK(config.validate()->field == "root");
  config.root = std::filesystem::temp_directory_path() / "sluice-gateway-config";
  CHECK(config.validate()->field.starts_with("upstream."));
  config.upstream.endpoint = "http://127.0.0.1:1";
  CHECK_FALSE(config.validate().has_value());
  config.cache_bytes = 1000;
  CHECK(config.validate()->field == "cache_bytes");
  config.cache_bytes = 1 << 30;
  config.fetch_streams = 0;
  CHECK(config.validate()->field == "fetch_streams");
  config.fetch_streams = 65;
  CHECK(config.validate()->field == "fetch_streams");
  config.fetch_streams = 64;
  CHECK_FALSE(config.validate().has_value());
  config.if_match_trust = std::chrono::milliseconds(60001);
  CHECK(config.validate()->field == "if_match_trust");
  config.if_match_trust = std::chrono::milliseconds(0);
  CHECK_FALSE(config.validate().has_value());
}

TEST_CASE("gateway_store: open with an invalid config fails with invalid_config") {
  sluice::error_code ec;
  sluice::s3::gateway_store_config config;
  CHECK(sluice::s3::gateway_store::open(config, ec) == nullptr);
  CHECK(ec == sluice::errc::invalid_config);
}

TEST_CASE("parse_gateway_config: the gateway object of a serve config, over a base") {
  using sluice::s3::parse_gateway_config;
  sluice::error_code ec;
  sluice::config_error error;
  sluice::s3::gateway_store_config base;
  base.upstream.request_timeout = std::chrono::seconds(60);
  SUBCASE("no gateway object: nullopt, no error") {
    CHECK_FALSE(parse_gateway_config(R"({"listen": "127.0.0.1:9000"})", base, ec, error).has_value());
    CHECK_FALSE(ec);
  }
  SUBCASE("every field, beside the server's and under \"server\"") {
    for (const char* json :
         {R"({"io_threads": 4, "gateway": {"upstream": "https://minio.lan:9000", "upstream_access_key_id": "AK",
              "upstream_secret_access_key": "SK", "upstream_region": "eu-west-1", "upstream_ca_bundle": "/ca.pem",
              "upstream_timeout_s": 5, "cache_bytes": "2 TiB", "revalidate_after_s": 30, "stale_if_error": true,
              "chunk_bytes": 8388608, "fetch_streams": 8, "if_match_trust_ms": 250}})",
          R"({"server": {"gateway": {"upstream": "https://minio.lan:9000", "upstream_access_key_id": "AK",
              "upstream_secret_access_key": "SK", "upstream_region": "eu-west-1", "upstream_ca_bundle": "/ca.pem",
              "upstream_timeout_s": 5, "cache_bytes": 2199023255552, "revalidate_after_s": 30,
              "stale_if_error": true, "chunk_bytes": "8 MiB", "fetch_streams": 8, "if_match_trust_ms": 250}}})"}) {
      const auto config = parse_gateway_config(json, base, ec, error);
      REQUIRE(config.has_value());
      CHECK_FALSE(ec);
      CHECK(config->upstream.endpoint == "https://minio.lan:9000");
      CHECK(config->upstream.creds.access_key_id == "AK");
      CHECK(config->upstream.creds.secret_access_key == "SK");
      CHECK(config->upstream.region == "eu-west-1");
      CHECK(config->upstream.ca_bundle == "/ca.pem");
      CHECK(config->upstream.request_timeout == std::chrono::seconds(5));
      CHECK(config->cache_bytes == (std::uint64_t{2} << 40));
      CHECK(config->revalidate_after == std::chrono::seconds(30));
      CHECK(config->stale_if_error);
      CHECK(config->chunk_bytes == 8 * sluice::mib);
      CHECK(config->fetch_streams == 8);
      CHECK(config->if_match_trust == std::chrono::milliseconds(250));
    }
  }
  SUBCASE("fields left out keep the base") {
    const auto config = parse_gateway_config(R"({"gateway": {"upstream": "http://u:1"}})", base, ec, error);
    REQUIRE(config.has_value());
    CHECK(config->upstream.request_timeout == std::chrono::seconds(60));
    CHECK(config->cache_bytes == base.cache_bytes);
    CHECK(config->if_match_trust == std::chrono::milliseconds(1000));
  }
  SUBCASE("errors name the field") {
    const std::pair<const char*, const char*> bad[] = {
        {R"({"gateway": 1})", "gateway"},
        {R"({"gateway": {"upstream": 1}})", "gateway.upstream"},
        {R"({"gateway": {"cache_bytes": "lots"}})", "gateway.cache_bytes"},
        {R"({"gateway": {"fetch_streams": 0}})", "gateway.fetch_streams"},
        {R"({"gateway": {"upstream_timeout_s": 0}})", "gateway.upstream_timeout_s"},
        {R"({"gateway": {"if_match_trust_ms": 60001}})", "gateway.if_match_trust_ms"},
        {R"({"gateway": {"stale_if_error": "yes"}})", "gateway.stale_if_error"},
        {R"({"gateway": {"upsteam": "http://u:1"}})", "gateway.upsteam"},
    };
    for (const auto& [json, field] : bad) {
      CAPTURE(json);
      CHECK_FALSE(parse_gateway_config(json, base, ec, error).has_value());
      CHECK(ec == sluice::errc::invalid_config);
      CHECK(error.field == field);
    }
    CHECK_FALSE(parse_gateway_config("{", base, ec, error).has_value());
    CHECK(ec == sluice::errc::invalid_config);
  }
}
