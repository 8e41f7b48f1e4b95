#include <sluice/s3/gateway_store.hpp>

#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

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
}

TEST_CASE("gateway cache_index: names split back into bucket and key, slashes in the key kept") {
  const sluice::object_ref object{"bucket", "dir/sub/key"};
  CHECK(cache_index::name_of(object) == "bucket/dir/sub/key");
  CHECK(cache_index::object_of("bucket/dir/sub/key") == object);
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
}

TEST_CASE("gateway_store: open with an invalid config fails with invalid_config") {
  sluice::error_code ec;
  sluice::s3::gateway_store_config config;
  CHECK(sluice::s3::gateway_store::open(config, ec) == nullptr);
  CHECK(ec == sluice::errc::invalid_config);
}
