// SPDX-License-Identifier: Apache-2.0
// A copy lent by map_unconfirmed is answered with only once confirm() said it is current: a
// store without confirm does not speculate.
#include <sluice/memory_store.hpp>

#include <optional>
#include <string_view>

struct candidate : sluice::memory_store {
  std::optional<mapping> map_unconfirmed(const sluice::object_ref& /*obj*/, std::string_view /*if_match*/) {
    return {};
  }
#ifdef SLUICE_CF_CONTROL
  bool confirm(const sluice::object_ref& /*obj*/, const mapping& /*m*/) { return true; }
#endif
};

static_assert(sluice::servable_store<candidate>);
static_assert(sluice::speculating_store<candidate>);

int main() {}
