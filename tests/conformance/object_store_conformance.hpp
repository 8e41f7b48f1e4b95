// SPDX-License-Identifier: Apache-2.0
// The object_store conformance suite, written once and run for every store
// (docs/requirements/object_store.md): object_store, mappable_store and multipart_store.
//
// A store joins the suite with a fixture type and one line:
//   SLUICE_OBJECT_STORE_CONFORMANCE(my_fixture);
// The fixture is default-constructible (each case makes a fresh one) and provides:
//   using store_type;                a servable_store
//   store_type& store()              a store with no bucket yet
//   using traits;                    object_store_traits, or a struct derived from it that
//                                    overrides what the store legitimately does otherwise
// The suite only calls the store; what the server adds (delimiters, ETags, part sizes) is not
// asked of it.
#pragma once

#include <sluice/concepts.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace sluice::testing {

/// Where a store may legitimately differ from the requirements page's defaults.
struct object_store_traits {
  /// Removing a key that has no object is errc::no_such_object. False: it succeeds, as in S3
  /// (gateway_store forwards the DELETE).
  static constexpr bool remove_missing_is_error = true;
  /// commit and complete_upload publish the ETag given in the attributes. False: the store makes
  /// its own (gateway_store: the upstream's); the suite then checks that head reports the one
  /// commit returned.
  static constexpr bool keeps_given_etag = true;
  /// Creating a bucket that exists is errc::bucket_exists. False: creating one the caller already
  /// owns succeeds (gateway_store: an S3 upstream in us-east-1 answers its owner 200).
  static constexpr bool recreate_is_bucket_exists = true;
  /// head, read and map in a missing bucket are errc::no_such_bucket. False: no_such_object
  /// (gateway_store: the upstream's answer to a HEAD has no body to tell the two apart).
  static constexpr bool reads_tell_missing_bucket = true;
};

/// `n` bytes of seeded random data.
inline std::vector<std::byte> store_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(0, 255);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(dist(gen));
  return out;
}

