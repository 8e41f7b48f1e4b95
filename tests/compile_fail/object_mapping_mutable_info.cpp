// SPDX-License-Identifier: Apache-2.0
// A mapping is read through a const reference: an info() that is not const is not a mapping's.
#include <sluice/concepts.hpp>

struct candidate {
  [[nodiscard]] sluice::const_region region() const { return {}; }
#ifdef SLUICE_CF_CONTROL
  [[nodiscard]] const sluice::object_info& info() const { return info_; }
#else
  [[nodiscard]] const sluice::object_info& info() { return info_; }
#endif
  sluice::object_info info_;
};

static_assert(sluice::object_mapping<candidate>);

int main() {}
