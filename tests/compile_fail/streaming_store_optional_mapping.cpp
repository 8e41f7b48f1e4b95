// SPDX-License-Identifier: Apache-2.0
// map_streaming returns a mapping (an empty one, with `ec`, on error); an optional is not one.
#include <sluice/memory_store.hpp>

#include <optional>

struct candidate : sluice::memory_store {
#ifdef SLUICE_CF_CONTROL
  mapping map_streaming(const sluice::object_ref& /*obj*/, sluice::error_code& /*ec*/) { return {}; }
#else
  std::optional<mapping> map_streaming(const sluice::object_ref& /*obj*/, sluice::error_code& /*ec*/) { return {}; }
#endif
};

static_assert(sluice::servable_store<candidate>);
static_assert(sluice::streaming_store<candidate>);

int main() {}
