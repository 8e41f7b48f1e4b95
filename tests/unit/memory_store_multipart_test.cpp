// SPDX-License-Identifier: Apache-2.0
#include <sluice/memory_store.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace {

using sluice::errc;
using sluice::error_code;
using sluice::memory_store;
using sluice::part_info;

static_assert(sluice::multipart_store<memory_store>);
static_assert(sluice::object_writer<memory_store::part_writer_type>);

std::span<const std::byte> as_bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

void make_bucket(memory_store& store, std::string_view bucket = "bucket") {
  error_code ec;
  store.create_bucket(bucket, ec);
  REQUIRE_FALSE(ec);
}

std::string start(memory_store& store, const sluice::object_ref& object, const sluice::object_attributes& attrs = {}) {
  error_code ec;
  std::string id = store.create_upload(object, attrs, ec);
  REQUIRE_FALSE(ec);
  return id;
}

// Uploads one part with `etag`; REQUIREs success.
sluice::object_info upload_part(memory_store& store, const sluice::object_ref& object, std::string_view id,
                                std::uint32_t number, std::string_view data, std::string etag) {
  error_code ec;
  auto writer = store.begin_part(object, id, number, ec);
  REQUIRE_FALSE(ec);
  writer.write(as_bytes(data), ec);
  REQUIRE_FALSE(ec);
  auto info = writer.commit(sluice::object_attributes{.etag = std::move(etag)}, ec);
  REQUIRE_FALSE(ec);
  return info;
}

std::string read_all(const memory_store& store, const sluice::object_ref& object) {
  error_code ec;
  const auto info = store.head(object, ec);
  REQUIRE_FALSE(ec);
  std::string out(info.size, '\0');
  CHECK(store.read(object, 0, std::as_writable_bytes(std::span(out.data(), out.size())), ec) == info.size);
  REQUIRE_FALSE(ec);
  return out;
}

std::vector<std::uint32_t> numbers(const std::vector<part_info>& parts) {
  std::vector<std::uint32_t> out;
  for (const auto& p : parts) out.push_back(p.number);
  return out;
}

}  // namespace

TEST_CASE("memory_store multipart: parts in any order, a replaced part, completion with a subset") {
  memory_store store;
  make_bucket(store);
  const sluice::object_ref object{"bucket", "big/object"};
  const std::string id = start(store, object, sluice::object_attributes{.content_type = "text/plain"});
  CHECK(id.size() == 32);
  CHECK(id.find_first_not_of("0123456789abcdef") == std::string::npos);

  const auto p3 = upload_part(store, object, id, 3, "ccc", "e3");
  CHECK(p3.key == "big/object");
  CHECK(p3.size == 3);
  CHECK(p3.attributes.etag == "e3");
  upload_part(store, object, id, 1, "a", "e1");
  upload_part(store, object, id, 2, "bb", "e2");
  upload_part(store, object, id, 5, "eeeee", "e5");
  CHECK(store.used_bytes() == 11);

  // Nothing is published before completion.
  error_code ec;
  (void)store.head(object, ec);
  CHECK(ec == errc::no_such_object);

  // Replacing a part swaps its bytes and its accounting.
  upload_part(store, object, id, 2, "BBBB", "e2b");
  CHECK(store.used_bytes() == 13);

  const auto parts = store.list_parts(object, id, ec);
  REQUIRE_FALSE(ec);
  CHECK(numbers(parts) == std::vector<std::uint32_t>{1, 2, 3, 5});
  CHECK(parts[1].etag == "e2b");
  CHECK(parts[1].size == 4);
  CHECK(parts[1].last_modified.time_since_epoch().count() != 0);

  const auto uploads = store.list_uploads("bucket", "", ec);
  REQUIRE_FALSE(ec);
  REQUIRE(uploads.size() == 1);
  CHECK(uploads[0].key == "big/object");
  CHECK(uploads[0].upload_id == id);
  CHECK(uploads[0].attributes.content_type == "text/plain");
  CHECK(uploads[0].initiated.time_since_epoch().count() != 0);

  const std::vector<part_info> chosen{
      {.number = 1, .etag = "e1"}, {.number = 2, .etag = "e2b"}, {.number = 5, .etag = "e5"}};
  const auto info = store.complete_upload(object, id, chosen, sluice::object_attributes{.etag = "multi-3"}, ec);
  REQUIRE_FALSE(ec);
  CHECK(info.key == "big/object");
  CHECK(info.size == 10);
  CHECK(info.attributes.etag == "multi-3");
  CHECK(read_all(store, object) == "aBBBBeeeee");
  CHECK(store.head(object, ec).attributes.etag == "multi-3");

  // The upload is gone with all its parts, including the one not chosen.
  CHECK(store.used_bytes() == 10);
  (void)store.list_parts(object, id, ec);
  CHECK(ec == errc::no_such_upload);
  CHECK(store.list_uploads("bucket", "", ec).empty());
  (void)store.complete_upload(object, id, chosen, {}, ec);
  CHECK(ec == errc::no_such_upload);
}

