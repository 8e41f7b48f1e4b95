// SPDX-License-Identifier: Apache-2.0
#include <sluice/s3/fs_store.hpp>

#include <sluice/memory_store.hpp>

#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
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

namespace fs = std::filesystem;
using sluice::error_code;
using sluice::object_ref;
using sluice::part_info;
using sluice::s3::fs_store;
using sluice::s3::fs_store_config;
// Inside tests, sluice::errc (the store's conditions) and not sluice::s3::errc (S3 codes).
using errc = sluice::errc;

static_assert(sluice::object_store<fs_store>);
static_assert(sluice::mappable_store<fs_store>);
static_assert(sluice::multipart_store<fs_store>);
static_assert(sluice::servable_store<fs_store>);
static_assert(!std::is_copy_constructible_v<fs_store::writer>);
static_assert(!std::is_copy_constructible_v<fs_store::mapping>);
static_assert(!std::is_copy_constructible_v<fs_store>);

// A fresh directory under the system temp directory, removed with everything in it at the
// end of the test. The store's root is <dir>/root, so that the test can check that nothing
// was created beside it.
class temp_root {
 public:
  temp_root() {
    static std::atomic<unsigned> counter{0};
    std::random_device random;
    dir_ = fs::temp_directory_path() / ("sluice-fs-store-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(counter++) + "-" + std::to_string(random()));
    fs::create_directories(dir_);
  }
  temp_root(const temp_root&) = delete;
  temp_root& operator=(const temp_root&) = delete;
  ~temp_root() {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  [[nodiscard]] fs::path root() const { return dir_ / "root"; }
  [[nodiscard]] fs::path dir() const { return dir_; }
  [[nodiscard]] fs_store_config config(bool sync = true) const { return {root(), 5ULL << 40, sync}; }

 private:
  fs::path dir_;
};

std::span<const std::byte> as_bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

sluice::object_info put(fs_store& store, const object_ref& object, std::string_view data,
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

std::string read_all(const fs_store& store, const object_ref& object) {
  error_code ec;
  const auto info = store.head(object, ec);
  REQUIRE_FALSE(ec);
  std::string out(info.size, '\0');
  const std::size_t n = store.read(object, 0, std::as_writable_bytes(std::span(out.data(), out.size())), ec);
  REQUIRE_FALSE(ec);
  CHECK(n == info.size);
  return out;
}

std::string mapped_string(const fs_store::mapping& m) {
  const sluice::const_region r = m.region();
  return {static_cast<const char*>(r.data), r.size};
}

sluice::list_request listing(std::string bucket, std::string prefix = "", std::string start_after = "",
                             std::uint32_t max_keys = 1000) {
  return {std::move(bucket), std::move(prefix), std::move(start_after), max_keys};
}

std::vector<std::string> keys_of(const sluice::list_result& r) {
  std::vector<std::string> out;
  for (const auto& o : r.objects) out.push_back(o.key);
  return out;
}

void make_bucket(fs_store& store, std::string_view bucket = "bucket") {
  error_code ec;
  store.create_bucket(bucket, ec);
  REQUIRE_FALSE(ec);
}

std::size_t count_entries(const fs::path& dir) {
  return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

std::string file_contents(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Every object file under <root>/buckets/<bucket>/objects.
std::vector<fs::path> object_files(const fs::path& root, std::string_view bucket) {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(root / "buckets" / std::string(bucket) / "objects")) {
    if (e.is_regular_file()) out.push_back(e.path());
  }
  return out;
}

bool is_lower_hex(std::string_view s, std::size_t n) {
  return s.size() == n && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// Checks that the tree under the root has only the documented shape, and that nothing but
// the root was created in its parent directory.
void check_layout(const temp_root& root) {
  CHECK(count_entries(root.dir()) == 1);
  for (const auto& e : fs::recursive_directory_iterator(root.root())) {
    CHECK_FALSE(e.is_symlink());
    const fs::path rel = e.path().lexically_relative(root.root());
    std::vector<std::string> parts;
    for (const auto& p : rel) parts.push_back(p.string());
    INFO("path: " << rel.string());
    REQUIRE_FALSE(parts.empty());
    const std::string& top = parts[0];
    CHECK((top == "lock" || top == "tmp" || top == "buckets"));
    if (top != "buckets" || parts.size() < 3) continue;
    CHECK(sluice::is_valid_bucket_name(parts[1]));
    const std::string& kind = parts[2];
    CHECK((kind == "bucket.json" || kind == "objects" || kind == "uploads"));
    if (kind == "objects") {
      if (parts.size() >= 4) CHECK(is_lower_hex(parts[3], 2));
      if (parts.size() >= 5) CHECK(is_lower_hex(parts[4], 64));
      CHECK(parts.size() <= 5);
    } else if (kind == "uploads") {
      if (parts.size() >= 4) CHECK(is_lower_hex(parts[3], 32));
      if (parts.size() >= 5) CHECK((parts[4] == "upload.json" || parts[4].starts_with("part-")));
      CHECK(parts.size() <= 5);
    }
  }
}

}  // namespace

TEST_CASE("fs_store: configuration is validated") {
  CHECK_THROWS_AS(fs_store(fs_store_config{}), std::invalid_argument);
  temp_root root;
  CHECK_THROWS_WITH_AS(fs_store(fs_store_config{root.root(), 0, true}), "max_object_bytes: must be at least 1",
                       std::invalid_argument);
  CHECK_THROWS_AS(fs_store(fs_store_config{root.root(), (1ULL << 62) + 1, true}), std::invalid_argument);
  error_code ec;
  CHECK(fs_store::open(fs_store_config{}, ec) == nullptr);
  CHECK(ec == errc::invalid_config);
  CHECK(fs_store_config{}.validate()->field == "root");

  auto store = fs_store::open(root.config(), ec);
  REQUIRE_FALSE(ec);
  REQUIRE(store != nullptr);
  CHECK(store->config().root == root.root());
  CHECK(fs::is_directory(root.root() / "buckets"));
  CHECK(fs::is_directory(root.root() / "tmp"));
}

TEST_CASE("fs_store: one store per root at a time") {
  temp_root root;
  error_code ec;
  {
    fs_store first(root.config());
    CHECK(fs_store::open(root.config(), ec) == nullptr);
    CHECK(ec == boost::system::errc::resource_unavailable_try_again);
    CHECK_THROWS_AS(fs_store(root.config()), sluice::system_error);
  }
  CHECK(fs_store::open(root.config(), ec) != nullptr);
  CHECK_FALSE(ec);
}

TEST_CASE("fs_store: buckets: create, exists, remove, list") {
  temp_root root;
  fs_store store(root.config());
  error_code ec;
  store.create_bucket("alpha", ec);
  CHECK_FALSE(ec);
  store.create_bucket("alpha", ec);
  CHECK(ec == errc::bucket_exists);
  for (const char* bad : {"Bad_Name", "ab", "10.0.0.1", "..", "a/b/c", "../etc"}) {
    store.create_bucket(bad, ec);
    CHECK(ec == errc::invalid_name);
  }
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
  CHECK_FALSE(fs::exists(root.root() / "buckets" / "alpha"));
  CHECK(count_entries(root.root() / "tmp") == 0);
  store.create_bucket("alpha", ec);
  CHECK_FALSE(ec);

  for (const char* name : {"delta", "charlie", "bravo", "alpha-2"}) make_bucket(store, name);
  std::vector<std::string> names;
  for (const auto& b : store.list_buckets(ec)) {
    names.push_back(b.name);
    CHECK(b.created.time_since_epoch().count() != 0);
  }
  CHECK_FALSE(ec);
  CHECK(names == std::vector<std::string>{"alpha", "alpha-2", "bravo", "charlie", "delta"});
  check_layout(root);
}

TEST_CASE("fs_store: put through a writer, then head, read and map") {
  temp_root root;
  fs_store store(root.config());
  make_bucket(store);
  sluice::object_attributes attributes;
  attributes.etag = "etag-1";
  attributes.content_type = "text/plain";
  attributes.content_encoding = "gzip";
  attributes.content_disposition = "attachment; filename=\"x.txt\"";
  attributes.cache_control = "no-cache";
  attributes.metadata = {{"owner", "tests"}, {"empty", ""}};
  attributes.checksums = {{"crc32c", "yZRlqg=="}};

  error_code ec;
  auto writer = store.begin_put({"bucket", "dir/key"}, ec);
  REQUIRE_FALSE(ec);
  CHECK(writer.native_handle() >= 0);
  writer.write(as_bytes("hello "), ec);
  REQUIRE_FALSE(ec);
  writer.write(as_bytes("world"), ec);
  REQUIRE_FALSE(ec);
  (void)store.head({"bucket", "dir/key"}, ec);
  CHECK(ec == errc::no_such_object);
  CHECK(count_entries(root.root() / "tmp") == 1);

  const auto committed = writer.commit(attributes, ec);
  REQUIRE_FALSE(ec);
  CHECK(committed.key == "dir/key");
  CHECK(committed.size == 11);
  CHECK(committed.attributes == attributes);
  CHECK(count_entries(root.root() / "tmp") == 0);

  const auto info = store.head({"bucket", "dir/key"}, ec);
  REQUIRE_FALSE(ec);
  CHECK(info.key == "dir/key");
  CHECK(info.size == 11);
  CHECK(info.attributes == attributes);
  CHECK(info.last_modified == committed.last_modified);
  CHECK(info.last_modified.time_since_epoch().count() != 0);
  CHECK(read_all(store, {"bucket", "dir/key"}) == "hello world");

  const auto mapping = store.map({"bucket", "dir/key"}, ec);
  REQUIRE_FALSE(ec);
  CHECK(mapped_string(mapping) == "hello world");
  CHECK(mapping.region().kind == sluice::memory_kind::host_pageable);
  CHECK(mapping.info().size == 11);
  CHECK(mapping.info().attributes == attributes);
  CHECK(mapping.native_handle() == -1);  // read_all() above left the small object's bytes cached

  // The file: a header padded to 4096 bytes, then the data.
  const auto files = object_files(root.root(), "bucket");
  REQUIRE(files.size() == 1);
  const std::string raw = file_contents(files[0]);
  CHECK(raw.starts_with("SLUICEO1"));
  std::uint64_t offset = 0;
  const auto parsed = sluice::s3::parse_object_header(as_bytes(raw), offset, ec);
  REQUIRE_FALSE(ec);
  CHECK(offset == 4096);
  CHECK(raw.size() == offset + 11);
  CHECK(raw.substr(offset) == "hello world");
  CHECK(parsed.key == "dir/key");

  // A committed writer is spent.
  (void)writer.commit(attributes, ec);
  CHECK(ec == errc::invalid_argument);
  writer.write(as_bytes("x"), ec);
  CHECK(ec == errc::invalid_argument);
}

TEST_CASE("fs_store: writes of any size gather into aligned units, a failed write counts for nothing") {
  temp_root root;
  fs_store store(root.config());
  make_bucket(store);
  constexpr std::size_t mib = std::size_t{1} << 20;
  std::vector<std::byte> data(9 * mib + 12345);
  std::mt19937_64 rng(7);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  error_code ec;
  auto writer = store.begin_put({"bucket", "k"}, ec);
  REQUIRE_FALSE(ec);
  std::size_t at = 0;
  const auto write = [&](std::size_t n) {
    writer.write(std::span<const std::byte>(data).subspan(at, n), ec);
    if (!ec) at += n;
  };
  // The first unit boundary of the file lies 2 MiB - 4096 bytes into the data (the header
  // takes 4096): these stay gathered, nothing reaches the file yet.
  write(1);
  write(4095);
  write(mib);
  REQUIRE_FALSE(ec);
  // A file size limit makes the write that crosses the boundary fail (EFBIG): nothing of it
  // counts, and the same bytes written again later land where they belong.
  rlimit old{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
  const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  const auto limit = [&](rlim_t bytes) {
    rlimit r = old;
    r.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &r) == 0);
  };
  limit(mib);
  write(mib + mib / 2);
  CHECK(ec == std::errc::file_too_large);
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &old) == 0);
  write(mib + mib / 2);
  REQUIRE_FALSE(ec);
  // Now mid-unit; fill to the next boundary, then a whole-unit write goes straight to the file
  // (no gathering): make that one fail too.
  write(2 * mib - ((4096 + at) % (2 * mib)));
  REQUIRE_FALSE(ec);
  CHECK((4096 + at) % (2 * mib) == 0);
  limit(4096 + at + 4096);
  write(4 * mib + 3);
  CHECK(ec == std::errc::file_too_large);
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &old) == 0);
  ::signal(SIGXFSZ, old_handler);
  while (at < data.size()) {
    write(std::min<std::size_t>(data.size() - at, 3 * mib + 17));
    REQUIRE_FALSE(ec);
  }
  const auto info = writer.commit({}, ec);
  REQUIRE_FALSE(ec);
  CHECK(info.size == data.size());
  const auto mapping = store.map({"bucket", "k"}, ec);
  REQUIRE_FALSE(ec);
  const auto bytes = mapping.region();
  REQUIRE(bytes.size == data.size());
  CHECK(std::memcmp(bytes.data, data.data(), data.size()) == 0);
  // The file holds the header and the data, nothing a failed write left past them.
  CHECK(fs::file_size(object_files(root.root(), "bucket").at(0)) == 4096 + data.size());
}

