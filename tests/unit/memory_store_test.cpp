// SPDX-License-Identifier: Apache-2.0
#include <sluice/memory_store.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using sluice::errc;
using sluice::error_code;
using sluice::memory_store;

static_assert(sluice::object_store<memory_store>);
static_assert(sluice::mappable_store<memory_store>);
static_assert(sluice::object_writer<memory_store::writer>);
static_assert(!std::is_copy_constructible_v<memory_store::writer>);
static_assert(!std::is_copy_constructible_v<memory_store>);

std::span<const std::byte> as_bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

// begin_put + write + commit; REQUIREs each step to succeed.
sluice::object_info put(memory_store& store, const sluice::object_ref& object, std::string_view data,
                        const sluice::object_attributes& attributes = {}) {
  error_code ec;
  auto writer = store.begin_put(object, ec);
  REQUIRE_FALSE(ec);
  writer.write(as_bytes(data), ec);
  REQUIRE_FALSE(ec);
  auto info = writer.commit(attributes, ec);
  REQUIRE_FALSE(ec);
  return info;
}

// The whole object through read().
std::string read_all(const memory_store& store, const sluice::object_ref& object) {
  error_code ec;
  const auto info = store.head(object, ec);
  REQUIRE_FALSE(ec);
  std::string out(info.size, '\0');
  const std::size_t n = store.read(object, 0, std::as_writable_bytes(std::span(out.data(), out.size())), ec);
  REQUIRE_FALSE(ec);
  CHECK(n == info.size);
  return out;
}

std::string mapped_string(const memory_store::mapping& m) {
  const sluice::const_region r = m.region();
  return {static_cast<const char*>(r.data), r.size};
}

// A list_request with the fields not given left at their defaults.
sluice::list_request listing(std::string bucket, std::string prefix = "", std::string start_after = "",
                             std::uint32_t max_keys = 1000) {
  return {std::move(bucket), std::move(prefix), std::move(start_after), max_keys};
}

void make_bucket(memory_store& store, std::string_view bucket = "bucket") {
  error_code ec;
  store.create_bucket(bucket, ec);
  REQUIRE_FALSE(ec);
}

}  // namespace

TEST_CASE("buckets: create, exists, remove") {
  memory_store store;
  error_code ec;
  store.create_bucket("alpha", ec);
  CHECK_FALSE(ec);
  store.create_bucket("alpha", ec);
  CHECK(ec == errc::bucket_exists);

  store.create_bucket("Bad_Name", ec);
  CHECK(ec == errc::invalid_name);
  store.create_bucket("ab", ec);
  CHECK(ec == errc::invalid_name);
  store.create_bucket("10.0.0.1", ec);
  CHECK(ec == errc::invalid_name);

  store.remove_bucket("missing", ec);
  CHECK(ec == errc::no_such_bucket);

  put(store, {"alpha", "k"}, "v");
  store.remove_bucket("alpha", ec);
  CHECK(ec == errc::bucket_not_empty);
  store.remove({"alpha", "k"}, ec);
  REQUIRE_FALSE(ec);
  store.remove_bucket("alpha", ec);
  CHECK_FALSE(ec);
  store.remove_bucket("alpha", ec);
  CHECK(ec == errc::no_such_bucket);

  // The name is free again.
  store.create_bucket("alpha", ec);
  CHECK_FALSE(ec);
}

TEST_CASE("list_buckets is sorted by name") {
  memory_store store;
  error_code ec = errc::declined;
  CHECK(store.list_buckets(ec).empty());
  CHECK_FALSE(ec);
  for (const char* name : {"delta", "alpha", "charlie", "bravo", "alpha-2"}) make_bucket(store, name);
  const auto buckets = store.list_buckets(ec);
  CHECK_FALSE(ec);
  std::vector<std::string> names;
  for (const auto& b : buckets) {
    names.push_back(b.name);
    CHECK(b.created.time_since_epoch().count() != 0);
  }
  CHECK(names == std::vector<std::string>{"alpha", "alpha-2", "bravo", "charlie", "delta"});
}