TEST_CASE("memory_store multipart: invalid parts and order leave the upload intact") {
  memory_store store;
  make_bucket(store);
  const sluice::object_ref object{"bucket", "k"};
  const std::string id = start(store, object);
  upload_part(store, object, id, 1, "one", "e1");
  upload_part(store, object, id, 2, "two", "e2");
  error_code ec;

  const std::vector<part_info> bad_etag{{.number = 1, .etag = "e1"}, {.number = 2, .etag = "nope"}};
  (void)store.complete_upload(object, id, bad_etag, {}, ec);
  CHECK(ec == errc::invalid_part);
  const std::vector<part_info> missing{{.number = 1, .etag = "e1"}, {.number = 3, .etag = "e3"}};
  (void)store.complete_upload(object, id, missing, {}, ec);
  CHECK(ec == errc::invalid_part);
  (void)store.complete_upload(object, id, {}, {}, ec);
  CHECK(ec == errc::invalid_part);
  const std::vector<part_info> descending{{.number = 2, .etag = "e2"}, {.number = 1, .etag = "e1"}};
  (void)store.complete_upload(object, id, descending, {}, ec);
  CHECK(ec == errc::invalid_part_order);
  const std::vector<part_info> repeated{{.number = 1, .etag = "e1"}, {.number = 1, .etag = "e1"}};
  (void)store.complete_upload(object, id, repeated, {}, ec);
  CHECK(ec == errc::invalid_part_order);

  // Wrong key, unknown id, unknown bucket.
  const std::vector<part_info> good{{.number = 1, .etag = "e1"}, {.number = 2, .etag = "e2"}};
  (void)store.complete_upload({"bucket", "other"}, id, good, {}, ec);
  CHECK(ec == errc::no_such_upload);
  (void)store.complete_upload(object, "0123", good, {}, ec);
  CHECK(ec == errc::no_such_upload);
  (void)store.complete_upload({"nobucket", "k"}, id, good, {}, ec);
  CHECK(ec == errc::no_such_bucket);

  (void)store.head(object, ec);
  CHECK(ec == errc::no_such_object);
  CHECK(numbers(store.list_parts(object, id, ec)) == std::vector<std::uint32_t>{1, 2});
  CHECK(store.used_bytes() == 6);

  (void)store.complete_upload(object, id, good, {}, ec);
  REQUIRE_FALSE(ec);
  CHECK(read_all(store, object) == "onetwo");
  CHECK(store.used_bytes() == 6);
}