TEST_CASE("fs_store: empty objects, reads at offsets, missing objects and buckets") {
  temp_root root;
  fs_store store(root.config(false));
  make_bucket(store);
  error_code ec;
  {
    auto writer = store.begin_put({"bucket", "empty"}, ec);
    (void)writer.commit({}, ec);
    REQUIRE_FALSE(ec);
  }
  CHECK(store.head({"bucket", "empty"}, ec).size == 0);
  std::array<std::byte, 4> small{};
  CHECK(store.read({"bucket", "empty"}, 0, small, ec) == 0);
  CHECK_FALSE(ec);
  const auto empty_mapping = store.map({"bucket", "empty"}, ec);
  REQUIRE_FALSE(ec);
  CHECK(empty_mapping.region().size == 0);
  CHECK(empty_mapping.info().key == "empty");

  put(store, {"bucket", "k"}, "0123456789");
  std::array<char, 4> out{};
  auto bytes = std::as_writable_bytes(std::span(out));
  CHECK(store.read({"bucket", "k"}, 0, bytes, ec) == 4);
  CHECK(std::string_view(out.data(), 4) == "0123");
  CHECK(store.read({"bucket", "k"}, 3, bytes, ec) == 4);
  CHECK(std::string_view(out.data(), 4) == "3456");
  out.fill('.');
  CHECK(store.read({"bucket", "k"}, 8, bytes, ec) == 2);
  CHECK(std::string_view(out.data(), 4) == "89..");
  CHECK(store.read({"bucket", "k"}, 10, bytes, ec) == 0);
  CHECK_FALSE(ec);
  CHECK(store.read({"bucket", "k"}, std::numeric_limits<std::uint64_t>::max(), bytes, ec) == 0);
  CHECK_FALSE(ec);
  CHECK(store.read({"bucket", "k"}, 2, std::span<std::byte>{}, ec) == 0);
  CHECK_FALSE(ec);

  (void)store.head({"bucket", "nope"}, ec);
  CHECK(ec == errc::no_such_object);
  (void)store.head({"nobucket", "k"}, ec);
  CHECK(ec == errc::no_such_bucket);
  CHECK(store.read({"bucket", "nope"}, 0, bytes, ec) == 0);
  CHECK(ec == errc::no_such_object);
  CHECK(store.read({"nobucket", "k"}, 0, bytes, ec) == 0);
  CHECK(ec == errc::no_such_bucket);
  const auto missing = store.map({"bucket", "nope"}, ec);
  CHECK(ec == errc::no_such_object);
  CHECK(missing.region() == sluice::const_region{});
  (void)store.map({"../bucket", "k"}, ec);
  CHECK(ec == errc::no_such_bucket);
  store.remove({"bucket", "nope"}, ec);
  CHECK(ec == errc::no_such_object);
  store.remove({"nobucket", "k"}, ec);
  CHECK(ec == errc::no_such_bucket);
  (void)store.list(listing("nobucket"), ec);
  CHECK(ec == errc::no_such_bucket);

  auto empty_key = store.begin_put({"bucket", ""}, ec);
  CHECK(ec == errc::invalid_name);
  empty_key.write(as_bytes("x"), ec);
  CHECK(ec == errc::invalid_argument);
  (void)store.begin_put({"bucket", std::string(1025, 'k')}, ec);
  CHECK(ec == errc::invalid_name);
  auto no_bucket = store.begin_put({"nobucket", "k"}, ec);
  CHECK(ec == errc::no_such_bucket);
  (void)no_bucket.commit({}, ec);
  CHECK(ec == errc::invalid_argument);
}

