// SPDX-License-Identifier: Apache-2.0
// What an embedder compiles to serve a store type of its own over S3: the store, the server's
// public header, and the server's construction (any_store::wrap instantiates the small adapter;
// the server itself is compiled once, in the library). scripts/compile_cost.sh times it; the
// unit tests link it (serves_a_store_of_its_own) so that it keeps compiling and serving.
#include <sluice/memory_store.hpp>
#include <sluice/s3/server.hpp>

#include <string>

namespace embedder {

/// A store of the embedder's own type: memory_store's behaviour, counting the objects it is
/// asked to map (an optional capability the adapter must not lose: none here).
class counting_store : public sluice::memory_store {
 public:
  mapping_type map(const sluice::object_ref& object, sluice::error_code& ec) {
    ++maps;
    return memory_store::map(object, ec);
  }
  int maps = 0;
};

/// Serves `store` on an ephemeral loopback port with one user; returns the port.
std::uint16_t serve(counting_store& store, std::unique_ptr<sluice::s3::server>& running) {
  sluice::s3::server_config config;
  config.port = 0;
  config.users = {{"AK", "SK"}};
  config.io_threads = 1;
  running = std::make_unique<sluice::s3::server>(store, config);
  running->listen();
  return running->local_endpoint().port();
}

}  // namespace embedder
