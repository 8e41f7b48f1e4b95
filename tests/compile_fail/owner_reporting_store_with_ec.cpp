// SPDX-License-Identifier: Apache-2.0
// bucket_owner(bucket) answers from what the store holds, without an error_code: one that takes
// an error_code is not the capability.
#include <sluice/memory_store.hpp>

#include <optional>
#include <string>

struct candidate : sluice::memory_store {
  std::optional<std::string> bucket_owner(std::string_view /*bucket*/, sluice::error_code& /*ec*/) const { return {}; }
#ifdef SLUICE_CF_CONTROL
  std::optional<std::string> bucket_owner(std::string_view /*bucket*/) const { return {}; }
#endif
};

static_assert(sluice::servable_store<candidate>);
static_assert(sluice::owner_reporting_store<candidate>);

int main() {}
