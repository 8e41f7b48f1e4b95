// SPDX-License-Identifier: Apache-2.0
// map_range takes the HTTP Range header as the client sent it; one that takes a parsed
// byte_range is not the capability.
#include <sluice/memory_store.hpp>

struct candidate : sluice::memory_store {
  mapping map_range(const sluice::object_ref& /*obj*/, sluice::byte_range /*range*/, sluice::error_code& /*ec*/) {
    return {};
  }
#ifdef SLUICE_CF_CONTROL
  mapping map_range(const sluice::object_ref& /*obj*/, std::string_view /*range*/, sluice::error_code& /*ec*/) {
    return {};
  }
#endif
};

static_assert(sluice::servable_store<candidate>);
static_assert(sluice::range_mapping_store<candidate>);

int main() {}
