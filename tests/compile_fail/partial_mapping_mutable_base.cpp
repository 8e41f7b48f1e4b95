// SPDX-License-Identifier: Apache-2.0
// base() is read through a const mapping: a base() that is not const is not used.
#include <sluice/concepts.hpp>

// What every mapping has: its bytes and its info.
struct mapping_base {
  [[nodiscard]] sluice::const_region region() const { return {}; }
  [[nodiscard]] const sluice::object_info& info() const { return info_; }
  sluice::object_info info_;
};

struct candidate : mapping_base {
#ifdef SLUICE_CF_CONTROL
  [[nodiscard]] std::uint64_t base() const { return 0; }
#else
  [[nodiscard]] std::uint64_t base() { return 0; }
#endif
};

static_assert(sluice::object_mapping<candidate>);
static_assert(sluice::partial_mapping<candidate>);

int main() {}