TEST_CASE("fs_store: overwrite is atomic and a held mapping or reader keeps the old version") {
  temp_root root;
  fs_store store(root.config());
  make_bucket(store);
  put(store, {"bucket", "k"}, "old contents", sluice::object_attributes{.etag = "etag-old"});
  error_code ec;
  const auto old_mapping = store.map({"bucket", "k"}, ec);
  REQUIRE_FALSE(ec);

  auto writer = store.begin_put({"bucket", "k"}, ec);
  REQUIRE_FALSE(ec);
  writer.write(as_bytes("new!"), ec);
  REQUIRE_FALSE(ec);
  CHECK(read_all(store, {"bucket", "k"}) == "old contents");
  (void)writer.commit(sluice::object_attributes{.etag = "etag-new"}, ec);
  REQUIRE_FALSE(ec);

  CHECK(read_all(store, {"bucket", "k"}) == "new!");
  CHECK(store.head({"bucket", "k"}, ec).attributes.etag == "etag-new");
  CHECK(mapped_string(old_mapping) == "old contents");
  CHECK(old_mapping.info().attributes.etag == "etag-old");
  CHECK(object_files(root.root(), "bucket").size() == 1);

  auto new_mapping = store.map({"bucket", "k"}, ec);
  store.remove({"bucket", "k"}, ec);
  REQUIRE_FALSE(ec);
  CHECK(object_files(root.root(), "bucket").empty());
  CHECK(mapped_string(new_mapping) == "new!");
  (void)store.head({"bucket", "k"}, ec);
  CHECK(ec == errc::no_such_object);

  // Mappings move; the moved-from one is empty.
  fs_store::mapping moved(std::move(new_mapping));
  CHECK(mapped_string(moved) == "new!");
  CHECK(new_mapping.region() == sluice::const_region{});  // NOLINT(bugprone-use-after-move)
}

TEST_CASE("fs_store: a small object's bytes are read once and kept within small_object_cache_bytes") {
  temp_root root;
  fs_store_config config = root.config();
  config.small_object_cache_bytes = 10000;
  fs_store store(config);
  make_bucket(store);
  const std::string a(4000, 'a'), b(4000, 'b'), c(4000, 'c');
  put(store, {"bucket", "a"}, a);
  put(store, {"bucket", "b"}, b);
  put(store, {"bucket", "c"}, c);
  CHECK(store.cached_small_bytes() == 0);
  error_code ec;
  // The first map reads the file (and keeps the bytes); the next opens nothing.
  auto first = store.map({"bucket", "a"}, ec);
  REQUIRE_FALSE(ec);
  CHECK(first.native_handle() >= 0);
  CHECK(mapped_string(first) == a);
  auto again = store.map({"bucket", "a"}, ec);
  REQUIRE_FALSE(ec);
  CHECK(again.native_handle() == -1);
  CHECK(mapped_string(again) == a);
  CHECK(read_all(store, {"bucket", "b"}) == b);  // read() caches too
  CHECK(store.map({"bucket", "b"}, ec).native_handle() == -1);
  CHECK(store.cached_small_bytes() == 8000);
  // No room for c: read at every map, never cached, never over the budget.
  for (int i = 0; i < 2; ++i) {
    const auto m = store.map({"bucket", "c"}, ec);
    REQUIRE_FALSE(ec);
    CHECK(m.native_handle() >= 0);
    CHECK(mapped_string(m) == c);
  }
  CHECK(store.cached_small_bytes() == 8000);
  // A new version is what later maps and reads see; a mapping of the old one keeps its bytes.
  put(store, {"bucket", "a"}, "new a");
  CHECK(mapped_string(store.map({"bucket", "a"}, ec)) == "new a");
  CHECK(read_all(store, {"bucket", "a"}) == "new a");
  CHECK(mapped_string(again) == a);
  CHECK(again.info().size == 4000);
  again = {};
  CHECK(store.cached_small_bytes() == 8000 + 5);  // held by `first` still
  first = {};
  CHECK(store.cached_small_bytes() == 4000 + 5);  // the old version's bytes went with it
  store.remove({"bucket", "a"}, ec);
  store.remove({"bucket", "b"}, ec);
  REQUIRE_FALSE(ec);
  CHECK(store.cached_small_bytes() == 0);
  // describe(): the version without its bytes, no file opened, nothing cached.
  const auto described = store.describe({"bucket", "c"}, ec);
  REQUIRE_FALSE(ec);
  CHECK(described.info().size == 4000);
  CHECK(described.native_handle() == -1);
  CHECK(described.region().size == 0);
  (void)store.describe({"bucket", "nothing"}, ec);
  CHECK(ec == errc::no_such_object);
  // Above small_object_bytes, objects are mapped, never cached.
  const std::string big(fs_store::small_object_bytes + 1, 'x');
  put(store, {"bucket", "big"}, big);
  CHECK(mapped_string(store.map({"bucket", "big"}, ec)) == big);
  CHECK(store.cached_small_bytes() == 0);
}

TEST_CASE("fs_store: abandoned writers leave nothing, moved writers carry the file") {
  temp_root root;
  fs_store store(root.config(false));
  make_bucket(store);
  put(store, {"bucket", "keep"}, "12345");
  error_code ec;
  {
    auto writer = store.begin_put({"bucket", "dropped"}, ec);
    writer.write(as_bytes(std::string(100000, 'x')), ec);
    REQUIRE_FALSE(ec);
    CHECK(count_entries(root.root() / "tmp") == 1);
  }
  CHECK(count_entries(root.root() / "tmp") == 0);
  (void)store.head({"bucket", "dropped"}, ec);
  CHECK(ec == errc::no_such_object);
  {
    auto writer = store.begin_put({"bucket", "keep"}, ec);
    writer.write(as_bytes("abc"), ec);
  }
  CHECK(read_all(store, {"bucket", "keep"}) == "12345");

  auto a = store.begin_put({"bucket", "a"}, ec);
  a.write(as_bytes("aaaa"), ec);
  fs_store::writer moved(std::move(a));
  a.write(as_bytes("x"), ec);  // NOLINT(bugprone-use-after-move): the moved-from writer is empty
  CHECK(ec == errc::invalid_argument);
  auto b = store.begin_put({"bucket", "b"}, ec);
  b.write(as_bytes("bb"), ec);
  CHECK(count_entries(root.root() / "tmp") == 2);
  b = std::move(moved);
  CHECK(count_entries(root.root() / "tmp") == 1);
  (void)b.commit({}, ec);
  REQUIRE_FALSE(ec);
  CHECK(read_all(store, {"bucket", "a"}) == "aaaa");
  (void)store.head({"bucket", "b"}, ec);
  CHECK(ec == errc::no_such_object);
  CHECK(count_entries(root.root() / "tmp") == 0);
}

TEST_CASE("fs_store: capacity_exceeded over max_object_bytes, commit after the bucket went away") {
  temp_root root;
  fs_store store(fs_store_config{root.root(), 10, false});
  make_bucket(store);
  error_code ec;
  auto writer = store.begin_put({"bucket", "k"}, ec);
  writer.write(as_bytes("12345678"), ec);
  REQUIRE_FALSE(ec);
  writer.write(as_bytes("abc"), ec);
  CHECK(ec == errc::capacity_exceeded);
  writer.write(as_bytes("ab"), ec);
  CHECK_FALSE(ec);
  writer.write(as_bytes("c"), ec);
  CHECK(ec == errc::capacity_exceeded);
  (void)writer.commit({}, ec);
  REQUIRE_FALSE(ec);
  CHECK(read_all(store, {"bucket", "k"}) == "12345678ab");

  make_bucket(store, "gone");
  auto orphan = store.begin_put({"gone", "k"}, ec);
  orphan.write(as_bytes("payload"), ec);
  REQUIRE_FALSE(ec);
  store.remove_bucket("gone", ec);
  REQUIRE_FALSE(ec);
  const auto info = orphan.commit({}, ec);
  CHECK(ec == errc::no_such_bucket);
  CHECK(info.key.empty());
  CHECK(count_entries(root.root() / "tmp") == 0);
  make_bucket(store, "gone");
  (void)store.head({"gone", "k"}, ec);
  CHECK(ec == errc::no_such_object);
}

