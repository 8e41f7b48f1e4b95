// SPDX-License-Identifier: Apache-2.0
// S3 pieces for conformance fixtures: a remote that is an object on a live S3 server, seen
// through a client (the transports of sluice/s3/path.hpp move to and from it), and an in-process
// server over a memory_store to hold it.
#pragma once

#include <sluice/memory_store.hpp>
#include <sluice/s3/client.hpp>
#include <sluice/s3/path.hpp>
#include <sluice/s3/server.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace sluice::testing {

/// An object `bucket`/`key` written with `initial` over HTTP; contents() reads it back whole.
class s3_remote {
 public:
  s3_remote(s3::client& client, std::string bucket, std::string key, std::span<const std::byte> initial)
      : client_(&client), remote_{std::move(bucket), std::move(key), initial.size(), {}} {
    std::vector<std::byte> copy(initial.begin(), initial.end());
    s3::put_options options;
    options.via = s3::transfer_via::http;
    error_code ec;
    remote_.etag = client_->put_object(remote_.bucket, remote_.key, host_region(copy), options, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
  }
  [[nodiscard]] const s3::object_remote& descriptor() const { return remote_; }
  [[nodiscard]] std::vector<std::byte> contents() const {
    error_code ec;
    const object_info info = client_->head_object(remote_.bucket, remote_.key, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    std::vector<std::byte> out(info.size);
    if (info.size != 0) {
      s3::get_options options;
      options.via = s3::transfer_via::http;
      client_->get_object(remote_.bucket, remote_.key, host_region(out), options, ec);
      REQUIRE_MESSAGE(!ec, ec.message());
    }
    return out;
  }

 private:
  s3::client* client_;
  s3::object_remote remote_;
};

/// A server over a memory_store on 127.0.0.1 (an ephemeral port), a bucket, and a client to it.
struct s3_memory_server {
  s3_memory_server() : server(store, config()) {
    server.listen();
    s3::client_config c;
    c.endpoint = "http://127.0.0.1:" + std::to_string(server.local_endpoint().port());
    c.creds = {"AK", "SK"};
    c.part_size = 5 * mib;
    c.multipart_threshold = 6 * mib;
    client = std::make_unique<s3::client>(c);
    client->create_bucket("bkt");
  }
  static s3::server_config config() {
    s3::server_config c;
    c.port = 0;
    c.users = {{"AK", "SK"}};
    c.io_threads = 2;
    return c;
  }
  testing::s3_remote make_remote(std::span<const std::byte> initial) {
    return {*client, "bkt", "remote-" + std::to_string(next++), initial};
  }
  memory_store store;
  s3::server server;
  std::unique_ptr<s3::client> client;
  std::atomic<int> next{0};
};

}  // namespace sluice::testing