TEST_CASE("memory_store multipart: begin_part and create_upload errors") {
  memory_store store;
  make_bucket(store);
  error_code ec;
  (void)store.create_upload({"nobucket", "k"}, {}, ec);
  CHECK(ec == errc::no_such_bucket);
  (void)store.create_upload({"bucket", ""}, {}, ec);
  CHECK(ec == errc::invalid_name);
  (void)store.create_upload({"bucket", std::string(1025, 'k')}, {}, ec);
  CHECK(ec == errc::invalid_name);

  const std::string id = start(store, {"bucket", "k"});
  auto w = store.begin_part({"bucket", "k"}, id, 0, ec);
  CHECK(ec == errc::invalid_argument);
  w.write(as_bytes("x"), ec);
  CHECK(ec == errc::invalid_argument);
  (void)store.begin_part({"bucket", "k"}, id, memory_store::max_part_number + 1, ec);
  CHECK(ec == errc::invalid_argument);
  (void)store.begin_part({"bucket", "k"}, id, memory_store::max_part_number, ec);
  CHECK_FALSE(ec);
  (void)store.begin_part({"bucket", "other"}, id, 1, ec);
  CHECK(ec == errc::no_such_upload);
  (void)store.begin_part({"bucket", "k"}, "ffffffffffffffffffffffffffffffff", 1, ec);
  CHECK(ec == errc::no_such_upload);
  (void)store.begin_part({"nobucket", "k"}, id, 1, ec);
  CHECK(ec == errc::no_such_bucket);
  (void)store.list_parts({"bucket", "k"}, "nope", ec);
  CHECK(ec == errc::no_such_upload);
  (void)store.list_uploads("nobucket", "", ec);
  CHECK(ec == errc::no_such_bucket);
  store.abort_upload({"bucket", "k"}, "nope", ec);
  CHECK(ec == errc::no_such_upload);
  store.abort_upload({"nobucket", "k"}, id, ec);
  CHECK(ec == errc::no_such_bucket);
}

TEST_CASE("memory_store multipart: abort frees the reservation, and a late part commit fails") {
  memory_store store(sluice::memory_store_config{64, 32});
  make_bucket(store);
  const sluice::object_ref object{"bucket", "k"};
  const std::string id = start(store, object);
  upload_part(store, object, id, 1, std::string(20, 'a'), "e1");
  upload_part(store, object, id, 2, std::string(20, 'b'), "e2");
  CHECK(store.used_bytes() == 40);

  // Parts count against max_bytes like any upload in progress.
  error_code ec;
  auto writer = store.begin_part(object, id, 3, ec);
  REQUIRE_FALSE(ec);
  writer.write(as_bytes(std::string(30, 'c')), ec);
  CHECK(ec == errc::capacity_exceeded);
  writer.write(as_bytes(std::string(10, 'c')), ec);
  REQUIRE_FALSE(ec);
  CHECK(store.used_bytes() == 50);

  // The concatenation is bounded by max_object_bytes (40 > 32).
  const std::vector<part_info> both{{.number = 1, .etag = "e1"}, {.number = 2, .etag = "e2"}};
  (void)store.complete_upload(object, id, both, {}, ec);
  CHECK(ec == errc::capacity_exceeded);

  store.abort_upload(object, id, ec);
  REQUIRE_FALSE(ec);
  CHECK(store.used_bytes() == 10);  // only the open part writer's bytes remain
  (void)writer.commit(sluice::object_attributes{.etag = "e3"}, ec);
  CHECK(ec == errc::no_such_upload);
  CHECK(store.used_bytes() == 0);
  CHECK(store.list_uploads("bucket", "", ec).empty());
  (void)store.list_parts(object, id, ec);
  CHECK(ec == errc::no_such_upload);
  store.abort_upload(object, id, ec);
  CHECK(ec == errc::no_such_upload);

  // A part writer dropped without commit returns its bytes too.
  const std::string other = start(store, object);
  {
    auto dropped = store.begin_part(object, other, 1, ec);
    dropped.write(as_bytes("xyz"), ec);
    CHECK(store.used_bytes() == 3);
  }
  CHECK(store.used_bytes() == 0);
  CHECK(store.list_parts(object, other, ec).empty());
}