TEST_CASE("fs_store: list filters by prefix and start_after, in key order, and pages") {
  temp_root root;
  fs_store store(root.config(false));
  make_bucket(store);
  for (const char* key : {"b/2", "a/1", "b/1", "c", "b/3", "a/2", "b"}) put(store, {"bucket", key}, key);
  error_code ec;
  const auto all = store.list(listing("bucket"), ec);
  CHECK_FALSE(ec);
  CHECK(keys_of(all) == std::vector<std::string>{"a/1", "a/2", "b", "b/1", "b/2", "b/3", "c"});
  CHECK_FALSE(all.truncated);
  CHECK(all.objects[0].size == 3);
  CHECK(keys_of(store.list(listing("bucket", "b/"), ec)) == std::vector<std::string>{"b/1", "b/2", "b/3"});
  CHECK(keys_of(store.list(listing("bucket", "b/", "b/1"), ec)) == std::vector<std::string>{"b/2", "b/3"});
  CHECK(keys_of(store.list(listing("bucket", "", "b/1"), ec)) == std::vector<std::string>{"b/2", "b/3", "c"});
  CHECK(keys_of(store.list(listing("bucket", "b", "a"), ec)) == std::vector<std::string>{"b", "b/1", "b/2", "b/3"});
  CHECK(keys_of(store.list(listing("bucket", "b/", "c"), ec)).empty());
  const auto limited = store.list(listing("bucket", "b/", "", 2), ec);
  CHECK(keys_of(limited) == std::vector<std::string>{"b/1", "b/2"});
  CHECK(limited.truncated);
  const auto exact = store.list(listing("bucket", "b/", "", 3), ec);
  CHECK_FALSE(exact.truncated);
  CHECK(store.list(listing("bucket", "", "", 0), ec).objects.empty());

  std::vector<std::string> seen;
  sluice::list_request request{"bucket", "", "", 3};
  for (int pages = 0; pages < 10; ++pages) {
    const auto page = store.list(request, ec);
    for (const auto& o : page.objects) seen.push_back(o.key);
    if (!page.truncated) break;
    request.start_after = page.objects.back().key;
  }
  CHECK(seen == keys_of(all));
}

TEST_CASE("fs_store: keys and attributes of any bytes round-trip and never become paths") {
  temp_root root;
  const std::vector<std::string> keys = {
      std::string("nul\0inside", 10),
      std::string(1, '\0'),
      "/",
      "//double//slash",
      "..",
      ".",
      "../../escape",
      "dir/../../../etc/passwd",
      "/absolute/path",
      std::string(1024, 'k'),
      std::string(1024, '/'),
      std::string(1024, '\xff'),
      "\xff\xfe\x80 invalid utf-8 \xc3",
      "\xed\xa0\x80 surrogate",
      "quote\" back\\slash {\"json\":1}",
      "control \x01\x1f\n\t\r\b\f",
      "unicode \xc3\xbc"
      "n\xc3\xaf"
      "c\xc3\xb6"
      "d\xc3\xa9 \xf0\x9f\x98\x80",
      "%2e%2e%2f",
      "a\\..\\b",
      "tmp",
      "lock",
  };
  {
    fs_store store(root.config(false));
    make_bucket(store);
    for (const auto& key : keys) {
      sluice::object_attributes attributes;
      attributes.etag = key.substr(0, 16);
      attributes.content_disposition = key;
      attributes.metadata = {{"key", key}, {std::string("\xff name", 6), "v"}};
      attributes.checksums = {{"sha256", std::string("\x00\x01", 2)}};
      put(store, {"bucket", key}, "data of " + key, attributes);
    }
    error_code ec;
    const auto listed = store.list(listing("bucket"), ec);
    REQUIRE_FALSE(ec);
    const std::set<std::string> expected(keys.begin(), keys.end());
    CHECK(keys_of(listed) == std::vector<std::string>(expected.begin(), expected.end()));
    for (const auto& key : keys) {
      CHECK(read_all(store, {"bucket", key}) == "data of " + key);
      const auto info = store.head({"bucket", key}, ec);
      CHECK(info.attributes.content_disposition == key);
      CHECK(info.attributes.metadata.at("key") == key);
    }
    CHECK(object_files(root.root(), "bucket").size() == keys.size());
    check_layout(root);
  }
  // The same after a reopen: every key and attribute read back from the headers.
  fs_store store(root.config(false));
  CHECK(store.skipped_files() == 0);
  error_code ec;
  CHECK(store.list(listing("bucket"), ec).objects.size() == keys.size());
  for (const auto& key : keys) {
    CHECK(read_all(store, {"bucket", key}) == "data of " + key);
    const auto info = store.head({"bucket", key}, ec);
    REQUIRE_FALSE(ec);
    CHECK(info.attributes.metadata.at("key") == key);
    CHECK(info.attributes.metadata.at(std::string("\xff name", 6)) == "v");
    CHECK(info.attributes.checksums.at("sha256") == std::string("\x00\x01", 2));
  }
  check_layout(root);
}

TEST_CASE("fs_store: a reopened store finds every bucket and object with identical info") {
  temp_root root;
  std::vector<sluice::bucket_info> buckets_before;
  std::vector<sluice::object_info> objects_before;
  {
    fs_store store(root.config());
    make_bucket(store, "one");
    make_bucket(store, "two");
    put(store, {"one", "a"}, "alpha", sluice::object_attributes{.etag = "e-a", .content_type = "text/plain"});
    put(store, {"one", "b/c"}, std::string(10000, 'b'),
        sluice::object_attributes{.etag = "e-b", .metadata = {{"m", "1"}}, .checksums = {{"crc32", "AAAAAA=="}}});
    put(store, {"two", "empty"}, "");
    put(store, {"one", "a"}, "alpha, again", sluice::object_attributes{.etag = "e-a2"});
    error_code ec;
    buckets_before = store.list_buckets(ec);
    for (const char* b : {"one", "two"}) {
      for (auto& o : store.list(listing(b), ec).objects) objects_before.push_back(std::move(o));
    }
  }
  fs_store store(root.config());
  error_code ec;
  const auto buckets_after = store.list_buckets(ec);
  REQUIRE(buckets_after.size() == buckets_before.size());
  for (std::size_t i = 0; i < buckets_after.size(); ++i) {
    CHECK(buckets_after[i].name == buckets_before[i].name);
    CHECK(buckets_after[i].created == buckets_before[i].created);
  }
  std::vector<sluice::object_info> objects_after;
  for (const char* b : {"one", "two"}) {
    for (auto& o : store.list(listing(b), ec).objects) objects_after.push_back(std::move(o));
  }
  REQUIRE(objects_after.size() == objects_before.size());
  for (std::size_t i = 0; i < objects_after.size(); ++i) {
    CHECK(objects_after[i].key == objects_before[i].key);
    CHECK(objects_after[i].size == objects_before[i].size);
    CHECK(objects_after[i].last_modified == objects_before[i].last_modified);
    CHECK(objects_after[i].attributes == objects_before[i].attributes);
  }
  CHECK(read_all(store, {"one", "a"}) == "alpha, again");
  CHECK(read_all(store, {"one", "b/c"}) == std::string(10000, 'b'));
  CHECK(store.skipped_files() == 0);
}

TEST_CASE("fs_store: attributes larger than the reserved header move the data") {
  temp_root root;
  fs_store store(root.config());
  make_bucket(store);
  std::string data(100000, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 % 251);
  sluice::object_attributes attributes;
  attributes.metadata = {{"big", std::string(20000, 'm')}, {"ctl", std::string(3000, '\x01')}};
  const std::string key(1024, 'k');
  put(store, {"bucket", key}, data, attributes);
  CHECK(read_all(store, {"bucket", key}) == data);
  error_code ec;
  CHECK(store.head({"bucket", key}, ec).attributes == attributes);
  const auto files = object_files(root.root(), "bucket");
  REQUIRE(files.size() == 1);
  const std::string raw = file_contents(files[0]);
  std::uint64_t offset = 0;
  (void)sluice::s3::parse_object_header(as_bytes(raw), offset, ec);
  REQUIRE_FALSE(ec);
  CHECK(offset % 4096 == 0);
  CHECK(offset > 20000);
  CHECK(raw.size() == offset + data.size());
  CHECK(count_entries(root.root() / "tmp") == 0);

  // Beyond the header limit: refused at commit, nothing published.
  auto writer = store.begin_put({"bucket", "huge"}, ec);
  writer.write(as_bytes("x"), ec);
  (void)writer.commit(sluice::object_attributes{.metadata = {{"m", std::string(2 << 20, 'm')}}}, ec);
  CHECK(ec == errc::invalid_argument);
  (void)store.head({"bucket", "huge"}, ec);
  CHECK(ec == errc::no_such_object);
  CHECK(count_entries(root.root() / "tmp") == 0);
}

