// wait_until(end, ec) reports a fill that failed; a wait_until without the error_code is not
// the capability (the server would send bytes that never came).
#include <sluice/concepts.hpp>

// What every mapping has: its bytes and its info.
struct mapping_base {
  [[nodiscard]] sluice::const_region region() const { return {}; }
  [[nodiscard]] const sluice::object_info& info() const { return info_; }
  sluice::object_info info_;
};

struct candidate : mapping_base {
  [[nodiscard]] bool ready(std::uint64_t /*end*/) const { return true; }
#ifdef SLUICE_CF_CONTROL
  void wait_until(std::uint64_t /*end*/, sluice::error_code& /*ec*/) const {}
#else
  void wait_until(std::uint64_t /*end*/) const {}
#endif
};

static_assert(sluice::object_mapping<candidate>);
static_assert(sluice::growing_mapping<candidate>);

int main() {}