/// Writes `data` through a writer in three pieces and commits it; REQUIREs success.
template <class Store>
object_info put_object(Store& store, const object_ref& obj, std::span<const std::byte> data,
                       const object_attributes& attrs = {}) {
  error_code ec;
  auto w = store.begin_put(obj, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  const std::size_t third = data.size() / 3;
  for (const auto piece : {data.first(third), data.subspan(third, third), data.subspan(2 * third)}) {
    w.write(piece, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
  }
  object_info info = w.commit(attrs, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  return info;
}

/// The object's bytes through read(), in one call; REQUIREs success.
template <class Store>
std::vector<std::byte> read_object(Store& store, const object_ref& obj) {
  error_code ec;
  const object_info info = store.head(obj, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  std::vector<std::byte> out(static_cast<std::size_t>(info.size) + 16);
  const std::size_t got = store.read(obj, 0, out, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  out.resize(got);
  return out;
}

/// The bytes a mapping lends.
template <class Mapping>
std::vector<std::byte> mapped_bytes(const Mapping& m) {
  const const_region r = m.region();
  const auto* first = static_cast<const std::byte*>(r.data);
  return {first, first + r.size};
}

/// A list_request; the bucket is set by the caller when empty here.
inline list_request listing(std::string bucket, std::string prefix = {}, std::string start_after = {},
                            std::uint32_t max_keys = 1000) {
  list_request r;
  r.bucket = std::move(bucket);
  r.prefix = std::move(prefix);
  r.start_after = std::move(start_after);
  r.max_keys = max_keys;
  return r;
}

/// Attributes with only an ETag.
inline object_attributes with_etag(std::string etag) {
  object_attributes a;
  a.etag = std::move(etag);
  return a;
}

inline bool same_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

}  // namespace sluice::testing

TEST_CASE_TEMPLATE_DEFINE("object_store conformance: buckets", Fixture, object_store_buckets) {
  using namespace sluice;
  using traits = typename Fixture::traits;
  static_assert(servable_store<typename Fixture::store_type>);
  Fixture f;
  auto& s = f.store();
  error_code ec;
  auto names = [&] {
    std::vector<std::string> out;
    for (const bucket_info& b : s.list_buckets(ec)) out.push_back(b.name);
    REQUIRE_MESSAGE(!ec, ec.message());
    return out;
  };
  auto has = [](const std::vector<std::string>& all, std::string_view name) {
    return std::find(all.begin(), all.end(), name) != all.end();
  };

  s.create_bucket("conf-bucket", ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK(has(names(), "conf-bucket"));

  SUBCASE("creating it again is bucket_exists, an invalid name is invalid_name") {
    s.create_bucket("conf-bucket", ec);
    if constexpr (traits::recreate_is_bucket_exists) {
      CHECK(ec == errc::bucket_exists);
    } else {
      CHECK_MESSAGE(!ec, ec.message());
    }
    s.create_bucket("Not_A_Bucket", ec);
    CHECK(ec == errc::invalid_name);
    CHECK_FALSE(has(names(), "Not_A_Bucket"));
  }
  SUBCASE("an empty bucket is removed; a missing one is no_such_bucket") {
    s.remove_bucket("conf-bucket", ec);
    CHECK_MESSAGE(!ec, ec.message());
    CHECK_FALSE(has(names(), "conf-bucket"));
    s.remove_bucket("conf-bucket", ec);
    CHECK(ec == errc::no_such_bucket);
  }
  SUBCASE("a bucket with an object is bucket_not_empty until the object is removed") {
    const std::vector<std::byte> one{std::byte{1}};
    testing::put_object(s, {"conf-bucket", "k"}, one);
    s.remove_bucket("conf-bucket", ec);
    CHECK(ec == errc::bucket_not_empty);
    CHECK(has(names(), "conf-bucket"));
    s.remove({"conf-bucket", "k"}, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    s.remove_bucket("conf-bucket", ec);
    CHECK_MESSAGE(!ec, ec.message());
  }
  SUBCASE("calls on a missing bucket are no_such_bucket") {
    const object_ref missing{"conf-missing", "k"};
    const errc on_read = traits::reads_tell_missing_bucket ? errc::no_such_bucket : errc::no_such_object;
    std::vector<std::byte> out(4);
    (void)s.head(missing, ec);
    CHECK(ec == on_read);
    CHECK(s.read(missing, 0, out, ec) == 0);
    CHECK(ec == on_read);
    (void)s.map(missing, ec);
    CHECK(ec == on_read);
    (void)s.begin_put(missing, ec);
    CHECK(ec == errc::no_such_bucket);
    s.remove(missing, ec);
    CHECK(ec == errc::no_such_bucket);
    (void)s.list(testing::listing("conf-missing"), ec);
    CHECK(ec == errc::no_such_bucket);
  }
}

TEST_CASE_TEMPLATE_DEFINE("object_store conformance: put, then head, read and map", Fixture, object_store_objects) {
  using namespace sluice;
  using traits = typename Fixture::traits;
  Fixture f;
  auto& s = f.store();
  error_code ec;
  s.create_bucket("conf", ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  const object_ref obj{"conf", "dir/object"};

  SUBCASE("every size reads back and maps as written, with its attributes") {
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{4099}, std::size_t{70000}}) {
      CAPTURE(n);
      const auto data = testing::store_bytes(n, static_cast<std::uint32_t>(n));
      object_attributes attrs;
      attrs.etag = "etag-" + std::to_string(n);
      attrs.content_type = "text/x-conformance";
      const object_info put = testing::put_object(s, obj, data, attrs);
      CHECK(put.size == n);
      const object_info head = s.head(obj, ec);
      REQUIRE_MESSAGE(!ec, ec.message());
      CHECK(head.key == obj.key);
      CHECK(head.size == n);
      CHECK(head.attributes.content_type == "text/x-conformance");
      CHECK(head.attributes.etag == put.attributes.etag);
      if constexpr (traits::keeps_given_etag) CHECK(head.attributes.etag == attrs.etag);
      CHECK(testing::same_bytes(testing::read_object(s, obj), data));
      const auto m = s.map(obj, ec);
      REQUIRE_MESSAGE(!ec, ec.message());
      CHECK(m.info().size == n);
      CHECK(testing::same_bytes(testing::mapped_bytes(m), data));
    }
  }
  SUBCASE("a missing object is no_such_object for head, read and map") {
    std::vector<std::byte> out(4);
    (void)s.head(obj, ec);
    CHECK(ec == errc::no_such_object);
    CHECK(s.read(obj, 0, out, ec) == 0);
    CHECK(ec == errc::no_such_object);
    (void)s.map(obj, ec);
    CHECK(ec == errc::no_such_object);
  }
  SUBCASE("an invalid key is invalid_name at begin_put") {
    (void)s.begin_put({"conf", ""}, ec);
    CHECK(ec == errc::invalid_name);
    (void)s.begin_put({"conf", std::string(1025, 'k')}, ec);
    CHECK(ec == errc::invalid_name);
  }
  SUBCASE("an empty writer's write and commit are invalid_argument, and so is a second commit") {
    typename Fixture::store_type::writer_type empty{};
    const std::vector<std::byte> one{std::byte{1}};
    empty.write(one, ec);
    CHECK(ec == errc::invalid_argument);
    (void)empty.commit({}, ec);
    CHECK(ec == errc::invalid_argument);
    auto w = s.begin_put(obj, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    (void)w.commit({}, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    (void)w.commit({}, ec);
    CHECK(ec == errc::invalid_argument);
  }
  SUBCASE("ranged reads: inside, across the end, at the end and past it") {
    const auto data = testing::store_bytes(1000, 7);
    testing::put_object(s, obj, data);
    std::vector<std::byte> out(100);
    CHECK(s.read(obj, 200, out, ec) == 100);
    CHECK_MESSAGE(!ec, ec.message());
    CHECK(testing::same_bytes(out, std::span(data).subspan(200, 100)));
    CHECK(s.read(obj, 950, out, ec) == 50);
    CHECK_MESSAGE(!ec, ec.message());
    CHECK(testing::same_bytes(std::span(out).first(50), std::span(data).subspan(950)));
    ec = errc::invalid_argument;
    CHECK(s.read(obj, 1000, out, ec) == 0);
    CHECK_MESSAGE(!ec, ec.message());
    ec = errc::invalid_argument;
    CHECK(s.read(obj, 5000, out, ec) == 0);
    CHECK_MESSAGE(!ec, ec.message());
  }
  SUBCASE("remove: the object is gone; a second remove is no_such_object (or succeeds, per traits)") {
    testing::put_object(s, obj, testing::store_bytes(10, 1));
    s.remove(obj, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    (void)s.head(obj, ec);
    CHECK(ec == errc::no_such_object);
    s.remove(obj, ec);
    if constexpr (traits::remove_missing_is_error) {
      CHECK(ec == errc::no_such_object);
    } else {
      CHECK_MESSAGE(!ec, ec.message());
    }
  }
}

TEST_CASE_TEMPLATE_DEFINE("object_store conformance: atomic publish", Fixture, object_store_publish) {
  using namespace sluice;
  Fixture f;
  auto& s = f.store();
  error_code ec;
  s.create_bucket("conf", ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  const object_ref obj{"conf", "atomic"};
  const auto v1 = testing::store_bytes(3000, 1);
  const auto v2 = testing::store_bytes(5000, 2);

  SUBCASE("an uncommitted writer is invisible, and its destruction discards it") {
    {
      auto w = s.begin_put(obj, ec);
      REQUIRE_MESSAGE(!ec, ec.message());
      w.write(v1, ec);
      REQUIRE_MESSAGE(!ec, ec.message());
      (void)s.head(obj, ec);
      CHECK(ec == errc::no_such_object);
      CHECK(s.list(testing::listing("conf"), ec).objects.empty());
    }
    (void)s.head(obj, ec);
    CHECK(ec == errc::no_such_object);
    CHECK(s.list(testing::listing("conf"), ec).objects.empty());
    s.remove_bucket("conf", ec);  // nothing was left behind
    CHECK_MESSAGE(!ec, ec.message());
  }
  SUBCASE("a replacement is invisible until its commit, then whole") {
    testing::put_object(s, obj, v1);
    auto w = s.begin_put(obj, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    w.write(v2, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    CHECK(s.head(obj, ec).size == v1.size());
    CHECK(testing::same_bytes(testing::read_object(s, obj), v1));
    (void)w.commit({}, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    CHECK(testing::same_bytes(testing::read_object(s, obj), v2));
  }
  SUBCASE("a mapping keeps its version after the object is replaced, then removed") {
    const auto big1 = testing::store_bytes(200000, 3);  // mapped, not copied, by fs_store
    for (const auto* first : {&v1, &big1}) {
      CAPTURE(first->size());
      testing::put_object(s, obj, *first);
      const auto m = s.map(obj, ec);
      REQUIRE_MESSAGE(!ec, ec.message());
      testing::put_object(s, obj, v2);
      CHECK(testing::same_bytes(testing::read_object(s, obj), v2));
      CHECK(m.info().size == first->size());
      CHECK(testing::same_bytes(testing::mapped_bytes(m), *first));
      s.remove(obj, ec);
      REQUIRE_MESSAGE(!ec, ec.message());
      CHECK(testing::same_bytes(testing::mapped_bytes(m), *first));
    }
  }
}

TEST_CASE_TEMPLATE_DEFINE("object_store conformance: list", Fixture, object_store_list) {
  using namespace sluice;
  Fixture f;
  auto& s = f.store();
  error_code ec;
  s.create_bucket("conf", ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  const std::vector<std::string> keys{"a", "b", "b/1", "b/2", "b/3", "c"};
  for (std::size_t i = 0; i < keys.size(); ++i) {
    testing::put_object(s, {"conf", keys[i]}, testing::store_bytes(i + 1, static_cast<std::uint32_t>(i)));
  }
  auto listed = [&](const list_request& req, bool* truncated = nullptr) {
    const list_result r = s.list(req, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    std::vector<std::string> out;
    for (const object_info& o : r.objects) out.push_back(o.key);
    if (truncated != nullptr) *truncated = r.truncated;
    return out;
  };

  SUBCASE("all keys in order, with their sizes") {
    CHECK(listed(testing::listing("conf")) == keys);
    const list_result r = s.list(testing::listing("conf"), ec);
    REQUIRE(r.objects.size() == keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) CHECK(r.objects[i].size == i + 1);
    CHECK_FALSE(r.truncated);
  }
  SUBCASE("a prefix, and start_after before, inside and past it") {
    CHECK(listed(testing::listing("conf", "b/")) == std::vector<std::string>{"b/1", "b/2", "b/3"});
    CHECK(listed(testing::listing("conf", "b")) == std::vector<std::string>{"b", "b/1", "b/2", "b/3"});
    CHECK(listed(testing::listing("conf", "b", "a")) == std::vector<std::string>{"b", "b/1", "b/2", "b/3"});
    CHECK(listed(testing::listing("conf", "b/", "b/1")) == std::vector<std::string>{"b/2", "b/3"});
    CHECK(listed(testing::listing("conf", "b/", "c")).empty());
    CHECK(listed(testing::listing("conf", "zzz")).empty());
  }
  SUBCASE("max_keys pages, continued with start_after = the last key") {
    std::vector<std::string> all;
    std::string after;
    for (int page = 0; page < 10; ++page) {
      bool truncated = false;
      const auto got = listed(testing::listing("conf", "", after, 4), &truncated);
      CHECK(got.size() <= 4);
      all.insert(all.end(), got.begin(), got.end());
      if (!truncated) break;
      REQUIRE_FALSE(got.empty());
      after = got.back();
    }
    CHECK(all == keys);
    bool truncated = true;
    CHECK(listed(testing::listing("conf", "", "", 6), &truncated).size() == 6);
    CHECK_FALSE(truncated);
  }
}

TEST_CASE_TEMPLATE_DEFINE("object_store conformance: multipart", Fixture, object_store_multipart) {
  using namespace sluice;
  using traits = typename Fixture::traits;
  Fixture f;
  auto& s = f.store();
  error_code ec;
  s.create_bucket("conf", ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  const object_ref obj{"conf", "multi"};
  object_attributes attrs;
  attrs.content_type = "application/x-parts";
  const std::string id = s.create_upload(obj, attrs, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  REQUIRE_FALSE(id.empty());
  const std::vector<std::vector<std::byte>> data{testing::store_bytes(7000, 11), testing::store_bytes(3, 12),
                                                 testing::store_bytes(4096, 13)};
  std::vector<part_info> parts;
  for (std::uint32_t n = 1; n <= 3; ++n) {
    auto w = s.begin_part(obj, id, n, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    w.write(data[n - 1], ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    const object_info info = w.commit(testing::with_etag("part-" + std::to_string(n)), ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    CHECK(info.size == data[n - 1].size());
    parts.push_back({n, info.size, info.attributes.etag, {}, {}});
  }

  SUBCASE("parts and uploads are listed; completion publishes the chosen parts and ends the upload") {
    const auto listed = s.list_parts(obj, id, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    REQUIRE(listed.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) {
      CHECK(listed[i].number == i + 1);
      CHECK(listed[i].size == data[i].size());
      CHECK(listed[i].etag == parts[i].etag);
    }
    const auto uploads = s.list_uploads("conf", "", ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    REQUIRE(uploads.size() == 1);
    CHECK(uploads[0].key == obj.key);
    CHECK(uploads[0].upload_id == id);
    CHECK(s.list_uploads("conf", "other", ec).empty());
    (void)s.head(obj, ec);
    CHECK(ec == errc::no_such_object);  // nothing published before completion

    const std::vector<part_info> chosen{parts[0], parts[2]};  // part 2 left out
    object_attributes final_attrs = attrs;
    final_attrs.etag = "whole-2";
    const object_info done = s.complete_upload(obj, id, chosen, final_attrs, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    CHECK(done.size == data[0].size() + data[2].size());
    if constexpr (traits::keeps_given_etag) CHECK(done.attributes.etag == "whole-2");
    std::vector<std::byte> expected = data[0];
    expected.insert(expected.end(), data[2].begin(), data[2].end());
    CHECK(testing::same_bytes(testing::read_object(s, obj), expected));
    CHECK(s.head(obj, ec).attributes.content_type == "application/x-parts");
    (void)s.list_parts(obj, id, ec);
    CHECK(ec == errc::no_such_upload);
    CHECK(s.list_uploads("conf", "", ec).empty());
  }
  SUBCASE("a part committed again replaces the earlier one") {
    auto w = s.begin_part(obj, id, 2, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    const auto again = testing::store_bytes(10, 99);
    w.write(again, ec);
    const object_info info = w.commit(testing::with_etag("part-2b"), ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    const auto listed = s.list_parts(obj, id, ec);
    REQUIRE(listed.size() == 3);
    CHECK(listed[1].size == again.size());
    CHECK(listed[1].etag == info.attributes.etag);
  }
  SUBCASE("completion errors leave the upload as it was") {
    const std::vector<part_info> reversed{parts[1], parts[0]};
    (void)s.complete_upload(obj, id, reversed, attrs, ec);
    CHECK(ec == errc::invalid_part_order);
    std::vector<part_info> wrong_etag{parts[0]};
    wrong_etag[0].etag = "not-the-etag";
    (void)s.complete_upload(obj, id, wrong_etag, attrs, ec);
    CHECK(ec == errc::invalid_part);
    const std::vector<part_info> missing{parts[0], part_info{4, 1, "part-4", {}, {}}};
    (void)s.complete_upload(obj, id, missing, attrs, ec);
    CHECK(ec == errc::invalid_part);
    (void)s.complete_upload(obj, "no-such-upload", parts, attrs, ec);
    CHECK(ec == errc::no_such_upload);
    (void)s.head(obj, ec);
    CHECK(ec == errc::no_such_object);
    CHECK(s.list_parts(obj, id, ec).size() == 3);
  }
  SUBCASE("abort removes the upload and its parts; unknown uploads are no_such_upload") {
    s.abort_upload(obj, id, ec);
    CHECK_MESSAGE(!ec, ec.message());
    (void)s.list_parts(obj, id, ec);
    CHECK(ec == errc::no_such_upload);
    CHECK(s.list_uploads("conf", "", ec).empty());
    s.abort_upload(obj, id, ec);
    CHECK(ec == errc::no_such_upload);
    (void)s.begin_part(obj, id, 1, ec);
    CHECK(ec == errc::no_such_upload);
    s.remove_bucket("conf", ec);  // no part left behind
    CHECK_MESSAGE(!ec, ec.message());
  }
  SUBCASE("a missing bucket is no_such_bucket") {
    (void)s.create_upload({"conf-missing", "k"}, attrs, ec);
    CHECK(ec == errc::no_such_bucket);
    CHECK(s.list_uploads("conf-missing", "", ec).empty());
    CHECK(ec == errc::no_such_bucket);
  }
}

/// Runs every case of the suite for each fixture.
#define SLUICE_OBJECT_STORE_CONFORMANCE(...)                    \
  TEST_CASE_TEMPLATE_INVOKE(object_store_buckets, __VA_ARGS__); \
  TEST_CASE_TEMPLATE_INVOKE(object_store_objects, __VA_ARGS__); \
  TEST_CASE_TEMPLATE_INVOKE(object_store_publish, __VA_ARGS__); \
  TEST_CASE_TEMPLATE_INVOKE(object_store_list, __VA_ARGS__);    \
  TEST_CASE_TEMPLATE_INVOKE(object_store_multipart, __VA_ARGS__)