TEST_CASE("fs_store: open removes stale temporary files and skips damaged ones") {
  temp_root root;
  {
    fs_store store(root.config());
    make_bucket(store);
    put(store, {"bucket", "good"}, "good");
    error_code ec;
    const std::string id = store.create_upload({"bucket", "up"}, {}, ec);
    REQUIRE_FALSE(ec);
    auto part = store.begin_part({"bucket", "up"}, id, 1, ec);
    part.write(as_bytes("part"), ec);
    (void)part.commit(sluice::object_attributes{.etag = "p1"}, ec);
    REQUIRE_FALSE(ec);
  }
  // What a crash can leave: temporary files and directories, a partial part file.
  const fs::path tmp = root.root() / "tmp";
  std::ofstream(tmp / "object-deadbeef") << "partial";
  fs::create_directories(tmp / "bucket-1234" / "objects");
  std::ofstream(tmp / "bucket-1234" / "bucket.json") << "{}";
  const fs::path uploads = root.root() / "buckets" / "bucket" / "uploads";
  const fs::path upload = fs::directory_iterator(uploads)->path();
  std::ofstream(upload / "tmp-0123") << "partial part";
  std::ofstream(upload / "part-00002") << "not a header";
  // Damage: a file that is not an object, and one whose name is not its key's hash.
  const fs::path shard = root.root() / "buckets" / "bucket" / "objects" / "00";
  fs::create_directories(shard);
  std::ofstream(shard / std::string(64, '0')) << "garbage";
  const auto good_file = object_files(root.root(), "bucket");
  REQUIRE(good_file.size() == 2);
  for (const auto& f : good_file) {
    if (f.parent_path() != shard) fs::copy_file(f, shard / ("00" + std::string(62, '1')));
  }

  fs_store store(root.config());
  CHECK(count_entries(tmp) == 0);
  CHECK_FALSE(fs::exists(upload / "tmp-0123"));
  CHECK_FALSE(fs::exists(upload / "part-00002"));
  CHECK(fs::exists(upload / "part-00001"));
  CHECK(store.skipped_files() == 2);
  error_code ec;
  CHECK(keys_of(store.list(listing("bucket"), ec)) == std::vector<std::string>{"good"});
  CHECK(read_all(store, {"bucket", "good"}) == "good");
  const auto uploads_found = store.list_uploads("bucket", "", ec);
  REQUIRE(uploads_found.size() == 1);
  const auto parts = store.list_parts({"bucket", "up"}, uploads_found[0].upload_id, ec);
  REQUIRE_FALSE(ec);
  REQUIRE(parts.size() == 1);
  CHECK(parts[0].etag == "p1");
}