TEST_CASE("put through a writer, then head, read and map") {
  memory_store store;
  make_bucket(store);
  sluice::object_attributes attributes;
  attributes.etag = "etag-1";
  attributes.content_type = "text/plain";
  attributes.metadata = {{"owner", "tests"}};

  error_code ec;
  auto writer = store.begin_put({"bucket", "dir/key"}, ec);
  REQUIRE_FALSE(ec);
  writer.write(as_bytes("hello "), ec);
  REQUIRE_FALSE(ec);
  writer.write(as_bytes("world"), ec);
  REQUIRE_FALSE(ec);

  // Nothing is visible before commit.
  (void)store.head({"bucket", "dir/key"}, ec);
  CHECK(ec == errc::no_such_object);
  CHECK(store.used_bytes() == 11);  // the upload in progress counts

  const auto committed = writer.commit(attributes, ec);
  REQUIRE_FALSE(ec);
  CHECK(committed.key == "dir/key");
  CHECK(committed.size == 11);

  const auto info = store.head({"bucket", "dir/key"}, ec);
  REQUIRE_FALSE(ec);
  CHECK(info.key == "dir/key");
  CHECK(info.size == 11);
  CHECK(info.attributes.etag == "etag-1");
  CHECK(info.attributes.content_type == "text/plain");
  CHECK(info.attributes.metadata.at("owner") == "tests");
  CHECK(info.last_modified.time_since_epoch().count() != 0);
  CHECK(store.used_bytes() == 11);

  CHECK(read_all(store, {"bucket", "dir/key"}) == "hello world");

  const auto mapping = store.map({"bucket", "dir/key"}, ec);
  REQUIRE_FALSE(ec);
  CHECK(mapped_string(mapping) == "hello world");
  CHECK(mapping.region().kind == sluice::memory_kind::host_pageable);
  CHECK(mapping.info().size == 11);

  // A committed writer is spent.
  (void)writer.commit(attributes, ec);
  CHECK(ec == errc::invalid_argument);
  writer.write(as_bytes("x"), ec);
  CHECK(ec == errc::invalid_argument);
  CHECK(store.used_bytes() == 11);
}

TEST_CASE("an empty object can be published") {
  memory_store store;
  make_bucket(store);
  error_code ec;
  auto writer = store.begin_put({"bucket", "empty"}, ec);
  REQUIRE_FALSE(ec);
  (void)writer.commit({}, ec);
  REQUIRE_FALSE(ec);
  CHECK(store.head({"bucket", "empty"}, ec).size == 0);
  CHECK_FALSE(ec);
  std::array<std::byte, 4> out{};
  CHECK(store.read({"bucket", "empty"}, 0, out, ec) == 0);
  CHECK_FALSE(ec);
}

TEST_CASE("read at offsets") {
  memory_store store;
  make_bucket(store);
  put(store, {"bucket", "k"}, "0123456789");
  error_code ec;
  std::array<char, 4> out{};
  auto bytes = std::as_writable_bytes(std::span(out));

  CHECK(store.read({"bucket", "k"}, 0, bytes, ec) == 4);
  CHECK_FALSE(ec);
  CHECK(std::string_view(out.data(), 4) == "0123");

  CHECK(store.read({"bucket", "k"}, 3, bytes, ec) == 4);
  CHECK(std::string_view(out.data(), 4) == "3456");

  out.fill('.');
  CHECK(store.read({"bucket", "k"}, 8, bytes, ec) == 2);  // short read at the end
  CHECK(std::string_view(out.data(), 4) == "89..");

  CHECK(store.read({"bucket", "k"}, 9, bytes, ec) == 1);
  CHECK(store.read({"bucket", "k"}, 10, bytes, ec) == 0);  // at the end
  CHECK_FALSE(ec);
  CHECK(store.read({"bucket", "k"}, 11, bytes, ec) == 0);  // past the end
  CHECK_FALSE(ec);
  CHECK(store.read({"bucket", "k"}, std::numeric_limits<std::uint64_t>::max(), bytes, ec) == 0);
  CHECK_FALSE(ec);
}

