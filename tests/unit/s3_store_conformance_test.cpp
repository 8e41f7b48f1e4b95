// SPDX-License-Identifier: Apache-2.0
// The object_store conformance suite (conformance/object_store_conformance.hpp) for every store
// the library ships: memory_store, fs_store in a scratch directory, and gateway_store over a real
// upstream (an s3::server over a memory_store on 127.0.0.1).
#include <sluice/memory_store.hpp>
#include <sluice/s3/fs_store.hpp>
#include <sluice/s3/gateway_store.hpp>

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "conformance/object_store_conformance.hpp"
#include "conformance/s3_fixtures.hpp"
#include "unit/temp_dir.hpp"

namespace {

using namespace sluice;

struct memory_store_fixture {
  using store_type = memory_store;
  using traits = testing::object_store_traits;
  store_type& store() { return store_; }
  memory_store store_;
};

struct fs_store_fixture {
  using store_type = s3::fs_store;
  using traits = testing::object_store_traits;
  store_type& store() { return store_; }
  testing::temp_dir dir{"sluice-fs-conformance"};
  s3::fs_store store_{config(dir)};
  static s3::fs_store_config config(const testing::temp_dir& dir) {
    s3::fs_store_config c;
    c.root = dir.path();
    c.fsync = false;
    return c;
  }
};

struct gateway_store_fixture {
  using store_type = s3::gateway_store;
  struct traits : testing::object_store_traits {
    static constexpr bool remove_missing_is_error = false;    // an S3 DELETE of a missing key succeeds
    static constexpr bool keeps_given_etag = false;           // the upstream's ETag
    static constexpr bool recreate_is_bucket_exists = false;  // the upstream answers its owner 200
    static constexpr bool reads_tell_missing_bucket = false;  // a HEAD's 404 has no body
  };
  gateway_store_fixture() {
    s3::gateway_store_config config;
    config.root = dir.path();
    config.upstream.endpoint = "http://127.0.0.1:" + std::to_string(upstream.server.local_endpoint().port());
    config.upstream.creds = {"AK", "SK"};
    config.cache_bytes = std::uint64_t{64} << 20;
    config.chunk_bytes = std::uint64_t{1} << 20;
    config.fsync = false;
    error_code ec;
    store_ = s3::gateway_store::open(config, ec);
    REQUIRE_MESSAGE(store_ != nullptr, ec.message());
  }
  store_type& store() { return *store_; }
  testing::s3_memory_server upstream;  // holds a bucket "bkt" of its own
  testing::temp_dir dir{"sluice-gateway-conformance"};
  std::unique_ptr<s3::gateway_store> store_;
};

}  // namespace

TYPE_TO_STRING(memory_store_fixture);
TYPE_TO_STRING(fs_store_fixture);
TYPE_TO_STRING(gateway_store_fixture);

SLUICE_OBJECT_STORE_CONFORMANCE(memory_store_fixture, fs_store_fixture, gateway_store_fixture);

// The cases above make their buckets through the store. A bucket only the upstream has (made
// before this gateway saw it) is asked about, not refused.
TEST_CASE("gateway_store conformance: a bucket only the upstream has takes PUTs and lists no uploads") {
  gateway_store_fixture fixture;
  auto& s = fixture.store();
  error_code ec;
  CHECK(s.list_uploads("bkt", "", ec).empty());
  CHECK_MESSAGE(!ec, ec.message());
  auto w = s.begin_put({"bkt", "k"}, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  const auto bytes = testing::store_bytes(100, 7);
  w.write(bytes, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  (void)w.commit({}, ec);
  REQUIRE_MESSAGE(!ec, ec.message());
  CHECK(s.head({"bkt", "k"}, ec).size == 100);
  CHECK_MESSAGE(!ec, ec.message());
  (void)s.begin_put({"bkt-missing", "k"}, ec);  // the upstream is asked again for another bucket
  CHECK(ec == errc::no_such_bucket);
}
