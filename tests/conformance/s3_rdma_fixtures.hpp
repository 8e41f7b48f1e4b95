// SPDX-License-Identifier: Apache-2.0
// An S3 server and client in this process whose bytes cross a real libfabric provider: the
// server (a memory_store) with an RDMA plane on one provider, the client with a plane on another
// (or the same). Shared by the fabric and GPU tests of the token protocol.
#pragma once

#include <sluice/fabric/s3_plane.hpp>
#include <sluice/memory_store.hpp>
#include <sluice/s3/client.hpp>
#include <sluice/s3/server.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <span>
#include <string>

#include "conformance/s3_fixtures.hpp"

namespace sluice::testing {

/// The server's plane opens `server_provider` ("": the server has none and declines every token)
/// with small staging buffers (1 MiB × 8: every large transfer spans several); the client's plane
/// opens `client_provider` on `client_endpoints` endpoints, asking for FI_HMEM when `hmem`. The
/// client splits above 6 MiB into 5 MiB parts. Bucket "bkt" exists.
struct rdma_s3_server {
  explicit rdma_s3_server(const std::string& server_provider, const std::string& client_provider,
                          std::size_t client_endpoints = 1, bool hmem = false) {
    s3::server_config config;
    config.port = 0;
    config.users = {{"AK", "SK"}};
    error_code ec;
    if (!server_provider.empty()) {
      fabric::server_plane_config plane;
      plane.fabric.provider = server_provider;
      plane.fabric.node = "127.0.0.1";
      plane.staging_buffer_bytes = 1 * mib;
      plane.staging_buffers = 8;
      config.rdma = server_plane = fabric::server_plane::open(plane, ec);
      REQUIRE_MESSAGE(!ec, ec.message());
    }
    server = std::make_unique<s3::server>(store, config);
    server->listen();
    s3::client_config c;
    c.endpoint = "http://127.0.0.1:" + std::to_string(server->local_endpoint().port());
    c.creds = {"AK", "SK"};
    c.part_size = 5 * mib;
    c.multipart_threshold = 6 * mib;
    fabric::client_plane_config plane;
    plane.fabric.provider = client_provider;
    plane.fabric.node = "127.0.0.1";
    plane.fabric.hmem = hmem;
    plane.endpoints = client_endpoints;
    c.rdma = client_plane = fabric::client_plane::open(plane, true, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    client = std::make_unique<s3::client>(c);
    client->create_bucket("bkt");
  }

  /// A fresh object "remote-N" holding `initial`, for the transport conformance suite.
  s3_remote make_remote(std::span<const std::byte> initial) {
    return {*client, "bkt", "remote-" + std::to_string(next++), initial};
  }

  memory_store store;
  std::shared_ptr<fabric::server_plane> server_plane;
  std::unique_ptr<s3::server> server;
  std::shared_ptr<fabric::client_plane> client_plane;
  std::unique_ptr<s3::client> client;
  std::atomic<int> next{0};
};

}  // namespace sluice::testing