TEST_CASE("read into an empty buffer copies nothing") {
  // An empty span may have a null data(): read() must not hand that to memcpy (UBSan).
  memory_store store;
  make_bucket(store);
  put(store, {"bucket", "k"}, "0123456789");
  error_code ec = errc::declined;
  CHECK(store.read({"bucket", "k"}, 2, std::span<std::byte>{}, ec) == 0);
  CHECK_FALSE(ec);
}

TEST_CASE("missing objects and buckets") {
  memory_store store;
  make_bucket(store);
  error_code ec;
  std::array<std::byte, 4> out{};

  (void)store.head({"bucket", "nope"}, ec);
  CHECK(ec == errc::no_such_object);
  (void)store.head({"nobucket", "k"}, ec);
  CHECK(ec == errc::no_such_bucket);
  CHECK(store.read({"bucket", "nope"}, 0, out, ec) == 0);
  CHECK(ec == errc::no_such_object);
  CHECK(store.read({"nobucket", "k"}, 0, out, ec) == 0);
  CHECK(ec == errc::no_such_bucket);

  const auto mapping = store.map({"bucket", "nope"}, ec);
  CHECK(ec == errc::no_such_object);
  CHECK(mapping.region() == sluice::const_region{});

  store.remove({"bucket", "nope"}, ec);
  CHECK(ec == errc::no_such_object);
  store.remove({"nobucket", "k"}, ec);
  CHECK(ec == errc::no_such_bucket);
  (void)store.list(listing("nobucket"), ec);
  CHECK(ec == errc::no_such_bucket);
}

TEST_CASE("begin_put reports bad keys and missing buckets with an unusable writer") {
  memory_store store;
  make_bucket(store);
  error_code ec;

  auto empty_key = store.begin_put({"bucket", ""}, ec);
  CHECK(ec == errc::invalid_name);
  empty_key.write(as_bytes("x"), ec);
  CHECK(ec == errc::invalid_argument);

  (void)store.begin_put({"bucket", std::string(1025, 'k')}, ec);
  CHECK(ec == errc::invalid_name);
  (void)store.begin_put({"bucket", std::string(1024, 'k')}, ec);
  CHECK_FALSE(ec);

  auto no_bucket = store.begin_put({"nobucket", "k"}, ec);
  CHECK(ec == errc::no_such_bucket);
  (void)no_bucket.commit({}, ec);
  CHECK(ec == errc::invalid_argument);
  CHECK(store.used_bytes() == 0);
}

TEST_CASE("overwrite replaces the object atomically, and an old mapping keeps the old bytes") {
  memory_store store;
  make_bucket(store);
  put(store, {"bucket", "k"}, "old contents", sluice::object_attributes{.etag = "etag-old"});
  error_code ec;
  const auto old_mapping = store.map({"bucket", "k"}, ec);
  REQUIRE_FALSE(ec);

  auto writer = store.begin_put({"bucket", "k"}, ec);
  REQUIRE_FALSE(ec);
  writer.write(as_bytes("new!"), ec);
  REQUIRE_FALSE(ec);
  // Until commit readers see the old object, whole.
  CHECK(read_all(store, {"bucket", "k"}) == "old contents");
  CHECK(store.used_bytes() == 12 + 4);
  (void)writer.commit(sluice::object_attributes{.etag = "etag-new"}, ec);
  REQUIRE_FALSE(ec);

  CHECK(read_all(store, {"bucket", "k"}) == "new!");
  CHECK(store.head({"bucket", "k"}, ec).attributes.etag == "etag-new");
  CHECK(store.used_bytes() == 4);  // the old object's bytes are no longer counted

  CHECK(mapped_string(old_mapping) == "old contents");
  CHECK(old_mapping.info().attributes.etag == "etag-old");
  CHECK(old_mapping.info().size == 12);
  const auto new_mapping = store.map({"bucket", "k"}, ec);
  CHECK(mapped_string(new_mapping) == "new!");

  // Removing the object does not invalidate a mapping either.
  store.remove({"bucket", "k"}, ec);
  REQUIRE_FALSE(ec);
  CHECK(store.used_bytes() == 0);
  CHECK(mapped_string(new_mapping) == "new!");
}