namespace {

// Runs `child` in a forked process that reports on `ready` when it is mid-write, then SIGKILLs
// it there (after `delay`). The child never returns into the test framework.
template <class Child>
void kill_mid_write(Child child, std::chrono::microseconds delay = {}) {
  std::array<int, 2> ready{};
  REQUIRE(::pipe(ready.data()) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(ready[0]);
    int code = 0;
    try {
      code = child(ready[1]);
    } catch (...) {
      code = 99;
    }
    ::_exit(code);
  }
  ::close(ready[1]);
  char byte = 0;
  const ssize_t n = ::read(ready[0], &byte, 1);
  ::close(ready[0]);
  std::this_thread::sleep_for(delay);
  ::kill(pid, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(n == 1);  // the child got to the middle of its write
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
}

std::string pattern(char seed, std::size_t size) {
  std::string out(size, '\0');
  for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<char>(seed + static_cast<char>(i % 61));
  return out;
}

// In a child: puts 64 MiB into `object` in 64 KiB pieces, reports after 32 MiB, keeps writing,
// and then waits to be killed before it could commit.
int put_until_killed(const fs_store_config& config, const object_ref& object, int ready) {
  error_code ec;
  auto store = fs_store::open(config, ec);
  if (ec) return 1;
  auto writer = store->begin_put(object, ec);
  if (ec) return 2;
  const std::string chunk = pattern('N', 64 << 10);
  for (int i = 0; i < 1024; ++i) {
    writer.write(as_bytes(chunk), ec);
    if (ec) return 3;
    if (i == 512) {
      const char byte = 'x';
      if (::write(ready, &byte, 1) != 1) return 4;
    }
  }
  ::pause();
  (void)writer.commit({}, ec);
  return 5;
}

}  // namespace

TEST_CASE("fs_store: a put killed mid-write leaves the old object intact, or none") {
  temp_root root;
  const std::string old_data = pattern('o', (1 << 20) + 123);
  {
    fs_store store(root.config());
    make_bucket(store);
    put(store, {"bucket", "victim"}, old_data, sluice::object_attributes{.etag = "old"});
  }
  // Each killed writer leaves its partial temporary file (which the next open removes).
  kill_mid_write([&](int ready) { return put_until_killed(root.config(), {"bucket", "victim"}, ready); });
  CHECK(count_entries(root.root() / "tmp") == 1);
  kill_mid_write([&](int ready) { return put_until_killed(root.config(), {"bucket", "new-key"}, ready); });
  CHECK(count_entries(root.root() / "tmp") == 1);

  fs_store store(root.config());
  CHECK(count_entries(root.root() / "tmp") == 0);
  error_code ec;
  CHECK(keys_of(store.list(listing("bucket"), ec)) == std::vector<std::string>{"victim"});
  CHECK(store.head({"bucket", "victim"}, ec).attributes.etag == "old");
  CHECK(read_all(store, {"bucket", "victim"}) == old_data);
  (void)store.head({"bucket", "new-key"}, ec);
  CHECK(ec == errc::no_such_object);
  CHECK(store.skipped_files() == 0);
  check_layout(root);
}

TEST_CASE("fs_store: a writer killed at any point leaves one whole version") {
  temp_root root;
  constexpr std::size_t size = 4 << 20;
  {
    fs_store store(root.config());
    make_bucket(store);
    put(store, {"bucket", "k"}, std::string(size, 'a'));
  }
  std::mt19937 random(12345);
  for (int round = 0; round < 4; ++round) {
    const auto delay = std::chrono::microseconds(random() % 20000);
    kill_mid_write(
        [&](int ready) {
          error_code ec;
          auto store = fs_store::open(root.config(), ec);
          if (ec) return 1;
          for (int version = 0;; ++version) {
            const std::string piece(64 << 10, static_cast<char>('b' + version % 20));
            auto writer = store->begin_put({"bucket", "k"}, ec);
            for (std::size_t done = 0; done < size; done += piece.size()) writer.write(as_bytes(piece), ec);
            (void)writer.commit({}, ec);
            if (ec) return 2;
            if (version == 0) {
              const char byte = 'x';
              if (::write(ready, &byte, 1) != 1) return 3;
            }
          }
        },
        delay);
    fs_store store(root.config());
    const std::string data = read_all(store, {"bucket", "k"});
    CHECK(data.size() == size);
    CHECK(std::count(data.begin(), data.end(), data.front()) == static_cast<long>(size));
    CHECK(count_entries(root.root() / "tmp") == 0);
  }
}

TEST_CASE("fs_store multipart: parts out of order, a replaced part, completion with a subset") {
  temp_root root;
  fs_store store(root.config());
  make_bucket(store);
  const object_ref object{"bucket", "big/object"};
  error_code ec;
  const std::string id = store.create_upload(object, sluice::object_attributes{.content_type = "text/plain"}, ec);
  REQUIRE_FALSE(ec);
  CHECK(is_lower_hex(id, 32));

  auto upload_part = [&](std::uint32_t number, std::string_view data, std::string etag) {
    auto writer = store.begin_part(object, id, number, ec);
    REQUIRE_FALSE(ec);
    writer.write(as_bytes(data), ec);
    REQUIRE_FALSE(ec);
    const auto info = writer.commit(sluice::object_attributes{.etag = std::move(etag)}, ec);
    REQUIRE_FALSE(ec);
    return info;
  };
  const auto p3 = upload_part(3, "ccc", "e3");
  CHECK(p3.key == "big/object");
  CHECK(p3.size == 3);
  CHECK(p3.attributes.etag == "e3");
  upload_part(1, "a", "e1");
  upload_part(2, "bb", "e2");
  upload_part(5, pattern('e', 100000), "e5");
  upload_part(2, "BBBB", "e2b");  // replaces part 2

  (void)store.head(object, ec);
  CHECK(ec == errc::no_such_object);
  const auto parts = store.list_parts(object, id, ec);
  REQUIRE_FALSE(ec);
  REQUIRE(parts.size() == 4);
  CHECK(parts[0].number == 1);
  CHECK(parts[1].number == 2);
  CHECK(parts[1].etag == "e2b");
  CHECK(parts[1].size == 4);
  CHECK(parts[1].last_modified.time_since_epoch().count() != 0);
  CHECK(parts[2].number == 3);
  CHECK(parts[3].number == 5);
  CHECK(parts[3].size == 100000);

  const auto uploads = store.list_uploads("bucket", "", ec);
  REQUIRE(uploads.size() == 1);
  CHECK(uploads[0].key == "big/object");
  CHECK(uploads[0].upload_id == id);
  CHECK(uploads[0].attributes.content_type == "text/plain");
  CHECK(uploads[0].initiated.time_since_epoch().count() != 0);

  const std::vector<part_info> chosen{
      {.number = 1, .etag = "e1"}, {.number = 2, .etag = "e2b"}, {.number = 5, .etag = "e5"}};
  const auto info = store.complete_upload(object, id, chosen, sluice::object_attributes{.etag = "multi-3"}, ec);
  REQUIRE_FALSE(ec);
  CHECK(info.size == 1 + 4 + 100000);
  CHECK(info.attributes.etag == "multi-3");
  CHECK(read_all(store, object) == "aBBBB" + pattern('e', 100000));
  const auto mapping = store.map(object, ec);
  CHECK(mapped_string(mapping) == "aBBBB" + pattern('e', 100000));

  (void)store.list_parts(object, id, ec);
  CHECK(ec == errc::no_such_upload);
  CHECK(store.list_uploads("bucket", "", ec).empty());
  CHECK(count_entries(root.root() / "buckets" / "bucket" / "uploads") == 0);
  CHECK(count_entries(root.root() / "tmp") == 0);
  (void)store.complete_upload(object, id, chosen, {}, ec);
  CHECK(ec == errc::no_such_upload);
  check_layout(root);
}

TEST_CASE("fs_store multipart: invalid parts and order leave the upload intact") {
  temp_root root;
  fs_store store(root.config(false));
  make_bucket(store);
  const object_ref object{"bucket", "k"};
  error_code ec;
  const std::string id = store.create_upload(object, {}, ec);
  for (std::uint32_t n : {1U, 2U}) {
    auto w = store.begin_part(object, id, n, ec);
    w.write(as_bytes(n == 1 ? "one" : "two"), ec);
    (void)w.commit(sluice::object_attributes{.etag = "e" + std::to_string(n)}, ec);
    REQUIRE_FALSE(ec);
  }
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
  const std::vector<part_info> good{{.number = 1, .etag = "e1"}, {.number = 2, .etag = "e2"}};
  (void)store.complete_upload({"bucket", "other"}, id, good, {}, ec);
  CHECK(ec == errc::no_such_upload);
  (void)store.complete_upload(object, "../../../../etc", good, {}, ec);
  CHECK(ec == errc::no_such_upload);
  (void)store.complete_upload(object, "ffffffffffffffffffffffffffffffff", good, {}, ec);
  CHECK(ec == errc::no_such_upload);
  (void)store.complete_upload({"nobucket", "k"}, id, good, {}, ec);
  CHECK(ec == errc::no_such_bucket);
  (void)store.head(object, ec);
  CHECK(ec == errc::no_such_object);
  CHECK(store.list_parts(object, id, ec).size() == 2);
  CHECK(count_entries(root.root() / "tmp") == 0);

  (void)store.complete_upload(object, id, good, {}, ec);
  REQUIRE_FALSE(ec);
  CHECK(read_all(store, object) == "onetwo");
}

TEST_CASE("fs_store multipart: errors of create_upload, begin_part, list and abort") {
  temp_root root;
  fs_store store(root.config(false));
  make_bucket(store);
  error_code ec;
  (void)store.create_upload({"nobucket", "k"}, {}, ec);
  CHECK(ec == errc::no_such_bucket);
  (void)store.create_upload({"bucket", ""}, {}, ec);
  CHECK(ec == errc::invalid_name);
  const std::string id = store.create_upload({"bucket", "k"}, {}, ec);
  REQUIRE_FALSE(ec);
  auto w = store.begin_part({"bucket", "k"}, id, 0, ec);
  CHECK(ec == errc::invalid_argument);
  w.write(as_bytes("x"), ec);
  CHECK(ec == errc::invalid_argument);
  (void)store.begin_part({"bucket", "k"}, id, fs_store::max_part_number + 1, ec);
  CHECK(ec == errc::invalid_argument);
  (void)store.begin_part({"bucket", "k"}, id, fs_store::max_part_number, ec);
  CHECK_FALSE(ec);
  (void)store.begin_part({"bucket", "other"}, id, 1, ec);
  CHECK(ec == errc::no_such_upload);
  (void)store.begin_part({"bucket", "k"}, "../" + id, 1, ec);
  CHECK(ec == errc::no_such_upload);
  (void)store.begin_part({"nobucket", "k"}, id, 1, ec);
  CHECK(ec == errc::no_such_bucket);
  (void)store.list_parts({"bucket", "k"}, "nope", ec);
  CHECK(ec == errc::no_such_upload);
  (void)store.list_uploads("nobucket", "", ec);
  CHECK(ec == errc::no_such_bucket);
  store.abort_upload({"bucket", "k"}, "nope", ec);
  CHECK(ec == errc::no_such_upload);
  store.abort_upload({"bucket", "other"}, id, ec);
  CHECK(ec == errc::no_such_upload);
  store.abort_upload({"nobucket", "k"}, id, ec);
  CHECK(ec == errc::no_such_bucket);

  // Part bound: a part is bounded by max_object_bytes too, and so is the concatenation.
  temp_root small_root;
  fs_store small(fs_store_config{small_root.root(), 4, false});
  make_bucket(small);
  const std::string sid = small.create_upload({"bucket", "k"}, {}, ec);
  for (std::uint32_t n : {1U, 2U}) {
    auto p = small.begin_part({"bucket", "k"}, sid, n, ec);
    p.write(as_bytes("12345"), ec);
    CHECK(ec == errc::capacity_exceeded);
    p.write(as_bytes("123"), ec);
    (void)p.commit(sluice::object_attributes{.etag = "e"}, ec);
    REQUIRE_FALSE(ec);
  }
  const std::vector<part_info> both{{.number = 1, .etag = "e"}, {.number = 2, .etag = "e"}};
  (void)small.complete_upload({"bucket", "k"}, sid, both, {}, ec);
  CHECK(ec == errc::capacity_exceeded);
  CHECK(small.list_parts({"bucket", "k"}, sid, ec).size() == 2);
}

TEST_CASE("fs_store multipart: abort leaves nothing, a bucket with an upload is not empty") {
  temp_root root;
  fs_store store(root.config());
  make_bucket(store);
  const object_ref object{"bucket", "k"};
  error_code ec;
  const std::string id = store.create_upload(object, {}, ec);
  REQUIRE_FALSE(ec);
  auto committed = store.begin_part(object, id, 1, ec);
  committed.write(as_bytes("one"), ec);
  (void)committed.commit(sluice::object_attributes{.etag = "e1"}, ec);
  REQUIRE_FALSE(ec);
  auto open_part = store.begin_part(object, id, 2, ec);
  open_part.write(as_bytes("two"), ec);
  REQUIRE_FALSE(ec);

  store.remove_bucket("bucket", ec);
  CHECK(ec == errc::bucket_not_empty);

  store.abort_upload(object, id, ec);
  REQUIRE_FALSE(ec);
  (void)open_part.commit(sluice::object_attributes{.etag = "e2"}, ec);
  CHECK(ec == errc::no_such_upload);
  (void)store.begin_part(object, id, 3, ec);
  CHECK(ec == errc::no_such_upload);
  (void)store.list_parts(object, id, ec);
  CHECK(ec == errc::no_such_upload);
  store.abort_upload(object, id, ec);
  CHECK(ec == errc::no_such_upload);
  CHECK(store.list_uploads("bucket", "", ec).empty());
  CHECK(count_entries(root.root() / "buckets" / "bucket" / "uploads") == 0);
  CHECK(count_entries(root.root() / "tmp") == 0);
  (void)store.head(object, ec);
  CHECK(ec == errc::no_such_object);

  store.remove_bucket("bucket", ec);
  CHECK_FALSE(ec);
  check_layout(root);
}

TEST_CASE("fs_store multipart: list_uploads sorts by key and filters by prefix, uploads survive a reopen") {
  temp_root root;
  std::string b1;
  {
    fs_store store(root.config(false));
    make_bucket(store);
    error_code ec;
    (void)store.create_upload({"bucket", "b/2"}, {}, ec);
    (void)store.create_upload({"bucket", "a"}, {}, ec);
    b1 = store.create_upload({"bucket", "b/1"}, sluice::object_attributes{.metadata = {{"m", "v"}}}, ec);
    (void)store.create_upload({"bucket", "b/1"}, {}, ec);
    REQUIRE_FALSE(ec);
    auto part = store.begin_part({"bucket", "b/1"}, b1, 9, ec);
    part.write(as_bytes("nine"), ec);
    (void)part.commit(sluice::object_attributes{.etag = "e9", .checksums = {{"crc32c", "abc="}}}, ec);
    REQUIRE_FALSE(ec);
  }
  fs_store store(root.config(false));
  error_code ec;
  const auto all = store.list_uploads("bucket", "", ec);
  REQUIRE_FALSE(ec);
  REQUIRE(all.size() == 4);
  CHECK(all[0].key == "a");
  CHECK(all[1].key == "b/1");
  CHECK(all[2].key == "b/1");
  CHECK(all[1].initiated <= all[2].initiated);
  CHECK(all[3].key == "b/2");
  CHECK(store.list_uploads("bucket", "b/", ec).size() == 3);
  CHECK(store.list_uploads("bucket", "c", ec).empty());

  const auto parts = store.list_parts({"bucket", "b/1"}, b1, ec);
  REQUIRE(parts.size() == 1);
  CHECK(parts[0].number == 9);
  CHECK(parts[0].etag == "e9");
  CHECK(parts[0].checksums.at("crc32c") == "abc=");
  const std::vector<part_info> chosen{{.number = 9, .etag = "e9"}};
  (void)store.complete_upload({"bucket", "b/1"}, b1, chosen, sluice::object_attributes{.etag = "x-1"}, ec);
  REQUIRE_FALSE(ec);
  CHECK(read_all(store, {"bucket", "b/1"}) == "nine");
  CHECK(store.list_uploads("bucket", "", ec).size() == 3);
}

TEST_CASE("fs_store: concurrent writers, readers and overwrites") {
  temp_root root;
  fs_store store(root.config(false));
  make_bucket(store);
  put(store, {"bucket", "hot"}, std::string(256, 'a'));
  constexpr int threads = 4;
  constexpr int per_thread = 32;
  std::vector<std::thread> workers;
  std::vector<int> failures(threads, 0);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&store, &failures, t] {
      const std::string chunk(64, static_cast<char>('b' + t));
      for (int i = 0; i < per_thread; ++i) {
        const std::string key = "t" + std::to_string(t) + "/" + std::to_string(i);
        error_code ec;
        auto writer = store.begin_put({"bucket", key}, ec);
        for (int part = 0; part < 4; ++part) writer.write(as_bytes(key), ec);
        (void)writer.commit({}, ec);
        if (ec) ++failures[static_cast<std::size_t>(t)];
        auto hot = store.begin_put({"bucket", "hot"}, ec);
        for (int part = 0; part < 4; ++part) hot.write(as_bytes(chunk), ec);
        (void)hot.commit({}, ec);
        if (ec) ++failures[static_cast<std::size_t>(t)];
      }
    });
  }
  int torn = 0;
  for (int r = 0; r < threads * per_thread; ++r) {
    error_code ec;
    const auto m = store.map({"bucket", "hot"}, ec);
    const std::string s = mapped_string(m);
    if (ec || s.size() != 256 || std::count(s.begin(), s.end(), s.front()) != 256) ++torn;
    std::string via_read(256, '\0');
    const auto n = store.read({"bucket", "hot"}, 0, std::as_writable_bytes(std::span(via_read)), ec);
    if (ec || n != 256 || std::count(via_read.begin(), via_read.end(), via_read.front()) != 256) ++torn;
  }
  for (auto& w : workers) w.join();
  CHECK(torn == 0);
  for (int f : failures) CHECK(f == 0);
  error_code ec;
  CHECK(store.list(listing("bucket", "t"), ec).objects.size() == threads * per_thread);
  for (int t = 0; t < threads; ++t) {
    const std::string key = "t" + std::to_string(t) + "/" + std::to_string(per_thread - 1);
    CHECK(read_all(store, {"bucket", key}) == key + key + key + key);
  }
  CHECK(count_entries(root.root() / "tmp") == 0);
}

