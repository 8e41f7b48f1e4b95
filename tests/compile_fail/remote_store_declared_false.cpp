// SPDX-License-Identifier: Apache-2.0
// A remote store declares `static constexpr bool remote = true`; one that declares it false is
// not remote (the server keeps its calls on the network threads).
#include <sluice/memory_store.hpp>

struct candidate : sluice::memory_store {
#ifdef SLUICE_CF_CONTROL
  static constexpr bool remote = true;
#else
  static constexpr bool remote = false;
#endif
};

static_assert(sluice::servable_store<candidate>);
static_assert(sluice::remote_store<candidate>);

int main() {}
