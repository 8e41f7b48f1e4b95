// SPDX-License-Identifier: Apache-2.0
// s3::server reads objects in place: it rejects a multipart store that cannot map them.
#include <sluice/memory_store.hpp>
#include <sluice/s3/server.hpp>

class candidate : sluice::memory_store {
 public:
  using memory_store::abort_upload;
  using memory_store::begin_part;
  using memory_store::begin_put;
  using memory_store::complete_upload;
  using memory_store::create_bucket;
  using memory_store::create_upload;
  using memory_store::head;
  using memory_store::list;
  using memory_store::list_buckets;
  using memory_store::list_parts;
  using memory_store::list_uploads;
  using memory_store::part_writer_type;
  using memory_store::read;
  using memory_store::remove;
  using memory_store::remove_bucket;
  using memory_store::writer_type;
#ifdef SLUICE_CF_CONTROL
  using memory_store::map;
  using memory_store::mapping_type;
#endif
};

static_assert(sluice::multipart_store<candidate>);

int main() {
  candidate store;
  sluice::s3::server server(store, sluice::s3::server_config{});
}