TEST_CASE("fs_store: parse_object_header refuses malformed headers") {
  using sluice::s3::encode_object_header;
  using sluice::s3::parse_object_header;
  error_code ec;
  sluice::object_info info{"key", 42, std::chrono::system_clock::time_point(std::chrono::nanoseconds(123456789)), {}};
  info.attributes.etag = "\"quoted\"";
  info.attributes.metadata = {{"a", "\xff"}};
  const auto header = encode_object_header(info, 0, ec);
  REQUIRE_FALSE(ec);
  CHECK(header.size() == 4096);
  std::uint64_t offset = 0;
  const auto parsed = parse_object_header(header, offset, ec);
  REQUIRE_FALSE(ec);
  CHECK(offset == 4096);
  CHECK(parsed.key == "key");
  CHECK(parsed.size == 42);
  CHECK(parsed.last_modified == info.last_modified);
  CHECK(parsed.attributes == info.attributes);

  // Just the magic, lengths and JSON are enough; the padding may be cut off.
  const std::size_t json_end =
      16 + std::to_integer<std::size_t>(header[12]) + (std::to_integer<std::size_t>(header[13]) << 8);
  (void)parse_object_header(std::span(header).first(json_end), offset, ec);
  CHECK_FALSE(ec);

  auto refused = [&](std::vector<std::byte> bytes) {
    std::uint64_t off = 99;
    const auto got = parse_object_header(bytes, off, ec);
    return ec == errc::protocol_violation && off == 0 && got.key.empty();
  };
  CHECK(refused({}));
  CHECK(refused(std::vector<std::byte>(header.begin(), header.begin() + 15)));
  CHECK(refused(std::vector<std::byte>(header.begin(), header.begin() + static_cast<long>(json_end) - 1)));
  auto bad_magic = header;
  bad_magic[0] = std::byte{'X'};
  CHECK(refused(bad_magic));
  auto nonzero_padding = header;
  nonzero_padding[4000] = std::byte{1};
  CHECK(refused(nonzero_padding));
  auto unaligned = header;
  unaligned[8] = std::byte{1};
  CHECK(refused(unaligned));
  auto oversize = header;
  oversize[10] = std::byte{0x20};  // 2 MiB
  CHECK(refused(oversize));
  auto json_too_long = header;
  json_too_long[13] = std::byte{0x10};  // 4096 + ... > header length
  CHECK(refused(json_too_long));

  auto with_json = [&](std::string_view json) {
    std::vector<std::byte> bytes(4096);
    std::memcpy(bytes.data(), "SLUICEO1", 8);
    bytes[9] = std::byte{0x10};  // 4096
    bytes[12] = static_cast<std::byte>(json.size() & 0xff);
    bytes[13] = static_cast<std::byte>(json.size() >> 8);
    std::memcpy(bytes.data() + 16, json.data(), json.size());
    return bytes;
  };
  const std::string rest = R"("size":1,"last_modified":5,"etag":"","content_type":"","content_encoding":"",)"
                           R"("content_disposition":"","cache_control":"","metadata":[],"checksums":[]})";
  CHECK_FALSE(refused(with_json(R"({"v":1,"key_hex":"6b",)" + rest)));
  CHECK(refused(with_json(R"({"v":2,"key_hex":"6b",)" + rest)));
  CHECK(refused(with_json(R"({"v":1,"key_hex":"6B",)" + rest)));        // upper-case hex
  CHECK(refused(with_json(R"({"v":1,"key_hex":"6",)" + rest)));         // odd length
  CHECK(refused(with_json(R"({"v":1,"key_hex":"",)" + rest)));          // empty key
  CHECK(refused(with_json(R"({"v":1,"v":1,"key_hex":"6b",)" + rest)));  // twice
  CHECK(refused(with_json(R"({"v":1,"x":0,"key_hex":"6b",)" + rest)));  // unknown
  CHECK(refused(with_json(R"({"v":1,"key_hex":"6b"})")));               // missing members
  CHECK(refused(with_json(R"({"v":1,"key_hex":"6b",)" + rest.substr(0, rest.size() - 1))));
  CHECK(refused(with_json("[1,2,3]")));
  CHECK(refused(with_json("\xff")));
}

