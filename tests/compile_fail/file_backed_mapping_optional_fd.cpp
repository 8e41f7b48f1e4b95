// SPDX-License-Identifier: Apache-2.0
// native_handle() is a descriptor, -1 for none; an optional descriptor is not one.
#include <sluice/concepts.hpp>

#include <optional>

// What every mapping has: its bytes and its info.
struct mapping_base {
  [[nodiscard]] sluice::const_region region() const { return {}; }
  [[nodiscard]] const sluice::object_info& info() const { return info_; }
  sluice::object_info info_;
};

struct candidate : mapping_base {
#ifdef SLUICE_CF_CONTROL
  [[nodiscard]] int native_handle() const { return -1; }
#else
  [[nodiscard]] std::optional<int> native_handle() const { return std::nullopt; }
#endif
};

static_assert(sluice::object_mapping<candidate>);
static_assert(sluice::file_backed_mapping<candidate>);

int main() {}