TEST_CASE("a writer destroyed without commit publishes nothing and returns its bytes") {
  memory_store store;
  make_bucket(store);
  put(store, {"bucket", "keep"}, "12345");
  const auto before = store.used_bytes();
  REQUIRE(before == 5);
  error_code ec;
  {
    auto writer = store.begin_put({"bucket", "dropped"}, ec);
    REQUIRE_FALSE(ec);
    writer.write(as_bytes(std::string(1000, 'x')), ec);
    REQUIRE_FALSE(ec);
    CHECK(store.used_bytes() == before + 1000);
  }
  CHECK(store.used_bytes() == before);
  (void)store.head({"bucket", "dropped"}, ec);
  CHECK(ec == errc::no_such_object);

  // An abandoned overwrite leaves the old object in place.
  {
    auto writer = store.begin_put({"bucket", "keep"}, ec);
    writer.write(as_bytes("abc"), ec);
  }
  CHECK(read_all(store, {"bucket", "keep"}) == "12345");
  CHECK(store.used_bytes() == before);
}

TEST_CASE("writer moves carry the reservation") {
  memory_store store;
  make_bucket(store);
  error_code ec;
  auto a = store.begin_put({"bucket", "a"}, ec);
  a.write(as_bytes("aaaa"), ec);
  REQUIRE_FALSE(ec);

  memory_store::writer moved(std::move(a));
  a.write(as_bytes("x"), ec);  // NOLINT(bugprone-use-after-move): the moved-from writer is empty
  CHECK(ec == errc::invalid_argument);
  CHECK(store.used_bytes() == 4);

  auto b = store.begin_put({"bucket", "b"}, ec);
  b.write(as_bytes("bb"), ec);
  CHECK(store.used_bytes() == 6);
  b = std::move(moved);  // b's own upload is dropped, a's is taken over
  CHECK(store.used_bytes() == 4);
  (void)b.commit({}, ec);
  REQUIRE_FALSE(ec);
  CHECK(read_all(store, {"bucket", "a"}) == "aaaa");
  (void)store.head({"bucket", "b"}, ec);
  CHECK(ec == errc::no_such_object);
  CHECK(store.used_bytes() == 4);
}

TEST_CASE("invalid memory_store_config throws") {
  CHECK_THROWS_AS(memory_store(sluice::memory_store_config{0, 0}), std::invalid_argument);
  CHECK_THROWS_WITH_AS(memory_store(sluice::memory_store_config{100, 200}),
                       "max_object_bytes: must not exceed max_bytes", std::invalid_argument);
  CHECK_THROWS_AS(memory_store(sluice::memory_store_config{100, 0}), std::invalid_argument);
  CHECK_NOTHROW(memory_store(sluice::memory_store_config{100, 100}));
}

TEST_CASE("capacity_exceeded for one object over max_object_bytes") {
  memory_store store(sluice::memory_store_config{1000, 10});
  make_bucket(store);
  error_code ec;
  auto writer = store.begin_put({"bucket", "k"}, ec);
  writer.write(as_bytes("12345678"), ec);
  REQUIRE_FALSE(ec);
  writer.write(as_bytes("abc"), ec);  // 11 > 10
  CHECK(ec == errc::capacity_exceeded);
  CHECK(store.used_bytes() == 8);    // nothing of the refused write is kept
  writer.write(as_bytes("ab"), ec);  // still usable: exactly 10
  CHECK_FALSE(ec);
  writer.write(as_bytes("c"), ec);
  CHECK(ec == errc::capacity_exceeded);
  (void)writer.commit({}, ec);
  REQUIRE_FALSE(ec);
  CHECK(read_all(store, {"bucket", "k"}) == "12345678ab");
  CHECK(store.used_bytes() == 10);

  auto big = store.begin_put({"bucket", "big"}, ec);
  big.write(as_bytes(std::string(11, 'x')), ec);
  CHECK(ec == errc::capacity_exceeded);
  CHECK(store.used_bytes() == 10);
}

