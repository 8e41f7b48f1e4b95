// SPDX-License-Identifier: Apache-2.0
// bucket_settings_of answers the bucket's settings themselves (errors in `ec`): a store whose
// answer is another type (an optional, here) does not keep bucket settings for the server.
#include <sluice/memory_store.hpp>

#include <optional>
#include <string_view>

struct candidate : sluice::memory_store {
#ifdef SLUICE_CF_CONTROL
  sluice::bucket_settings bucket_settings_of(std::string_view name, sluice::error_code& ec) const {
    return memory_store::bucket_settings_of(name, ec);
  }
#else
  std::optional<sluice::bucket_settings> bucket_settings_of(std::string_view /*name*/,
                                                            sluice::error_code& /*ec*/) const {
    return std::nullopt;
  }
#endif
};

static_assert(sluice::settings_keeping_store<candidate>);

int main() {}