TEST_CASE("memory_store multipart: a bucket with an upload in progress is not empty") {
  memory_store store;
  make_bucket(store);
  const std::string id = start(store, {"bucket", "k"});
  error_code ec;
  store.remove_bucket("bucket", ec);
  CHECK(ec == errc::bucket_not_empty);
  store.abort_upload({"bucket", "k"}, id, ec);
  REQUIRE_FALSE(ec);
  store.remove_bucket("bucket", ec);
  CHECK_FALSE(ec);
}

TEST_CASE("memory_store multipart: completion replaces an object, old mappings keep their bytes") {
  memory_store store;
  make_bucket(store);
  const sluice::object_ref object{"bucket", "k"};
  error_code ec;
  {
    auto w = store.begin_put(object, ec);
    w.write(as_bytes("old"), ec);
    (void)w.commit({}, ec);
    REQUIRE_FALSE(ec);
  }
  const auto old_mapping = store.map(object, ec);
  const std::string id = start(store, object);
  upload_part(store, object, id, 7, "new", "e7");
  CHECK(store.used_bytes() == 6);
  const std::vector<part_info> chosen{{.number = 7, .etag = "e7"}};
  (void)store.complete_upload(object, id, chosen, {}, ec);
  REQUIRE_FALSE(ec);
  CHECK(read_all(store, object) == "new");
  CHECK(store.used_bytes() == 3);
  const auto r = old_mapping.region();
  CHECK(std::string_view(static_cast<const char*>(r.data), r.size) == "old");
}

TEST_CASE("memory_store multipart: list_uploads filters by prefix and sorts by key") {
  memory_store store;
  make_bucket(store);
  const std::string b2 = start(store, {"bucket", "b/2"});
  const std::string a = start(store, {"bucket", "a"});
  const std::string b1 = start(store, {"bucket", "b/1"});
  const std::string b1_again = start(store, {"bucket", "b/1"});
  error_code ec;
  const auto all = store.list_uploads("bucket", "", ec);
  REQUIRE(all.size() == 4);
  CHECK(all[0].key == "a");
  CHECK(all[1].key == "b/1");
  CHECK(all[2].key == "b/1");
  CHECK(all[1].initiated <= all[2].initiated);
  CHECK(all[3].key == "b/2");
  const auto bs = store.list_uploads("bucket", "b/", ec);
  CHECK(bs.size() == 3);
  std::set<std::string> ids;
  for (const auto& u : bs) ids.insert(u.upload_id);
  CHECK(ids == std::set<std::string>{b1, b1_again, b2});
  CHECK(store.list_uploads("bucket", "c", ec).empty());
  CHECK(a != b1);
}

TEST_CASE("memory_store multipart: concurrent part uploads of one upload") {
  memory_store store;
  make_bucket(store);
  const sluice::object_ref object{"bucket", "k"};
  const std::string id = start(store, object);
  constexpr std::uint32_t parts = 32;
  std::vector<std::thread> threads;
  std::vector<int> failures(parts, 0);
  for (std::uint32_t n = 1; n <= parts; ++n) {
    threads.emplace_back([&, n] {
      error_code ec;
      auto w = store.begin_part(object, id, n, ec);
      const std::string data(100, static_cast<char>('A' + n % 26));
      w.write(as_bytes(data), ec);
      (void)w.commit(sluice::object_attributes{.etag = "e" + std::to_string(n)}, ec);
      if (ec) ++failures[n - 1];
    });
  }
  for (auto& t : threads) t.join();
  CHECK(std::count(failures.begin(), failures.end(), 0) == static_cast<long>(parts));
  std::vector<part_info> chosen;
  for (std::uint32_t n = 1; n <= parts; ++n) chosen.push_back({.number = n, .etag = "e" + std::to_string(n)});
  error_code ec;
  const auto info = store.complete_upload(object, id, chosen, {}, ec);
  REQUIRE_FALSE(ec);
  CHECK(info.size == 100 * parts);
  const std::string all = read_all(store, object);
  for (std::uint32_t n = 1; n <= parts; ++n) {
    CHECK(all[(n - 1) * 100] == static_cast<char>('A' + n % 26));
  }
  CHECK(store.used_bytes() == 100 * parts);
}