TEST_CASE("capacity_exceeded when the store would outgrow max_bytes") {
  memory_store store(sluice::memory_store_config{16, 10});
  make_bucket(store);
  put(store, {"bucket", "a"}, "0123456789");  // 10 of 16
  error_code ec;
  auto writer = store.begin_put({"bucket", "b"}, ec);
  writer.write(as_bytes("1234567"), ec);  // 17 > 16
  CHECK(ec == errc::capacity_exceeded);
  CHECK(store.used_bytes() == 10);
  writer.write(as_bytes("123456"), ec);  // exactly 16
  CHECK_FALSE(ec);
  CHECK(store.used_bytes() == 16);

  // Uploads in progress count: a second writer has no room left.
  auto other = store.begin_put({"bucket", "c"}, ec);
  other.write(as_bytes("x"), ec);
  CHECK(ec == errc::capacity_exceeded);

  (void)writer.commit({}, ec);
  REQUIRE_FALSE(ec);
  CHECK(store.used_bytes() == 16);

  // Removing an object makes room again.
  store.remove({"bucket", "a"}, ec);
  REQUIRE_FALSE(ec);
  CHECK(store.used_bytes() == 6);
  other.write(as_bytes("0123456789"), ec);
  CHECK_FALSE(ec);
  CHECK(store.used_bytes() == 16);
}

TEST_CASE("commit after the bucket was removed is no_such_bucket and returns the bytes") {
  memory_store store;
  make_bucket(store);
  error_code ec;
  auto writer = store.begin_put({"bucket", "k"}, ec);
  writer.write(as_bytes("payload"), ec);
  REQUIRE_FALSE(ec);
  CHECK(store.used_bytes() == 7);

  store.remove_bucket("bucket", ec);  // it holds no published object yet
  REQUIRE_FALSE(ec);
  const auto info = writer.commit({}, ec);
  CHECK(ec == errc::no_such_bucket);
  CHECK(info.key.empty());
  CHECK(store.used_bytes() == 0);

  // A bucket of the same name created later does not get the object.
  make_bucket(store);
  (void)store.head({"bucket", "k"}, ec);
  CHECK(ec == errc::no_such_object);
  CHECK(store.used_bytes() == 0);
}

TEST_CASE("remove deletes one object") {
  memory_store store;
  make_bucket(store);
  put(store, {"bucket", "a"}, "aaa");
  put(store, {"bucket", "b"}, "bb");
  CHECK(store.used_bytes() == 5);
  error_code ec;
  store.remove({"bucket", "a"}, ec);
  CHECK_FALSE(ec);
  (void)store.head({"bucket", "a"}, ec);
  CHECK(ec == errc::no_such_object);
  CHECK(read_all(store, {"bucket", "b"}) == "bb");
  CHECK(store.used_bytes() == 2);
  store.remove({"bucket", "a"}, ec);
  CHECK(ec == errc::no_such_object);
}

TEST_CASE("list filters by prefix and start_after, in key order") {
  memory_store store;
  make_bucket(store);
  for (const char* key : {"b/2", "a/1", "b/1", "c", "b/3", "a/2", "b"}) put(store, {"bucket", key}, key);
  error_code ec;

  auto keys = [](const sluice::list_result& r) {
    std::vector<std::string> out;
    for (const auto& o : r.objects) out.push_back(o.key);
    return out;
  };

  auto all = store.list(listing("bucket"), ec);
  CHECK_FALSE(ec);
  CHECK(keys(all) == std::vector<std::string>{"a/1", "a/2", "b", "b/1", "b/2", "b/3", "c"});
  CHECK_FALSE(all.truncated);
  CHECK(all.objects[0].size == 3);

  CHECK(keys(store.list(listing("bucket", "b/"), ec)) == std::vector<std::string>{"b/1", "b/2", "b/3"});
  CHECK(keys(store.list(listing("bucket", "b/", "b/1"), ec)) == std::vector<std::string>{"b/2", "b/3"});
  CHECK(keys(store.list(listing("bucket", "", "b/1"), ec)) == std::vector<std::string>{"b/2", "b/3", "c"});
  CHECK(keys(store.list(listing("bucket", "a/", "zzz"), ec)).empty());
  CHECK(keys(store.list(listing("bucket", "b/", "c"), ec)).empty());
  CHECK(keys(store.list(listing("bucket", "d"), ec)).empty());
  CHECK(keys(store.list(listing("bucket", "", "c"), ec)).empty());

  auto limited = store.list(listing("bucket", "b/", "", 2), ec);
  CHECK(keys(limited) == std::vector<std::string>{"b/1", "b/2"});
  CHECK(limited.truncated);

  // Exactly max_keys keys left: not truncated.
  auto exact = store.list(listing("bucket", "b/", "", 3), ec);
  CHECK(keys(exact) == std::vector<std::string>{"b/1", "b/2", "b/3"});
  CHECK_FALSE(exact.truncated);

  CHECK(store.list(listing("bucket", "", "", 0), ec).objects.empty());
}

