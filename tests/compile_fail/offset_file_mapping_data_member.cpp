// SPDX-License-Identifier: Apache-2.0
// data_offset() is a member function; a data member of that name is not the capability.
#include <sluice/concepts.hpp>

// What every mapping has: its bytes and its info.
struct mapping_base {
  [[nodiscard]] sluice::const_region region() const { return {}; }
  [[nodiscard]] const sluice::object_info& info() const { return info_; }
  sluice::object_info info_;
};

struct candidate : mapping_base {
  [[nodiscard]] int native_handle() const { return -1; }
#ifdef SLUICE_CF_CONTROL
  [[nodiscard]] std::uint64_t data_offset() const { return 0; }
#else
  std::uint64_t data_offset = 0;
#endif
};

static_assert(sluice::file_backed_mapping<candidate>);
static_assert(sluice::offset_file_mapping<candidate>);

int main() {}
