// SPDX-License-Identifier: Apache-2.0
// describe(obj, ec) reports a missing object in `ec`; a describe without it is not used.
#include <sluice/memory_store.hpp>

struct candidate : sluice::memory_store {
  mapping describe(const sluice::object_ref& /*obj*/) const { return {}; }
#ifdef SLUICE_CF_CONTROL
  mapping describe(const sluice::object_ref& /*obj*/, sluice::error_code& /*ec*/) const { return {}; }
#endif
};

static_assert(sluice::servable_store<candidate>);
static_assert(sluice::describing_store<candidate>);

int main() {}