TEST_CASE("fs_store multipart: a part whose attributes outgrow the reserved header") {
  temp_root root;
  fs_store store(root.config());
  make_bucket(store);
  const object_ref object{"bucket", std::string(1024, 'p')};
  error_code ec;
  const std::string id = store.create_upload(object, {}, ec);
  REQUIRE_FALSE(ec);
  const std::string data = pattern('d', 70000);
  const sluice::object_attributes attributes{.etag = "e1", .checksums = {{"sha256", std::string(9000, 'c')}}};
  auto writer = store.begin_part(object, id, 1, ec);
  writer.write(as_bytes(data), ec);
  REQUIRE_FALSE(ec);
  (void)writer.commit(attributes, ec);
  REQUIRE_FALSE(ec);
  const auto parts = store.list_parts(object, id, ec);
  REQUIRE(parts.size() == 1);
  CHECK(parts[0].size == data.size());
  CHECK(parts[0].checksums == attributes.checksums);
  const std::vector<part_info> chosen{{.number = 1, .etag = "e1"}};
  (void)store.complete_upload(object, id, chosen, {}, ec);
  REQUIRE_FALSE(ec);
  CHECK(read_all(store, object) == data);
  check_layout(root);
}

TEST_CASE("fs_store: later attributes (language, expires, tags, parts, upload id) round-trip, older headers read") {
  temp_root root;
  sluice::object_attributes later{.etag = "e",
                                  .content_language = "de-CH",
                                  .expires = "Wed, 01 Jan 2031 00:00:00 GMT",
                                  .tags = {{"team", "ml"}, {"\xff raw", "v"}},
                                  .part_sizes = {5242880, 5242880, 17},
                                  .upload_id = "0123abcd",
                                  .part_checksums = {"AAAAAA==", "BBBBBB==", "\xff"}};
  {
    fs_store store(root.config(false));
    make_bucket(store);
    put(store, {"bucket", "later"}, "bytes", later);
    put(store, {"bucket", "plain"}, "bytes", sluice::object_attributes{.etag = "p"});
  }
  fs_store store(root.config(false));
  CHECK(store.skipped_files() == 0);
  error_code ec;
  CHECK(store.head({"bucket", "later"}, ec).attributes == later);
  CHECK(store.head({"bucket", "plain"}, ec).attributes == sluice::object_attributes{.etag = "p"});
  // A header without the later members (as written before they existed) still parses, and
  // one that names a member twice or an unknown one does not.
  sluice::object_info info{"k", 3, {}, sluice::object_attributes{.etag = "old"}};
  const auto header = sluice::s3::encode_object_header(info, 0, ec);
  REQUIRE_FALSE(ec);
  const std::string text(reinterpret_cast<const char*>(header.data()), header.size());
  CHECK(text.find("tags") == std::string::npos);
  CHECK(text.find("content_language") == std::string::npos);
  std::uint64_t data_offset = 0;
  CHECK(sluice::s3::parse_object_header(header, data_offset, ec).attributes.etag == "old");
  CHECK_FALSE(ec);
}

TEST_CASE("fs_store and memory_store: bucket settings (location, tags) kept, replaced, read back after a reopen") {
  static_assert(sluice::settings_keeping_store<fs_store>);
  static_assert(sluice::settings_keeping_store<sluice::memory_store>);
  temp_root root;
  const sluice::bucket_settings set{"eu-west-1", {{"team", "storage"}, {"\xC3\xA9", ""}}};
  {
    fs_store store(root.config());
    error_code ec;
    store.create_bucket("bkt", "OWNER", ec);
    REQUIRE_FALSE(ec);
    CHECK(store.bucket_settings_of("bkt", ec) == sluice::bucket_settings{});
    store.set_bucket_settings("bkt", set, ec);
    CHECK_FALSE(ec);
    CHECK(store.bucket_settings_of("bkt", ec) == set);
    (void)store.bucket_settings_of("none", ec);
    CHECK(ec == sluice::errc::no_such_bucket);
    store.set_bucket_settings("none", set, ec);
    CHECK(ec == sluice::errc::no_such_bucket);
    // More than bucket.json may hold: refused, the old settings stay.
    sluice::bucket_settings huge;
    huge.location = std::string(fs_store::max_bucket_json_bytes, 'x');
    store.set_bucket_settings("bkt", huge, ec);
    CHECK(ec == sluice::errc::capacity_exceeded);
    CHECK(store.bucket_settings_of("bkt", ec) == set);
  }
  {
    fs_store store(root.config());
    error_code ec;
    CHECK(store.skipped_files() == 0);
    CHECK(store.bucket_settings_of("bkt", ec) == set);
    CHECK(store.bucket_owner("bkt") == std::optional<std::string>("OWNER"));  // the owner is kept beside them
    store.set_bucket_settings("bkt", sluice::bucket_settings{"eu-west-1", {}}, ec);
    CHECK_FALSE(ec);
  }
  fs_store store(root.config());
  error_code ec;
  CHECK(store.bucket_settings_of("bkt", ec) == sluice::bucket_settings{"eu-west-1", {}});

  sluice::memory_store memory;
  memory.create_bucket("mem", ec);
  memory.set_bucket_settings("mem", set, ec);
  CHECK_FALSE(ec);
  CHECK(memory.bucket_settings_of("mem", ec) == set);
  memory.set_bucket_settings("none", set, ec);
  CHECK(ec == sluice::errc::no_such_bucket);
}

TEST_CASE("fs_store: conditional commits and completions publish only over the version they expect") {
  temp_root root;
  fs_store store(root.config(false));
  make_bucket(store);
  const object_ref object{"bucket", "k"};
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
  CHECK(conditional_put("second", {.if_absent = true}) == errc::precondition_failed);
  CHECK(read_all(store, object) == "first");
  CHECK(conditional_put("third", {.if_etag = "nope"}) == errc::precondition_failed);
  CHECK(read_all(store, object) == "first");
  CHECK_FALSE(conditional_put("third", {.if_etag = "first"}));
  CHECK(read_all(store, object) == "third");
  CHECK(conditional_put("x", {.if_etag = "other"}) == errc::precondition_failed);
  CHECK(object_files(root.root(), "bucket").size() == 1);  // the refused writers left no file
  check_layout(root);

  const std::string id = store.create_upload(object, {}, ec);
  REQUIRE_FALSE(ec);
  auto part = store.begin_part(object, id, 1, ec);
  part.write(as_bytes("multipart"), ec);
  (void)part.commit(sluice::object_attributes{.etag = "p1"}, ec);
  REQUIRE_FALSE(ec);
  const std::vector<sluice::part_info> chosen{{.number = 1, .size = 9, .etag = "p1"}};
  (void)store.complete_upload(object, id, chosen, sluice::object_attributes{.etag = "mp"}, ec, {.if_absent = true});
  CHECK(ec == errc::precondition_failed);
  CHECK(read_all(store, object) == "third");
  CHECK(store.list_parts(object, id, ec).size() == 1);  // the upload stays
  (void)store.complete_upload(object, id, chosen, sluice::object_attributes{.etag = "mp"}, ec, {.if_etag = "third"});
  CHECK_FALSE(ec);
  CHECK(read_all(store, object) == "multipart");
}

TEST_CASE("fs_store: a writer filled with pwrite at its data offset counts the bytes with wrote()") {
  temp_root root;
  error_code ec;
  auto store = fs_store::open(root.config(false), ec);
  REQUIRE(store != nullptr);
  store->create_bucket("bucket", ec);
  REQUIRE_FALSE(ec);
  auto writer = store->begin_put({"bucket", "parallel"}, ec);
  REQUIRE_FALSE(ec);
  // Written out of order, as parallel fetchers do.
  REQUIRE(::pwrite(writer.native_handle(), "world", 5, static_cast<off_t>(writer.data_offset() + 6)) == 5);
  REQUIRE(::pwrite(writer.native_handle(), "hello ", 6, static_cast<off_t>(writer.data_offset())) == 6);
  writer.wrote(11, ec);
  REQUIRE_FALSE(ec);
  CHECK(writer.bytes_in_file() == 11);
  (void)writer.commit({}, ec);
  REQUIRE_FALSE(ec);
  CHECK(read_all(*store, {"bucket", "parallel"}) == "hello world");

  auto mixed = store->begin_put({"bucket", "mixed"}, ec);
  REQUIRE_FALSE(ec);
  mixed.write(as_bytes("pending"), ec);  // less than a write unit: held back, not in the file
  REQUIRE_FALSE(ec);
  CHECK(mixed.bytes_in_file() == 0);
  mixed.wrote(3, ec);
  CHECK(ec == errc::invalid_argument);
}
