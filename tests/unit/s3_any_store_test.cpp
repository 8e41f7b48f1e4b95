// SPDX-License-Identifier: Apache-2.0
#include <sluice/s3/any_store.hpp>

#include <sluice/memory_store.hpp>
#include <sluice/s3/client.hpp>
#include <sluice/s3/fs_store.hpp>
#include <sluice/s3/server.hpp>

#include <doctest/doctest.h>

#include "compile_cost/own_store_server.cpp"
#include "temp_dir.hpp"

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace s3 = sluice::s3;

TEST_CASE("any_store: the shipped stores keep their capabilities behind the erasure") {
  sluice::memory_store memory;
  const auto erased_memory = s3::any_store::wrap(memory);
  CHECK_FALSE(erased_memory->remote());
  CHECK_FALSE(erased_memory->speculates());

  sluice::error_code ec;
  erased_memory->create_bucket("bucket", "OWNER", ec);
  REQUIRE_FALSE(ec);
  auto writer = erased_memory->begin_put({"bucket", "k"}, ec);
  REQUIRE_FALSE(ec);
  const std::string text = "hello, any_store";
  writer.write(std::as_bytes(std::span(text)), ec);
  REQUIRE_FALSE(ec);
  sluice::object_attributes attributes;
  attributes.etag = "e";
  (void)writer.commit(attributes, ec);
  REQUIRE_FALSE(ec);
  const s3::any_mapping mapped = erased_memory->map({"bucket", "k"}, ec);
  REQUIRE_FALSE(ec);
  CHECK(mapped.info().size == text.size());
  CHECK(mapped.base() == 0);
  CHECK(mapped.native_handle() == -1);  // memory_store's mapping has no file
  CHECK_FALSE(mapped.growing());
  CHECK(mapped.ready(text.size()));
  int answers = 0;
  mapped.async_wait_until(text.size(), [&](sluice::error_code e) {  // a whole mapping: at once
    ++answers;
    CHECK_FALSE(e);
  });
  CHECK(answers == 1);
  CHECK(std::string_view(reinterpret_cast<const char*>(mapped.region().bytes()), mapped.region().size) == text);
  CHECK(mapped.get<sluice::memory_store::mapping_type>() != nullptr);

  // A store without async_mapping_store: async_map makes the blocking call as a job given to the
  // runner (the server's blocking pool), and answers from there.
  CHECK_FALSE(erased_memory->maps_async());
  std::vector<std::function<void()>> jobs;
  const sluice::blocking_runner run = [&](std::function<void()> job) { jobs.push_back(std::move(job)); };
  std::vector<std::pair<sluice::error_code, std::uint64_t>> maps;
  for (const auto kind : {s3::any_store::async_map_kind::streaming, s3::any_store::async_map_kind::describe}) {
    erased_memory->async_map({"bucket", "k"}, kind, run, [&](sluice::error_code e, s3::any_mapping m) {
      maps.emplace_back(e, e ? 0 : m.info().size);
    });
  }
  erased_memory->async_map({"bucket", "missing"}, s3::any_store::async_map_kind::streaming, run,
                           [&](sluice::error_code e, const s3::any_mapping&) { maps.emplace_back(e, 0); });
  CHECK(maps.empty());  // nothing runs on the caller's thread
  REQUIRE(jobs.size() == 3);
  for (const auto& job : jobs) job();
  REQUIRE(maps.size() == 3);
  CHECK((!maps[0].first && maps[0].second == text.size()));
  CHECK((!maps[1].first && maps[1].second == text.size()));
  CHECK(maps[2].first == sluice::errc::no_such_object);

  const sluice::testing::temp_dir root("any-store");
  s3::fs_store files(s3::fs_store_config{root.path() / "root", 5ULL << 40, false});
  const auto erased_files = s3::any_store::wrap(files);
  erased_files->create_bucket("owned", "ALICE", ec);
  REQUIRE_FALSE(ec);
  CHECK(erased_files->bucket_owner("owned") == "ALICE");  // fs_store keeps the owner: not lost
  auto put = erased_files->begin_put({"owned", "k"}, ec);
  REQUIRE_FALSE(ec);
  put.write(std::as_bytes(std::span(text)), ec);
  (void)put.commit(attributes, ec);
  REQUIRE_FALSE(ec);
  const s3::any_mapping file_mapped = erased_files->map({"owned", "k"}, ec);
  REQUIRE_FALSE(ec);
  CHECK(file_mapped.native_handle() >= 0);  // sendfile and pread keep working through the erasure
}

TEST_CASE("any_store: a store type of the embedder's own is served, its own members called") {
  embedder::counting_store store;
  std::unique_ptr<s3::server> running;
  const std::uint16_t port = embedder::serve(store, running);
  s3::client_config config;
  config.endpoint = "http://127.0.0.1:" + std::to_string(port);
  config.creds = {"AK", "SK"};
  s3::client client(config);
  client.create_bucket("mine");
  std::vector<std::byte> data(5000, std::byte{0x5A});
  (void)client.put_object("mine", "k", sluice::host_region(data));
  std::vector<std::byte> back(data.size());
  CHECK(client.get_object("mine", "k", sluice::host_region(back)) == data.size());
  CHECK(back == data);
  CHECK(store.maps >= 1);  // the GET reached counting_store::map, not memory_store's
}
