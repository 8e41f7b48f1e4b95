// SPDX-License-Identifier: Apache-2.0
// async_wait_until(end, done) reports a fill that failed to `done`; a `done` without the
// error_code is not the capability (the server would send bytes that never came).
#include <sluice/concepts.hpp>

#include <functional>

// What every mapping has: its bytes and its info.
struct mapping_base {
  [[nodiscard]] sluice::const_region region() const { return {}; }
  [[nodiscard]] const sluice::object_info& info() const { return info_; }
  sluice::object_info info_;
};

struct candidate : mapping_base {
  [[nodiscard]] bool ready(std::uint64_t /*end*/) const { return true; }
#ifdef SLUICE_CF_CONTROL
  void async_wait_until(std::uint64_t /*end*/, std::function<void(sluice::error_code)> done) const { done({}); }
#else
  void async_wait_until(std::uint64_t /*end*/, std::function<void()> done) const { done(); }
#endif
};

static_assert(sluice::object_mapping<candidate>);
static_assert(sluice::growing_mapping<candidate>);

int main() {}