TEST_CASE("list: a start_after before the prefix still includes the key equal to the prefix") {
  // Regression: list() used to start at upper_bound(max(start_after, prefix)), which skipped
  // the key equal to the prefix whenever start_after sorted before the prefix.
  memory_store store;
  make_bucket(store);
  for (const char* key : {"a", "b", "b/1"}) put(store, {"bucket", key}, key);
  error_code ec;
  const auto r = store.list(listing("bucket", "b", "a"), ec);
  REQUIRE_FALSE(ec);
  REQUIRE(r.objects.size() == 2);
  CHECK(r.objects[0].key == "b");
  CHECK(r.objects[1].key == "b/1");

  // start_after equal to the prefix excludes that key; an empty start_after includes it.
  const auto after = store.list(listing("bucket", "b", "b"), ec);
  REQUIRE(after.objects.size() == 1);
  CHECK(after.objects[0].key == "b/1");
  CHECK(store.list(listing("bucket", "b"), ec).objects.size() == 2);
}

TEST_CASE("list paging across several pages returns every key exactly once") {
  memory_store store;
  make_bucket(store);
  std::set<std::string> expected;
  for (int i = 0; i < 47; ++i) {
    const std::string key = "logs/" + std::to_string(1000 + i * 7 % 47);
    put(store, {"bucket", key}, key);
    expected.insert(key);
  }
  put(store, {"bucket", "other/1"}, "x");  // outside the prefix
  put(store, {"bucket", "logr"}, "x");     // sorts before the prefix

  std::vector<std::string> seen;
  sluice::list_request request{"bucket", "logs/", "", 10};
  int pages = 0;
  for (;;) {
    error_code ec;
    const auto page = store.list(request, ec);
    REQUIRE_FALSE(ec);
    ++pages;
    REQUIRE(pages <= 10);
    CHECK(page.objects.size() <= 10);
    for (const auto& o : page.objects) seen.push_back(o.key);
    if (!page.truncated) break;
    CHECK(page.objects.size() == 10);
    request.start_after = page.objects.back().key;
  }
  CHECK(pages == 5);
  CHECK(std::is_sorted(seen.begin(), seen.end()));
  CHECK(seen.size() == expected.size());
  CHECK(std::set<std::string>(seen.begin(), seen.end()) == expected);
}

TEST_CASE("concurrent writers to different keys are all published") {
  memory_store store;
  make_bucket(store);
  constexpr int threads = 8;
  constexpr int per_thread = 64;
  std::vector<std::thread> workers;
  std::vector<int> failures(threads, 0);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&store, &failures, t] {
      for (int i = 0; i < per_thread; ++i) {
        const std::string key = "t" + std::to_string(t) + "/" + std::to_string(i);
        error_code ec;
        auto writer = store.begin_put({"bucket", key}, ec);
        if (ec) ++failures[static_cast<std::size_t>(t)];
        // Several writes per object, so that writers interleave inside one object too.
        for (int part = 0; part < 4; ++part) {
          writer.write(as_bytes(key), ec);
          if (ec) ++failures[static_cast<std::size_t>(t)];
        }
        (void)writer.commit({}, ec);
        if (ec) ++failures[static_cast<std::size_t>(t)];
      }
    });
  }
  for (auto& w : workers) w.join();
  for (int f : failures) CHECK(f == 0);

  std::uint64_t total = 0;
  for (int t = 0; t < threads; ++t) {
    for (int i = 0; i < per_thread; ++i) {
      const std::string key = "t" + std::to_string(t) + "/" + std::to_string(i);
      CHECK(read_all(store, {"bucket", key}) == key + key + key + key);
      total += 4 * key.size();
    }
  }
  error_code ec;
  const auto listed = store.list(listing("bucket", "", "", 10000), ec);
  CHECK(listed.objects.size() == threads * per_thread);
  CHECK(store.used_bytes() == total);
}

