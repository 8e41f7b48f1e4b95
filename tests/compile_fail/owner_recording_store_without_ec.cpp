// SPDX-License-Identifier: Apache-2.0
// create_bucket(bucket, owner, ec) records the owner; an overload without the error_code is not
// the capability.
#include <sluice/memory_store.hpp>

struct candidate : sluice::memory_store {
  using memory_store::create_bucket;
  void create_bucket(std::string_view /*bucket*/, std::string_view /*owner*/) {}
#ifdef SLUICE_CF_CONTROL
  void create_bucket(std::string_view /*bucket*/, std::string_view /*owner*/, sluice::error_code& /*ec*/) {}
#endif
};

static_assert(sluice::servable_store<candidate>);
static_assert(sluice::owner_recording_store<candidate>);

int main() {}
