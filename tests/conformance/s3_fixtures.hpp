// S3 pieces for conformance fixtures: a remote that is an object on a live S3 server, seen
// through a client (the transports of sluice/s3/path.hpp move to and from it).
#pragma once

#include <sluice/s3/client.hpp>
#include <sluice/s3/path.hpp>

#include <doctest/doctest.h>

#include <cstddef>
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

}  // namespace sluice::testing