TEST_CASE("concurrent overwrites of one key: readers always see a whole version") {
  memory_store store;
  make_bucket(store);
  put(store, {"bucket", "k"}, std::string(256, 'a'));
  constexpr int writers = 4;
  constexpr int rounds = 100;
  std::vector<std::thread> threads;
  for (int w = 0; w < writers; ++w) {
    threads.emplace_back([&store, w] {
      const std::string chunk(64, static_cast<char>('b' + w));
      for (int r = 0; r < rounds; ++r) {
        error_code ec;
        auto writer = store.begin_put({"bucket", "k"}, ec);
        for (int part = 0; part < 4; ++part) writer.write(as_bytes(chunk), ec);
        (void)writer.commit({}, ec);
      }
    });
  }
  int torn = 0;
  for (int r = 0; r < rounds * writers; ++r) {
    error_code ec;
    const auto m = store.map({"bucket", "k"}, ec);
    const std::string s = mapped_string(m);
    if (s.size() != 256 || std::count(s.begin(), s.end(), s.front()) != 256) ++torn;
  }
  for (auto& t : threads) t.join();
  CHECK(torn == 0);
  CHECK(store.used_bytes() == 256);
}

TEST_CASE("conditional commits and completions publish only over the version they expect") {
  memory_store store;
  make_bucket(store);
  const sluice::object_ref object{"bucket", "k"};
  error_code ec;
  auto conditional_put = [&](std::string_view data, sluice::write_precondition precondition) {
    auto writer = store.begin_put(object, ec);
    REQUIRE_FALSE(ec);
    writer.require(std::move(precondition));
    writer.write(as_bytes(data), ec);
    REQUIRE_FALSE(ec);
    (void)writer.commit(sluice::object_attributes{.etag = std::string(data)}, ec);
    return ec;
  };
  CHECK_FALSE(conditional_put("first", {.if_absent = true}));
  CHECK(conditional_put("second", {.if_absent = true}) == sluice::errc::precondition_failed);
  CHECK(read_all(store, object) == "first");
  CHECK(conditional_put("third", {.if_etag = "nope"}) == sluice::errc::precondition_failed);
  CHECK_FALSE(conditional_put("third", {.if_etag = "first"}));
  CHECK(read_all(store, object) == "third");
  CHECK(conditional_put("x", {.if_absent = true, .if_etag = "third"}) == sluice::errc::precondition_failed);

  const std::string id = store.create_upload(object, {}, ec);
  REQUIRE_FALSE(ec);
  auto part = store.begin_part(object, id, 1, ec);
  part.write(as_bytes("multipart"), ec);
  (void)part.commit(sluice::object_attributes{.etag = "p1"}, ec);
  REQUIRE_FALSE(ec);
  const std::vector<sluice::part_info> chosen{{.number = 1, .size = 9, .etag = "p1"}};
  (void)store.complete_upload(object, id, chosen, sluice::object_attributes{.etag = "mp"}, ec, {.if_etag = "first"});
  CHECK(ec == sluice::errc::precondition_failed);
  CHECK(read_all(store, object) == "third");
  CHECK(store.list_parts(object, id, ec).size() == 1);  // the upload stays
  (void)store.complete_upload(object, id, chosen, sluice::object_attributes{.etag = "mp"}, ec, {.if_etag = "third"});
  CHECK_FALSE(ec);
  CHECK(read_all(store, object) == "multipart");
}
