// SPDX-License-Identifier: Apache-2.0
// An in-process S3 server over a memory_store on 127.0.0.1 and an ephemeral port, with one user,
// and a client configuration for it: what the s3::client tests run against.
#pragma once

#include <sluice/memory_store.hpp>
#include <sluice/s3/client.hpp>
#include <sluice/s3/server.hpp>

#include <chrono>
#include <string>
#include <utility>

namespace sluice::testing {

inline constexpr const char* s3_access_key = "AKIDSLUICETEST";
inline constexpr const char* s3_secret_key = "sluice-test-secret";

/// The server, listening from construction.
struct live_server {
  static s3::server_config defaults() {
    s3::server_config config;
    config.port = 0;
    config.users = {{s3_access_key, s3_secret_key}};
    config.io_threads = 2;
    return config;
  }

  explicit live_server(s3::server_config config = defaults()) : server(store, std::move(config)) { server.listen(); }

  [[nodiscard]] std::string endpoint() const {
    return "http://127.0.0.1:" + std::to_string(server.local_endpoint().port());
  }

  sluice::memory_store store;
  s3::server server;
};

/// A client of `endpoint` as that user: 5 MiB parts, retries 10 ms apart.
inline s3::client_config config_for(const std::string& endpoint) {
  s3::client_config config;
  config.endpoint = endpoint;
  config.creds = {s3_access_key, s3_secret_key};
  config.part_size = 5 * mib;
  config.retry_base_delay = std::chrono::milliseconds(10);
  return config;
}

}  // namespace sluice::testing
